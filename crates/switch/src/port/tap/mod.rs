//! A tap port: frames to and from the host stack (or a namespace the tap
//! is moved into) through /dev/net/tun, with the same 12-byte virtio-net
//! header as virtio ports. Reads happen only after epoll reports the tap
//! readable, until it would block; each frame costs one read or write.

mod spec;
pub use spec::TapSpec;

use super::{DeliverCx, Described, Kind, Port, Switch, Watch, Watched};
use crate::datapath::{DeliverError, Frame, FrameCtx};
use crate::offload::Caps;
use crate::stats::DropReason;
use crate::sys::tun;
use crate::vhost_user::buffers::Src;
use crate::vlan::Tagging;
use crate::wire::virtio_net;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Largest frame plus header a tap read returns.
pub const BUF_LEN: usize = virtio_net::HEADER_LEN + 65535 + 18;

/// Why a tap port could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot open tap interface {name}")]
pub struct TapError {
    /// Interface name.
    pub name: String,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// The port.
#[derive(Debug)]
pub struct TapPort {
    file: File,
    ifname: String,
    readable: bool,
    /// Where frames are read (taken out while they are forwarded).
    rx: Option<Box<[u8]>>,
    out: Box<[u8]>,
    /// In another namespace, made persistent (see [`TapPort::in_netns`]).
    persistent: bool,
}

impl TapPort {
    /// Opens (or creates) tap interface `name`.
    pub fn new(name: &str) -> Result<Self, TapError> {
        Self::with_offloads(name, true)
    }

    /// Like [`TapPort::new`]; `offloads: false` asks the kernel for
    /// MTU-sized, fully checksummed frames.
    pub fn with_offloads(name: &str, offloads: bool) -> Result<Self, TapError> {
        let (file, ifname) =
            tun::open_tap(name, virtio_net::HEADER_LEN as i32, offloads).map_err(|source| {
                TapError {
                    name: name.to_string(),
                    source,
                }
            })?;
        Ok(Self {
            file,
            ifname,
            readable: true,
            rx: Some(vec![0u8; BUF_LEN].into_boxed_slice()),
            out: vec![0u8; BUF_LEN].into_boxed_slice(),
            persistent: false,
        })
    }

    /// Opens (or creates) tap interface `name` inside the network namespace
    /// whose file is `netns`, and makes it persistent: the interface, with
    /// the addresses and routes its namespace gave it, outlives the switch
    /// process, and a restarted switch takes it over by the same call. It
    /// goes with [`TapPort::release`] (`port del`) or with its namespace.
    pub fn in_netns(name: &str, netns: &std::path::Path, offloads: bool) -> Result<Self, TapError> {
        let err = |source| TapError {
            name: format!("{name} in {}", netns.display()),
            source,
        };
        let (file, ifname) =
            tun::open_tap_in(netns, name, virtio_net::HEADER_LEN as i32, offloads).map_err(err)?;
        tun::set_persist(&file, true).map_err(err)?;
        Ok(Self {
            file,
            ifname,
            readable: true,
            rx: Some(vec![0u8; BUF_LEN].into_boxed_slice()),
            out: vec![0u8; BUF_LEN].into_boxed_slice(),
            persistent: true,
        })
    }

    /// The port is deleted: a persistent tap is made to go with its file.
    /// (Not on drop: a switch that stops keeps its namespaces' taps for
    /// the next run.)
    pub fn release(&self) {
        if self.persistent {
            if let Err(e) = tun::set_persist(&self.file, false) {
                log::warn!("tap {}: cannot remove it: {e}", self.ifname);
            }
        }
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// What the worker should watch.
    pub fn watched(&self, out: &mut Vec<Watched>) {
        out.push((self.file.as_raw_fd(), Watch::Connection));
    }

    /// The tap became readable.
    pub fn on_readable(&mut self) {
        self.readable = true;
    }

    /// Reads one frame (with its virtio-net header) into `buf`, when there is one.
    pub fn read(&mut self, buf: &mut [u8]) -> Option<usize> {
        if !self.readable {
            return None;
        }
        loop {
            match (&self.file).read(buf) {
                Ok(n) => return Some(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.readable = false;
                    return None;
                }
            }
        }
    }

    /// The output buffer a frame is assembled in before [`TapPort::send`].
    pub fn out_buf(&mut self) -> &mut [u8] {
        &mut self.out
    }

    /// Writes the first `len` bytes of the output buffer; false when the tap is full or down.
    pub fn send(&mut self, len: usize) -> bool {
        matches!((&self.file).write(&self.out[..len]), Ok(n) if n == len)
    }
}

impl Kind for TapPort {
    // The kernel sends what TUNSETOFFLOAD allowed, and takes any TCP GSO or
    // partially checksummed frame, completing it as needed.
    fn rx_caps(&self) -> Caps {
        Caps::ALL
    }

    fn tx_caps(&self) -> Caps {
        Caps::ALL
    }

    fn watched(&self, out: &mut Vec<Watched>) {
        TapPort::watched(self, out)
    }

    fn on_readable(&mut self) {
        TapPort::on_readable(self)
    }

    /// One write per frame, its virtio-net header first.
    #[inline]
    fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        _cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError> {
        let (len, bytes) = super::assemble(self.out_buf(), virtio_net::HEADER_LEN, f, tagging)?;
        if self.send(len) {
            Ok(bytes)
        } else {
            Err(DeliverError::Drop(DropReason::RingFull))
        }
    }

    fn describe(&self) -> Described {
        Described::running("tap", self.ifname().to_string())
    }

    fn release(&mut self) {
        TapPort::release(self)
    }

    /// One read per frame, until the tap would block.
    fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize {
        let Some(Port::Tap(t)) = sw.port_mut(i) else {
            return 0;
        };
        let Some(mut buf) = t.rx.take() else {
            return 0;
        };
        let mut n = 0;
        while n < budget {
            let got = match sw.port_mut(i) {
                Some(Port::Tap(t)) => t.read(&mut buf),
                _ => None,
            };
            let Some(len) = got else { break };
            n += 1;
            let src = Src::Local(&buf[..len]);
            sw.forward(
                FrameCtx::new(i, now),
                src,
                len as u64,
                virtio_net::HEADER_LEN,
                None,
            );
        }
        if let Some(Port::Tap(t)) = sw.port_mut(i) {
            t.rx = Some(buf);
        }
        n
    }
}
