//! The poll-mode endpoint: a user-space virtio-net driver that is a
//! vhost-user front-end (through the `vhost` crate's [`Frontend`]), with
//! its memory in a memfd shared through the memory table, its own split
//! rings ([`ring`]), and a minimal ARP/IPv4/ICMP/UDP host ([`stack`]).
//!
//! It is the switch's test driver and the kernel-bypass endpoint of the
//! measurement engine: `send_frame`/`poll_recv` move raw frames (`drain`
//! counts received ones without reading them),
//! `udp_send_to`/`udp_recv` and `ping` speak IPv4, and the host answers
//! ARP, ping and UDP echo while the caller polls.
//!
//! ```
//! use std::time::Duration;
//! use vnio_switch::config::{Config, PortSpec, SwitchConfig};
//! use vnio_switch::daemon::Switch;
//! use vnio_switch::endpoint::{Endpoint, EndpointConfig};
//! use vnio_switch::port::SocketMode;
//! use vnio_switch::wire::Ipv4Address;
//!
//! let dir = std::env::temp_dir().join(format!("vnio-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let cfg = Config {
//!     switch: SwitchConfig { control: dir.join("ctl.sock"), ..Default::default() },
//!     ports: vec![
//!         PortSpec::vhost_user("a", dir.join("a.sock"), SocketMode::Server),
//!         PortSpec::vhost_user("b", dir.join("b.sock"), SocketMode::Server),
//!     ],
//! };
//! let _switch = Switch::start(cfg)?;
//! let b_ip = Ipv4Address([10, 0, 0, 2]);
//! let mut a = Endpoint::connect(&dir.join("a.sock"), EndpointConfig::new("02:00:00:00:00:01".parse()?, Ipv4Address([10, 0, 0, 1])))?;
//! let mut b = Endpoint::connect(&dir.join("b.sock"), EndpointConfig::new("02:00:00:00:00:02".parse()?, b_ip))?;
//! // b answers ARP and echoes UDP port 7 while it polls.
//! let server = std::thread::spawn(move || b.serve(Duration::from_millis(500), &|| false));
//! a.resolve(b_ip, Duration::from_secs(2))?;
//! let peer = std::net::SocketAddrV4::new(b_ip.into(), 7);
//! a.udp_send_to(peer, 4000, b"hello")?;
//! let mut buf = [0u8; 2048];
//! let (from, port, n) = a.udp_recv_timeout(&mut buf, Duration::from_secs(2))?.expect("echo");
//! assert_eq!((from, port, &buf[..n]), (peer, 4000, &b"hello"[..]));
//! server.join().unwrap()?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod handshake;
mod queues;
pub mod rate;
pub mod ring;
pub mod stack;
pub mod tcp_stream;
pub mod via;

use crate::sys::memfd;
use crate::vhost_user::device::feature;
use crate::wire::icmp::IcmpRepr;
use crate::wire::virtio_net::VirtioNetHdrRepr;
use crate::wire::{EthernetAddress, Ipv4Address};
use handshake::SharedMem;
use queues::{Queues, RXQ};
use ring::{DriverRing, RingLayout};
use stack::{ArpCache, Event, HostConfig};
use std::net::SocketAddrV4;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use vhost::vhost_user::Frontend;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Features the endpoint asks for (when offered).
const WANTED: u64 =
    feature::MRG_RXBUF | feature::EVENT_IDX | feature::PROTOCOL_FEATURES | feature::VERSION_1;
/// Largest frame the endpoint sends or receives: a 64 KiB GSO frame with
/// its Ethernet header and a VLAN tag. Frames longer than one 2 KiB buffer
/// go out as descriptor chains and come in over several mergeable buffers.
pub const MAX_FRAME: usize = 65535 + 18;

