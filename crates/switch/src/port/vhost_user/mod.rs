//! A vhost-user port: the socket (listening or connecting), the current
//! front-end connection, and the virtio-net device it configures.
//!
//! Any protocol error, hostile descriptor chain or disappearing front-end
//! resets the port: the connection is dropped with the device state, the
//! port listens (server) or reconnects (client) again. Nothing else is affected.

mod deliver;
mod receive;
mod spec;
mod spread;
mod steer;
pub(crate) use deliver::RxPlan;
pub use spec::VhostUserSpec;
pub use spread::{LentPair, Returned, Spread, WorkerHandle, LEND_QUIET};
pub use steer::{flow_hash, pick_pair, SteerKey};

use super::{DeliverCx, Described, Kind, RoundCx, SocketMode, Switch, Watch, Watched};
use crate::datapath::{signal_now, DeliverError, Frame};
use crate::offload::Caps;
use crate::vhost_user::conn::{ConnError, Connection};
use crate::vhost_user::device::{rx_queue, RX_QUEUE};
use crate::vhost_user::device::{Device, Reply};
use crate::vhost_user::memory::DEFAULT_MAX_MEMORY;
use crate::vhost_user::protocol::{self, code, parse_request};
use crate::vlan::Tagging;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a client-mode port waits between connection attempts.
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(200);

/// Messages a port handles per wake-up. A front-end that streams messages
/// would otherwise keep its worker in [`VhostUserPort::on_readable`] and
/// starve the worker's other ports; what is left stays in the socket, whose
/// readiness (the worker's epoll is level-triggered) brings the worker back
/// after a round of the other ports. A handshake is about 20 messages.
pub const MESSAGE_BUDGET: usize = 32;

