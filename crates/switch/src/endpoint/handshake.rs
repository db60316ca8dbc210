//! The endpoint's vhost-user session: finding the back-end (dialling a
//! server-mode port, or accepting a client-mode one), the handshake, and
//! doing both again after the back-end restarted, on the same memory and
//! rings, as QEMU does with `reconnect=` or `server=on`.

use super::queues::{RXQ, TXQ};
use super::ring::RingLayout;
use super::{Endpoint, EndpointError};
use crate::vhost_user::device::feature;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// The endpoint's memory as the back-end maps it.
#[derive(Debug)]
pub(super) struct SharedMem {
    pub memfd: File,
    pub size: u64,
    /// Where the endpoint mapped it (the front-end's "user address").
    pub base_va: u64,
}

/// Dials a server-mode port at `sock`, retrying while it is absent or refuses.
pub(super) fn dial(sock: &Path, timeout: Duration) -> Result<UnixStream, EndpointError> {
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect(sock) {
            Ok(s) => return Ok(s),
            Err(e)
                if Instant::now() < deadline
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(EndpointError::Setup(e)),
        }
    }
}

/// Listens at `sock` until a client-mode port connects (at most `timeout`);
/// the socket file is gone afterwards.
pub(super) fn accept(sock: &Path, timeout: Duration) -> Result<UnixStream, EndpointError> {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).map_err(EndpointError::Setup)?;
    l.set_nonblocking(true).map_err(EndpointError::Setup)?;
    let deadline = Instant::now() + timeout;
    let stream = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let _ = std::fs::remove_file(sock);
                return Err(EndpointError::Timeout);
            }
            Err(e) => return Err(EndpointError::Setup(e)),
        }
    };
    let _ = std::fs::remove_file(sock);
    stream
        .set_nonblocking(false)
        .map_err(EndpointError::Setup)?;
    Ok(stream)
}

fn hs(step: &'static str) -> impl Fn(vhost::Error) -> EndpointError {
    move |source| EndpointError::Handshake { step, source }
}

/// Owner, features (those of `want` the back-end offers; VERSION_1 is
/// required), protocol features and the memory table. Returns the
/// negotiated features.
pub(super) fn negotiate(
    stream: UnixStream,
    want: u64,
    mem: &SharedMem,
) -> Result<(Frontend, u64), EndpointError> {
    // A back-end that stops answering fails the handshake instead of hanging it.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(EndpointError::Setup)?;
    let mut fe = Frontend::from_stream(stream, 2);
    fe.set_owner().map_err(hs("SET_OWNER"))?;
    let offered = fe.get_features().map_err(hs("GET_FEATURES"))?;
    if offered & feature::VERSION_1 == 0 {
        return Err(EndpointError::Features);
    }
    let features = offered & want;
    fe.set_features(features).map_err(hs("SET_FEATURES"))?;
    if features & feature::PROTOCOL_FEATURES != 0 {
        let pf = fe
            .get_protocol_features()
            .map_err(hs("GET_PROTOCOL_FEATURES"))?;
        fe.set_protocol_features(pf & VhostUserProtocolFeatures::REPLY_ACK)
            .map_err(hs("SET_PROTOCOL_FEATURES"))?;
    }
    let region = VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: mem.size,
        userspace_addr: mem.base_va,
        mmap_offset: 0,
        mmap_handle: mem.memfd.as_raw_fd(),
    };
    fe.set_mem_table(&[region]).map_err(hs("SET_MEM_TABLE"))?;
    Ok((fe, features))
}

/// Hands both rings to the back-end, each resuming at its `bases` entry.
pub(super) fn start_rings(
    fe: &mut Frontend,
    features: u64,
    mem: &SharedMem,
    layouts: [RingLayout; 2],
    bases: [u16; 2],
    kick: &[EventFd; 2],
    call: &[EventFd; 2],
) -> Result<(), EndpointError> {
    for q in [RXQ, TXQ] {
        let (layout, size) = (layouts[q], layouts[q].size);
        fe.set_vring_num(q, size).map_err(hs("SET_VRING_NUM"))?;
        let cfgd = VringConfigData {
            queue_max_size: size,
            queue_size: size,
            flags: 0,
            desc_table_addr: mem.base_va + layout.desc,
            used_ring_addr: mem.base_va + layout.used,
            avail_ring_addr: mem.base_va + layout.avail,
            log_addr: None,
        };
        fe.set_vring_addr(q, &cfgd).map_err(hs("SET_VRING_ADDR"))?;
        fe.set_vring_base(q, bases[q])
            .map_err(hs("SET_VRING_BASE"))?;
        fe.set_vring_call(q, &call[q])
            .map_err(hs("SET_VRING_CALL"))?;
        fe.set_vring_kick(q, &kick[q])
            .map_err(hs("SET_VRING_KICK"))?;
        if features & feature::PROTOCOL_FEATURES != 0 {
            fe.set_vring_enable(q, true)
                .map_err(hs("SET_VRING_ENABLE"))?;
        }
    }
    // A request with an answer: the back-end applies requests in order, so
    // the rings run once it is back (the caller's next frame is not sent
    // to a port still setting up).
    fe.get_features().map_err(hs("GET_FEATURES"))?;
    Ok(())
}

impl Endpoint {
    /// Reconnects to a restarted switch whose port is in server mode at
    /// `sock` (dialling for up to `timeout`), keeping the memory, rings and
    /// everything in flight, as QEMU does with `reconnect=`.
    pub fn reconnect(&mut self, sock: &Path, timeout: Duration) -> Result<(), EndpointError> {
        let stream = dial(sock, timeout)?;
        self.resume(stream)
    }

    /// Waits (at most `timeout`) for a restarted switch whose port is in
    /// client mode to connect again at `sock`, then resumes as
    /// [`Endpoint::reconnect`] does (QEMU's `server=on`).
    pub fn relisten(&mut self, sock: &Path, timeout: Duration) -> Result<(), EndpointError> {
        let stream = accept(sock, timeout)?;
        self.resume(stream)
    }

    /// The handshake again with the features negotiated first. Each ring
    /// resumes at its used index, as QEMU resumes after its back-end died
    /// (no GET_VRING_BASE answer): chains the old switch consumed without
    /// returning are offered again, nothing it returned is.
    fn resume(&mut self, stream: UnixStream) -> Result<(), EndpointError> {
        let features = self.q.features;
        let (mut fe, got) = negotiate(stream, features, &self.shared)?;
        if got != features {
            return Err(EndpointError::FeaturesChanged);
        }
        let layouts = [self.q.rx.layout, self.q.tx.layout];
        let bases = [self.q.rx.used_index(), self.q.tx.used_index()];
        start_rings(
            &mut fe,
            features,
            &self.shared,
            layouts,
            bases,
            &self.q.kick,
            &self.call,
        )?;
        self.frontend = fe;
        Ok(())
    }

    /// The used indexes of the receive and transmit rings (what the switch
    /// has returned so far, modulo 2^16).
    pub fn used_indexes(&self) -> [u16; 2] {
        [self.q.rx.used_index(), self.q.tx.used_index()]
    }
}