/// Errors of the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Setting up shared memory or eventfds failed.
    #[error("cannot set up endpoint resources")]
    Setup(#[source] std::io::Error),
    /// Mapping the memfd failed.
    #[error("cannot map endpoint memory")]
    Memory(#[source] vm_memory::mmap::FromRangesError),
    /// The vhost-user handshake failed.
    #[error("vhost-user handshake failed at {step}")]
    Handshake {
        /// Which request.
        step: &'static str,
        /// Why.
        #[source]
        source: vhost::Error,
    },
    /// The back-end does not offer a feature the endpoint needs.
    #[error("back-end lacks VIRTIO_F_VERSION_1")]
    Features,
    /// A restarted back-end does not offer what was negotiated before.
    #[error("the restarted back-end offers other features than before")]
    FeaturesChanged,
    /// All transmit descriptors are in flight.
    #[error("transmit ring full")]
    TxFull,
    /// A frame larger than [`MAX_FRAME`].
    #[error("frame too large")]
    TooLarge,
    /// No ARP entry for the destination (call `resolve`).
    #[error("{0} is not resolved")]
    Unresolved(Ipv4Address),
    /// Nothing arrived in time.
    #[error("timed out")]
    Timeout,
    /// Waiting for a notification failed.
    #[error("wait failed")]
    Wait(#[source] std::io::Error),
}

/// Endpoint settings.
#[derive(Debug, Clone, Copy)]
pub struct EndpointConfig {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its IPv4 address.
    pub ip: Ipv4Address,
    /// UDP port echoed back (default 7).
    pub echo_port: Option<u16>,
    /// Queue size (power of two, default 256).
    pub queue_size: u16,
    /// How long `connect` retries while the socket is absent or refuses (default 5 s).
    pub connect_timeout: Duration,
    /// Offload features to negotiate when offered (`feature::CSUM`,
    /// `GUEST_CSUM`, `HOST_TSO4`, ...; default none): the caller then sends
    /// and receives their metadata with [`Endpoint::send_frame_with`] and
    /// [`Endpoint::poll_recv_with`].
    pub offloads: u64,
    /// Buffers and rings on 2 MiB hugepages (default off), as a DPDK
    /// driver's are: fails when the kernel's pool has too few free pages.
    pub hugepages: bool,
}

impl EndpointConfig {
    /// Defaults for `mac` and `ip`.
    pub fn new(mac: EthernetAddress, ip: Ipv4Address) -> Self {
        Self {
            mac,
            ip,
            echo_port: Some(7),
            queue_size: 256,
            connect_timeout: Duration::from_secs(5),
            offloads: 0,
            hugepages: false,
        }
    }
}

/// Counters of an endpoint.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EndpointStats {
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Kicks sent to the back-end.
    pub kicks: u64,
    /// Frames answered by the host (ARP, ping, UDP echo).
    pub replies: u64,
}

/// A connected poll-mode endpoint.
pub struct Endpoint {
    frontend: Frontend,
    shared: SharedMem,
    q: Queues,
    call: [EventFd; 2],
    host: HostConfig,
    arp: ArpCache,
    frame: Box<[u8; MAX_FRAME]>,
    reply: Box<[u8; MAX_FRAME]>,
}

const BUF_SIZE: u32 = 2048;

impl Endpoint {
    /// Connects to a switch port listening at `sock` (the port is in server mode).
    pub fn connect(sock: &Path, cfg: EndpointConfig) -> Result<Self, EndpointError> {
        Self::from_stream(handshake::dial(sock, cfg.connect_timeout)?, cfg)
    }

    /// Listens at `sock` and waits up to `timeout` for a switch port in client mode to connect.
    pub fn listen(
        sock: &Path,
        cfg: EndpointConfig,
        timeout: Duration,
    ) -> Result<Self, EndpointError> {
        Self::from_stream(handshake::accept(sock, timeout)?, cfg)
    }

    /// Runs the front-end handshake over a connected stream.
    pub fn from_stream(stream: UnixStream, cfg: EndpointConfig) -> Result<Self, EndpointError> {
        let size = cfg.queue_size;
        let rx_layout = RingLayout::at(0, size, BUF_SIZE);
        let tx_layout = RingLayout::at(rx_layout.end().div_ceil(4096) * 4096, size, BUF_SIZE);
        let mem_size = tx_layout.end().div_ceil(1 << 21) * (1 << 21);
        let memfd = if cfg.hugepages {
            memfd::create_huge("vnio-endpoint", mem_size)
        } else {
            memfd::create("vnio-endpoint", mem_size)
        }
        .map_err(EndpointError::Setup)?;
        let map_file = memfd.try_clone().map_err(EndpointError::Setup)?;
        let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0),
            mem_size as usize,
            Some(FileOffset::new(map_file, 0)),
        )])
        .map_err(EndpointError::Memory)?;
        let base_va = mem
            .get_host_address(GuestAddress(0))
            .map_err(|_| EndpointError::Setup(std::io::Error::other("no host address")))?
            as u64;
        let shared = SharedMem {
            memfd,
            size: mem_size,
            base_va,
        };
        let want = WANTED | (cfg.offloads & feature::OFFLOADS);
        let (mut fe, features) = handshake::negotiate(stream, want, &shared)?;
        let event_idx = features & feature::EVENT_IDX != 0;
        // The rings hold the mapping from here on (`mem` is only the way in).
        let outside = || EndpointError::Setup(std::io::Error::other("rings outside the memory"));
        let mut rx = DriverRing::new(&mem, rx_layout, event_idx).ok_or_else(outside)?;
        let tx = DriverRing::new(&mem, tx_layout, event_idx).ok_or_else(outside)?;
        // Every receive buffer is offered up front.
        while let Some(id) = rx.take() {
            rx.publish(id, BUF_SIZE, true);
        }
        let ev = || EventFd::new(EFD_NONBLOCK).map_err(EndpointError::Setup);
        let kick = [ev()?, ev()?];
        let call = [ev()?, ev()?];
        handshake::start_rings(
            &mut fe,
            features,
            &shared,
            [rx_layout, tx_layout],
            [0, 0],
            &kick,
            &call,
        )?;
        Ok(Self {
            frontend: fe,
            shared,
            q: Queues {
                rx,
                tx,
                kick,
                features,
                stats: EndpointStats::default(),
            },
            call,
            host: HostConfig {
                mac: cfg.mac,
                ip: cfg.ip,
                echo_port: cfg.echo_port,
            },
            arp: ArpCache::default(),
            frame: Box::new([0; MAX_FRAME]),
            reply: Box::new([0; MAX_FRAME]),
        })
    }

    /// Its MAC.
    pub fn mac(&self) -> EthernetAddress {
        self.host.mac
    }

    /// Its IPv4 address.
    pub fn ip(&self) -> Ipv4Address {
        self.host.ip
    }

    /// Counters.
    pub fn stats(&self) -> EndpointStats {
        self.q.stats
    }

    /// The virtio features negotiated with the switch.
    pub fn features(&self) -> u64 {
        self.q.features
    }

    /// The vhost-user front-end (for requests the endpoint does not wrap).
    pub fn frontend(&mut self) -> &mut Frontend {
        &mut self.frontend
    }

    /// Sends one Ethernet frame (a zero virtio-net header is added here).
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), EndpointError> {
        self.q.send(&VirtioNetHdrRepr::default(), frame)
    }

    /// Sends frames as one burst: the switch sees them all at once (one
    /// available-index update, at most one kick), as a driver's batch.
    /// Returns how many went out before the ring filled.
    pub fn send_burst(&mut self, frames: &[&[u8]]) -> usize {
        self.send_burst_with(&VirtioNetHdrRepr::default(), frames)
    }

    /// Like [`Endpoint::send_burst`], every frame with the offload metadata
    /// `hdr` (the offloads must have been negotiated).
    pub fn send_burst_with(&mut self, hdr: &VirtioNetHdrRepr, frames: &[&[u8]]) -> usize {
        self.q.send_burst(hdr, frames)
    }

    /// Sends one Ethernet frame with offload metadata (the offloads must
    /// have been negotiated, see [`EndpointConfig::offloads`]).
    pub fn send_frame_with(
        &mut self,
        hdr: &VirtioNetHdrRepr,
        frame: &[u8],
    ) -> Result<(), EndpointError> {
        self.q.send(hdr, frame)
    }

    /// Receives one raw frame into `buf` without running the host; returns its length.
    pub fn poll_recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.q.recv(buf).map(|(_, n)| n)
    }

    /// Receives up to `max` raw frames without reading them (a receiver
    /// that only counts, as a traffic generator's does): their buffers go
    /// back to the switch as one batch. Returns how many; the host does not
    /// run.
    pub fn drain(&mut self, max: usize) -> usize {
        self.q.drain(max)
    }

    /// Like [`Endpoint::poll_recv`], with the frame's virtio-net header.
    pub fn poll_recv_with(&mut self, buf: &mut [u8]) -> Option<(VirtioNetHdrRepr, usize)> {
        self.q.recv(buf)
    }

    /// Receives and handles one frame: answers ARP/ping/UDP echo, and
    /// returns what the caller should see. The frame stays in an internal
    /// buffer readable through [`Endpoint::last_frame`].
    pub fn poll(&mut self) -> Option<Event> {
        let (_, n) = self.q.recv(&mut self.frame[..])?;
        let (ev, reply) = stack::handle(
            &self.host,
            &mut self.arp,
            &self.frame[..n],
            &mut self.reply[..],
        );
        if let Some(m) = reply {
            if self
                .q
                .send(&VirtioNetHdrRepr::default(), &self.reply[..m])
                .is_ok()
            {
                self.q.stats.replies += 1;
            }
        }
        Some(ev)
    }

    /// The buffer the last [`Endpoint::poll`] received into.
    pub fn last_frame(&self) -> &[u8] {
        &self.frame[..]
    }

    /// Blocks until the back-end signals received frames or `timeout` passes.
    ///
    /// The timeout is kept to the nanosecond (ppoll, not epoll's whole
    /// milliseconds): an open-loop sender sleeps here until its next send,
    /// and a wait rounded up to 1 ms made every send late by up to that.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, EndpointError> {
        if self.q.rx.arm_call() {
            return Ok(true);
        }
        let readable = match crate::sys::wait::readable_within(&self.call[RXQ], timeout) {
            Ok(r) => r,
            // A signal (e.g. the one that asks the caller to stop) is not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(false),
            Err(e) => return Err(EndpointError::Wait(e)),
        };
        if readable {
            let _ = self.call[RXQ].read();
        }
        Ok(readable)
    }

    /// Polls (and waits on notifications) until `f` accepts an event or `timeout` passes.
    pub fn poll_until<T>(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&Self, Event) -> Option<T>,
    ) -> Result<T, EndpointError> {
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(ev) = self.poll() {
                if let Some(t) = f(self, ev) {
                    return Ok(t);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(EndpointError::Timeout);
            }
            self.wait((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    /// Learns the MAC of `ip` by ARP (returns at once when known).
    pub fn resolve(
        &mut self,
        ip: Ipv4Address,
        timeout: Duration,
    ) -> Result<EthernetAddress, EndpointError> {
        if let Some(m) = self.arp.lookup(ip) {
            return Ok(m);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let mut req = [0u8; 64];
            if let Some(n) = stack::build_arp_request(&mut req, &self.host, ip) {
                self.send_frame(&req[..n])?;
            }
            let step = (deadline.saturating_duration_since(Instant::now()))
                .min(Duration::from_millis(200));
            match self.poll_until(step, |ep, _| ep.arp.lookup(ip)) {
                Ok(m) => return Ok(m),
                Err(EndpointError::Timeout) if Instant::now() < deadline => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends a UDP datagram from `src_port` (the destination must be resolved).
    pub fn udp_send_to(
        &mut self,
        dst: SocketAddrV4,
        src_port: u16,
        payload: &[u8],
    ) -> Result<(), EndpointError> {
        let ip = Ipv4Address::from(*dst.ip());
        let mac = self.arp.lookup(ip).ok_or(EndpointError::Unresolved(ip))?;
        let mut buf = [0u8; BUF_SIZE as usize];
        let n = stack::build_udp(
            &mut buf,
            mac,
            self.host.mac,
            self.host.ip,
            ip,
            src_port,
            dst.port(),
            payload,
        )
        .ok_or(EndpointError::TooLarge)?;
        self.send_frame(&buf[..n])
    }

    /// Returns the next UDP datagram (not for the echo port) without waiting.
    pub fn udp_recv(&mut self, buf: &mut [u8]) -> Option<(SocketAddrV4, u16, usize)> {
        while let Some(ev) = self.poll() {
            if let Event::Udp {
                src,
                dst_port,
                offset,
                len,
            } = ev
            {
                let n = len.min(buf.len());
                buf[..n].copy_from_slice(&self.frame[offset..offset + n]);
                return Some((src, dst_port, n));
            }
        }
        None
    }

    /// Like [`Endpoint::udp_recv`], waiting up to `timeout`; `Ok(None)` on timeout.
    pub fn udp_recv_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<Option<(SocketAddrV4, u16, usize)>, EndpointError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(r) = self.udp_recv(buf) {
                return Ok(Some(r));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.wait((deadline - now).min(Duration::from_millis(50)))?;
        }
    }

    /// Sends an ICMP echo request (the destination must be resolved).
    pub fn ping(
        &mut self,
        dst: Ipv4Address,
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> Result<(), EndpointError> {
        let mac = self.arp.lookup(dst).ok_or(EndpointError::Unresolved(dst))?;
        let mut buf = [0u8; BUF_SIZE as usize];
        let icmp = IcmpRepr::EchoRequest { ident, seq, data };
        let n = stack::build_icmp(&mut buf, mac, self.host.mac, self.host.ip, dst, &icmp)
            .ok_or(EndpointError::TooLarge)?;
        self.send_frame(&buf[..n])
    }

    /// Answers whatever arrives (ARP, ping, UDP echo) for `duration`, returning early if `stop` says so.
    pub fn serve(
        &mut self,
        duration: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), EndpointError> {
        let deadline = Instant::now() + duration;
        while Instant::now() < deadline && !stop() {
            while self.poll().is_some() {}
            self.wait(Duration::from_millis(20))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<Endpoint>();
    }

    #[test]
    fn connecting_to_nothing_fails_with_a_cause() {
        let p = std::env::temp_dir().join(format!("vnio-no-switch-{}.sock", std::process::id()));
        let mut cfg = EndpointConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Address([10, 0, 0, 1]),
        );
        cfg.connect_timeout = Duration::from_millis(100);
        let t0 = Instant::now();
        let err = Endpoint::connect(&p, cfg).err().expect("no switch there");
        assert!(matches!(err, EndpointError::Setup(_)), "{err}");
        assert!(
            t0.elapsed() >= Duration::from_millis(100),
            "retried for its window"
        );
        assert!(t0.elapsed() < Duration::from_secs(2), "then gave up");
    }
}