/// Why a vhost-user port could not be created.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The socket could not be bound.
    #[error("cannot listen on {path}")]
    Bind {
        /// Socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Why the connection was reset.
#[derive(Debug, thiserror::Error)]
pub enum ResetCause {
    /// Connection-level failure (closed, garbage, bad message).
    #[error(transparent)]
    Conn(#[from] ConnError),
    /// The device refused a request.
    #[error("request {request} failed")]
    Device {
        /// Request code.
        request: u32,
        /// Why.
        #[source]
        source: crate::vhost_user::device::DeviceError,
    },
    /// A request that needs an answer this back-end cannot give.
    #[error("unsupported request {0} expects a reply")]
    Unanswerable(u32),
}

/// The port.
#[derive(Debug)]
pub struct VhostUserPort {
    path: PathBuf,
    mode: SocketMode,
    listener: Option<UnixListener>,
    conn: Option<Connection>,
    /// The device the front-end configures.
    pub device: Device,
    next_attempt: Option<Instant>,
    /// Offer the checksum and TSO offloads to front-ends.
    offloads: bool,
    /// Most guest memory a front-end may map through this port.
    max_memory: u64,
    /// Queue pairs offered to front-ends.
    pairs: usize,
    /// Descriptors this port stopped using, still watched by the worker:
    /// closed by [`VhostUserPort::release_retired`] once unwatched, never
    /// before (a closed descriptor's epoll registration lives on while the
    /// front-end holds the file, and its number may be reused).
    retired: Vec<File>,
    retired_conns: Vec<Connection>,
    /// The owner's side of pairs served by other workers (None: all here).
    spread: Option<Box<spread::Spread>>,
    /// This port is a pair another worker's port lent to this worker.
    lent: Option<Box<spread::LentTo>>,
    /// The key of its multiqueue flow hash (`steer.rs`): drawn when the
    /// port is created, the same for its lent pairs.
    steer: SteerKey,
}

impl VhostUserPort {
    /// Creates the port; a server-mode port binds its socket now (replacing a stale file).
    pub fn new(path: &Path, mode: SocketMode) -> Result<Self, PortError> {
        Self::with_offloads(path, mode, true)
    }

    /// Like [`VhostUserPort::new`]; `offloads: false` withholds the checksum
    /// and TSO features (front-ends then send and take MTU-sized, fully
    /// checksummed frames).
    pub fn with_offloads(path: &Path, mode: SocketMode, offloads: bool) -> Result<Self, PortError> {
        let listener = match mode {
            SocketMode::Server => {
                let bind = || -> io::Result<UnixListener> {
                    crate::sockpath::remove_stale(path)?;
                    let l = UnixListener::bind(path)?;
                    l.set_nonblocking(true)?;
                    Ok(l)
                };
                Some(bind().map_err(|source| PortError::Bind {
                    path: path.to_owned(),
                    source,
                })?)
            }
            SocketMode::Client => None,
        };
        Ok(Self {
            path: path.to_owned(),
            mode,
            listener,
            conn: None,
            device: Device::offering(offloads),
            next_attempt: None,
            offloads,
            max_memory: DEFAULT_MAX_MEMORY,
            pairs: 1,
            retired: Vec::new(),
            retired_conns: Vec::new(),
            spread: None,
            lent: None,
            steer: SteerKey::random(),
        })
    }

    /// A port with no socket: what a lent pair's holder serves.
    fn bare(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            mode: SocketMode::Server,
            listener: None,
            conn: None,
            device: Device::default(),
            next_attempt: None,
            offloads: true,
            max_memory: DEFAULT_MAX_MEMORY,
            pairs: 1,
            retired: Vec::new(),
            retired_conns: Vec::new(),
            spread: None,
            lent: None,
            steer: SteerKey::random(),
        }
    }

    /// Caps the guest memory a front-end may map through this port (from
    /// its next connection on).
    pub fn set_max_memory(&mut self, bytes: u64) {
        self.max_memory = bytes;
        if !self.connected() {
            self.device = self.fresh_device();
        }
    }

    /// Offers `pairs` queue pairs (multiqueue when more than one) from the
    /// port's next connection on.
    pub fn set_queue_pairs(&mut self, pairs: usize) {
        self.pairs = pairs;
        if !self.connected() {
            self.device = self.fresh_device();
        }
    }

    /// The device a new front-end starts with.
    fn fresh_device(&self) -> Device {
        Device::offering(self.offloads)
            .with_max_memory(self.max_memory)
            .with_queue_pairs(self.pairs)
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The socket mode.
    pub fn mode(&self) -> SocketMode {
        self.mode
    }

    /// True while a front-end is connected.
    pub fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// What the worker should watch now.
    pub fn watched(&self, out: &mut Vec<Watched>) {
        if let (Some(l), None) = (&self.listener, &self.conn) {
            out.push((l.as_raw_fd(), Watch::Listener));
        }
        if let Some(c) = &self.conn {
            // Messages wait while a pair is with another worker.
            if !self.pairs_recalling() {
                out.push((c.as_raw_fd(), Watch::Connection));
            }
            for q in 0..2 * self.device.queue_pairs() {
                if let Some(fd) = self.device.kick_fd(q) {
                    out.push((fd, Watch::Kick(q as u8)));
                }
            }
        }
    }

    /// Accepts a waiting front-end (server mode). Returns true when one connected.
    pub fn accept(&mut self) -> io::Result<bool> {
        let Some(l) = &self.listener else {
            return Ok(false);
        };
        if self.conn.is_some() {
            return Ok(false);
        }
        match l.accept() {
            Ok((s, _)) => {
                self.conn = Some(Connection::new(s)?);
                self.device.retire(&mut self.retired);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Time-driven work: a client-mode port tries to (re)connect. Returns true when it connected.
    pub fn tick(&mut self, now: Instant) -> bool {
        if self.mode != SocketMode::Client || self.conn.is_some() {
            return false;
        }
        if self.next_attempt.is_some_and(|t| now < t) {
            return false;
        }
        self.next_attempt = Some(now + RECONNECT_INTERVAL);
        match UnixStream::connect(&self.path).and_then(Connection::new) {
            Ok(c) => {
                self.conn = Some(c);
                self.device.retire(&mut self.retired);
                true
            }
            Err(_) => false,
        }
    }

    /// Reads and applies up to [`MESSAGE_BUDGET`] complete messages. On
    /// error the caller resets the port.
    pub fn on_readable(&mut self) -> Result<(), ResetCause> {
        self.spread_activity();
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        for _ in 0..MESSAGE_BUDGET {
            // The connection never reads past the message it returns: the
            // ones left stay in the socket, which stays readable.
            let Some(msg) = conn.poll_message()? else {
                break;
            };
            let h = msg.header;
            let req = parse_request(&h, &msg.body, msg.fds).map_err(ConnError::from)?;
            log::debug!("{}: {req:?}", self.path.display());
            let result = self.device.handle(req);
            let ack = self.device.reply_ack() && h.need_reply();
            match result {
                Ok(Reply::U64(v)) => conn.send(&protocol::reply_u64(h.request, v))?,
                Ok(Reply::VringState(i, n)) => {
                    conn.send(&protocol::reply_vring_state(h.request, i, n))?
                }
                Ok(Reply::Ack) if ack => conn.send(&protocol::reply_u64(h.request, 0))?,
                Ok(Reply::Ack) => {}
                Ok(Reply::Nack) => {
                    if ack {
                        conn.send(&protocol::reply_u64(h.request, 1))?;
                    } else if expects_reply(h.request) {
                        return Err(ResetCause::Unanswerable(h.request));
                    }
                }
                Err(source) => {
                    if ack {
                        let _ = conn.send(&protocol::reply_u64(h.request, 1));
                    }
                    return Err(ResetCause::Device {
                        request: h.request,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Returns the port to the state it had before any front-end: no
    /// connection, a fresh device (same offer, same memory cap), the next
    /// connection attempt (client mode) one interval away. The old
    /// connection and descriptors are retired, not closed: the worker
    /// unwatches them, then calls [`VhostUserPort::release_retired`].
    pub fn reset(&mut self, now: Instant) {
        self.retired_conns.extend(self.conn.take());
        self.device.retire(&mut self.retired);
        self.next_attempt = Some(now + RECONNECT_INTERVAL);
        self.spread_reset();
        self.mark_broken();
    }

    /// True when descriptors wait to be closed once unwatched.
    pub fn has_retired(&mut self) -> bool {
        self.device.take_retired(&mut self.retired);
        !self.retired.is_empty() || !self.retired_conns.is_empty()
    }

    /// Closes the retired descriptors; the caller removed them from its
    /// epoll set first.
    pub fn release_retired(&mut self) {
        self.device.take_retired(&mut self.retired);
        self.retired.clear();
        self.retired_conns.clear();
    }

    /// True when the port is as a fresh one: no front-end, no device state.
    pub fn is_pristine(&self) -> bool {
        self.conn.is_none() && format!("{:?}", self.device) == format!("{:?}", self.fresh_device())
    }
}

impl Kind for VhostUserPort {
    fn rx_caps(&self) -> Caps {
        Caps::guest_rx(self.device.acked_features())
    }

    fn tx_caps(&self) -> Caps {
        Caps::guest_tx(self.device.acked_features())
    }

    fn watched(&self, out: &mut Vec<Watched>) {
        VhostUserPort::watched(self, out)
    }

    fn is_lent(&self) -> bool {
        self.lent_pair().is_some()
    }

    #[inline]
    fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError> {
        self.deliver_frame(f, tagging, cx.plan, cx.chain, cx.hint, cx.stats)
    }

    /// The receive queues' used entries are published and the guest
    /// called: pair 0's as its coalescing policy says, a multiqueue
    /// guest's other pairs when their driver wants it.
    fn end_round(&mut self, cx: RoundCx<'_>) -> Option<Instant> {
        let delivered = cx.rt.round_rx();
        if delivered > 0 && cx.round_cycles > 0 {
            cx.stats.dwell.record(cx.round_cycles, u64::from(delivered));
        }
        let mut hold = None;
        if let Some(vq) = self.device.queue(RX_QUEUE) {
            hold = cx.rt.call_rx(vq, cx.now, &cx.stats.rx);
            *cx.call_failed |= vq.call_failed();
        }
        for k in 1..self.device.queue_pairs() {
            if let Some(vq) = self.device.queue(rx_queue(k)) {
                signal_now(vq, &cx.stats.rx);
                *cx.call_failed |= vq.call_failed();
            }
        }
        hold
    }

    fn describe(&self) -> Described {
        Described {
            kind: "vhost-user",
            at: self.path().display().to_string(),
            mode: Some(self.mode()),
            connected: self.connected(),
            running: self.device.ready(0) && self.device.ready(1),
            wire: false,
        }
    }

    /// The guest's memory is unmapped off the worker (`crate::reaper`);
    /// the rest (its socket above all) goes now.
    fn release(&mut self) {
        self.device.retire(&mut Vec::new());
    }

    fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize {
        VhostUserPort::receive_from(sw, i, now, budget)
    }
}

fn expects_reply(request: u32) -> bool {
    // GET_CONFIG, GET_INFLIGHT_FD, GET_STATUS: answers with a payload this device does not have.
    matches!(request, code::GET_CONFIG | 31 | 40)
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        if self.listener.is_some() {
            let _ = crate::sockpath::remove_stale(&self.path);
        }
    }
}
