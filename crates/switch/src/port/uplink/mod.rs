//! An uplink port: a host interface through AF_PACKET sockets with
//! TPACKET_V2 rings mapped into the process (see `sys/packet/`).
//! Frames are read in place from the receive ring (no system call, no copy
//! before the destination's) and written in place into the transmit ring,
//! which one `send` per polling round hands to the kernel. Frames larger
//! than a ring slot (the host stack's TCP GSO frames, up to 64 KiB) take a
//! slower path: a full copy the kernel queues on the socket on receive, and
//! a ring-less socket on transmit.
//!
//! VLAN tags the interface's driver stripped are put back in the frame, so
//! a trunk uplink sees its tags. Partially checksummed and TCP GSO frames
//! from the host stack keep their virtio-net header; the data path
//! completes or segments them for destinations that did not negotiate
//! those offloads.

mod deliver;
mod queue;
mod receive;
mod spec;

pub use queue::{Rx, RxQueue};
pub use spec::UplinkSpec;

use super::{DeliverCx, Described, Kind, RoundCx, Switch, Watch, Watched};
use crate::datapath::{DeliverError, Frame};
use crate::egress::Scheduler;
use crate::netqueue::QueueTable;
use crate::offload::Caps;
use crate::sys::packet::{self, BpfInsn, PlainTx, SocketHandle, TxRing};
use crate::vlan::Tagging;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

/// The virtio-net header length on packet sockets (no `num_buffers`).
pub const HDR_LEN: usize = crate::wire::virtio_net::LEGACY_HEADER_LEN;
/// Largest frame plus header plus a re-inserted tag.
pub const BUF_LEN: usize = HDR_LEN + 65535 + 18 + 4;

/// Why an uplink could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open an AF_PACKET {what} on {ifname}")]
pub struct UplinkError {
    /// Interface.
    pub ifname: String,
    /// Which part.
    pub what: &'static str,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// How an uplink is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkOptions {
    /// Slots in each receive ring.
    pub rx_frames: usize,
    /// Slots in the transmit ring.
    pub tx_frames: usize,
    /// Hand transmitted frames straight to the driver, skipping the
    /// interface's queueing discipline (PACKET_QDISC_BYPASS).
    pub qdisc_bypass: bool,
    /// Receive queues (queue 0 shared, the others one per vNIC).
    pub queues: usize,
    /// Egress capacity the shares divide, bit/s (None: the interface's
    /// link speed, when the kernel knows it).
    pub capacity_bps: Option<u64>,
}

impl Default for UplinkOptions {
    fn default() -> Self {
        Self {
            rx_frames: 2048,
            tx_frames: 1024,
            qdisc_bypass: false,
            queues: 1,
            capacity_bps: None,
        }
    }
}

/// The interface's link speed in bit/s, when the kernel reports one.
fn link_speed_bps(ifname: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed")).ok()?;
    let mbps: i64 = s.trim().parse().ok()?;
    (mbps > 0).then(|| mbps as u64 * 1_000_000)
}

/// The port.
#[derive(Debug)]
pub struct UplinkPort {
    ifname: String,
    /// Receive queues; the data path takes one out while forwarding from it.
    queues: Vec<Option<RxQueue>>,
    tx: TxRing,
    /// Frames larger than a transmit slot go out through this socket.
    big_tx: PlainTx,
    big_buf: Box<[u8]>,
    /// The transmit buffer handed out is `big_buf`, not a ring slot.
    big_pending: bool,
    /// Which vNIC owns which receive queue.
    table: QueueTable,
    /// Shares, limits and reservations of the vNICs sending out.
    pub sched: Scheduler,
    opts: UplinkOptions,
    /// Queues lent to another worker (see [`UplinkPort::lend`]): their
    /// filters still follow the table through a second descriptor.
    lent_out: Vec<Option<LentOut>>,
    /// This port is one queue lent by the uplink, held by the worker of
    /// the queue's owner: the queue's number there.
    lent: Option<usize>,
}

/// What an uplink keeps of a queue it lent.
#[derive(Debug)]
struct LentOut {
    handle: SocketHandle,
    program: Vec<BpfInsn>,
    /// Its counters when it left.
    packets: u64,
    bytes: u64,
}

impl UplinkPort {
    /// Opens the uplink on interface `ifname` with default options.
    pub fn new(ifname: &str) -> Result<Self, UplinkError> {
        Self::open(ifname, &UplinkOptions::default())
    }

    /// Opens the uplink on interface `ifname`.
    pub fn open(ifname: &str, opts: &UplinkOptions) -> Result<Self, UplinkError> {
        let err = |what, source| UplinkError {
            ifname: ifname.to_string(),
            what,
            source,
        };
        let fs = frame_size(ifname).map_err(|e| err("socket (interface MTU)", e))?;
        let (tx, big_tx) = open_tx(ifname, fs, opts).map_err(|(what, e)| err(what, e))?;
        let table = QueueTable::new(opts.queues);
        let mut queues = Vec::with_capacity(table.queues());
        for q in 0..table.queues() {
            // The shared queue takes everything, the others nothing until
            // a vNIC with a known MAC owns them.
            let rx = RxQueue::open(ifname, fs, opts.rx_frames, table.program(q))
                .map_err(|e| err("receive ring", e))?;
            queues.push(Some(rx));
        }
        Ok(Self {
            ifname: ifname.to_string(),
            queues,
            tx,
            big_tx,
            big_buf: vec![0u8; BUF_LEN].into_boxed_slice(),
            big_pending: false,
            table,
            sched: Scheduler::new(opts.capacity_bps.or_else(|| link_speed_bps(ifname))),
            opts: opts.clone(),
            lent_out: (0..opts.queues.max(1)).map(|_| None).collect(),
            lent: None,
        })
    }

    /// Lends receive queue `q` (not the shared one) to the worker of its
    /// owner, a latency-high vNIC: the port returned receives that queue
    /// and sends on transmit sockets of its own, so the owner's frames to
    /// and from the wire never wait for this port's worker. Its filter
    /// keeps following the table here. None when `q` is the shared queue,
    /// lent already, or the transmit sockets cannot be opened (said in the
    /// log).
    pub fn lend(&mut self, q: usize) -> Option<UplinkPort> {
        if q == 0 || self.lent.is_some() {
            return None;
        }
        let opened = frame_size(&self.ifname)
            .map_err(|e| ("socket (interface MTU)", e))
            .and_then(|fs| open_tx(&self.ifname, fs, &self.opts));
        let (tx, big_tx) = match opened {
            Ok(t) => t,
            Err((what, e)) => {
                log::warn!("uplink {}: queue {q} stays here: {what}: {e}", self.ifname);
                return None;
            }
        };
        let handle = match self.queues.get(q)?.as_ref()?.ring.handle() {
            Ok(h) => h,
            Err(e) => {
                log::warn!("uplink {}: queue {q} stays here: {e}", self.ifname);
                return None;
            }
        };
        let rx = self.queues[q].take()?;
        self.lent_out[q] = Some(LentOut {
            handle,
            program: rx.program.clone(),
            packets: rx.packets,
            bytes: rx.bytes,
        });
        Some(UplinkPort {
            ifname: self.ifname.clone(),
            queues: vec![Some(rx)],
            tx,
            big_tx,
            big_buf: vec![0u8; BUF_LEN].into_boxed_slice(),
            big_pending: false,
            table: QueueTable::new(1),
            // Shares divide the link here; the holder only enforces its
            // owner's limit (the owner's frames bypass this scheduler).
            sched: Scheduler::new(None),
            opts: self.opts.clone(),
            lent_out: vec![None],
            lent: Some(q),
        })
    }

    /// Takes back a queue [`UplinkPort::lend`] gave (the holder's
    /// transmit sockets close with it).
    pub fn take_back(&mut self, mut held: UplinkPort) {
        let (Some(q), Some(rx)) = (held.lent, held.queues.pop().flatten()) else {
            return;
        };
        let Some(out) = self.lent_out.get_mut(q).and_then(Option::take) else {
            return;
        };
        self.queues[q] = Some(rx);
        // The table may have changed the filter meanwhile.
        if let Some(rx) = self.queues[q].as_mut() {
            rx.program = out.program;
        }
    }

    /// For a lent queue's holder: the queue's number on the uplink.
    pub fn lent(&self) -> Option<usize> {
        self.lent
    }

    /// Whether queue `q` is lent to another worker, and the frames and
    /// bytes taken from it before it left.
    pub fn lent_out(&self, q: usize) -> Option<(u64, u64)> {
        let o = self.lent_out.get(q)?.as_ref()?;
        Some((o.packets, o.bytes))
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The options it was opened with.
    pub fn options(&self) -> &UplinkOptions {
        &self.opts
    }

    /// What the worker should watch: every receive socket (the rings are
    /// polled; readiness only wakes a sleeping worker).
    pub fn watched(&self, out: &mut Vec<Watched>) {
        for q in self.queues.iter().flatten() {
            out.push((q.ring.as_raw_fd(), Watch::Connection));
        }
    }

    /// Who owns which receive queue.
    pub fn table(&self) -> &QueueTable {
        &self.table
    }

    /// Changes the queue table (vNICs joining, leaving, learning their MAC)
    /// and installs the filter programs that changed. Not on the per-frame
    /// path: a few system calls per change.
    pub fn update_queues(&mut self, f: impl FnOnce(&mut QueueTable) -> bool) {
        // A lent queue's filter is the lender's to keep.
        if self.lent.is_some() || !f(&mut self.table) {
            return;
        }
        // The dedicated queues first: a moving address is briefly taken by
        // two queues rather than by none.
        for q in (0..self.queues.len()).rev() {
            let program = self.table.program(q);
            if let Some(Some(out)) = self.lent_out.get_mut(q) {
                if out.program != program {
                    match out.handle.set_filter(&program) {
                        Ok(()) => out.program = program,
                        Err(e) => log::warn!(
                            "uplink {}: lent queue {q}: cannot set its filter: {e}",
                            self.ifname
                        ),
                    }
                }
                continue;
            }
            let Some(Some(rx)) = self.queues.get_mut(q) else {
                continue;
            };
            if rx.program == program {
                continue;
            }
            match rx.ring.set_filter(&program) {
                Ok(()) => rx.program = program,
                Err(e) => log::warn!(
                    "uplink {}: queue {q}: cannot set its filter: {e}",
                    self.ifname
                ),
            }
        }
    }

    /// Number of receive queues.
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// Receive queue `q`, unless the data path holds it.
    pub fn queue_mut(&mut self, q: usize) -> Option<&mut RxQueue> {
        self.queues.get_mut(q)?.as_mut()
    }

    /// Takes receive queue `q` out (give it back with [`UplinkPort::put_queue`]).
    pub fn take_queue(&mut self, q: usize) -> Option<RxQueue> {
        self.queues.get_mut(q)?.take()
    }

    /// Gives back a queue taken with [`UplinkPort::take_queue`].
    pub fn put_queue(&mut self, q: usize, rx: RxQueue) {
        if let Some(s) = self.queues.get_mut(q) {
            *s = Some(rx);
        }
    }

    /// A transmit buffer for `len` bytes (virtio-net header, then the
    /// frame): the next free ring slot (the ring is flushed once when full),
    /// or for a frame larger than a slot a separate buffer. None: the ring
    /// stays full, or the frame is larger than any frame the port carries.
    #[inline]
    pub fn tx_buf(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.tx.slot_len() {
            if len > self.big_buf.len() {
                return None;
            }
            self.big_pending = true;
            return Some(&mut self.big_buf[..]);
        }
        self.big_pending = false;
        if self.tx.slot().is_none() {
            let _ = self.tx.flush();
        }
        self.tx.slot()
    }

    /// Whether a frame of `len` bytes (header included) can be queued now
    /// (flushes the ring once when it is full).
    #[inline]
    pub fn tx_ready(&mut self, len: usize) -> bool {
        if len > self.tx.slot_len() {
            return true;
        }
        if self.tx.slot().is_none() {
            let _ = self.tx.flush();
        }
        self.tx.slot().is_some()
    }

    /// Sends the first `len` bytes of the buffer [`UplinkPort::tx_buf`]
    /// returned: queued in the ring, or (a large frame) sent at once after
    /// the frames queued before it. False when the kernel refused it.
    #[inline]
    pub fn tx_commit(&mut self, len: usize) -> bool {
        if !self.big_pending {
            self.tx.commit(len);
            return true;
        }
        self.big_pending = false;
        self.flush();
        matches!(self.big_tx.send(&self.big_buf[..len]), Ok(n) if n == len)
    }

    /// Hands queued frames to the kernel (one system call when any are queued).
    #[inline]
    pub fn flush(&mut self) {
        if self.tx.pending() > 0 {
            if let Err(e) = self.tx.flush() {
                log::debug!("uplink {}: transmit: {e}", self.ifname);
            }
        }
    }

    /// Frames queued and not yet flushed.
    pub fn pending(&self) -> usize {
        self.tx.pending()
    }

    /// Sends one frame (virtio-net header first) at once; false when the
    /// ring is full or the frame does not fit a slot.
    pub fn send_frame(&mut self, frame: &[u8]) -> bool {
        let Some(buf) = self.tx_buf(frame.len()) else {
            return false;
        };
        buf[..frame.len()].copy_from_slice(frame);
        let ok = self.tx_commit(frame.len());
        self.flush();
        ok
    }
}

impl Kind for UplinkPort {
    // A packet socket hands any TCP GSO or partially checksummed frame to
    // the kernel, which completes it as needed, and passes the stack's own
    // TCP GSO frames.
    fn rx_caps(&self) -> Caps {
        Caps::ALL
    }

    fn tx_caps(&self) -> Caps {
        Caps::ALL
    }

    fn watched(&self, out: &mut Vec<Watched>) {
        UplinkPort::watched(self, out)
    }

    // The rings are polled every round; readiness only woke the worker.

    fn sched(&self) -> Option<&Scheduler> {
        Some(&self.sched)
    }

    #[inline]
    fn sched_mut(&mut self) -> Option<&mut Scheduler> {
        Some(&mut self.sched)
    }

    fn is_lent(&self) -> bool {
        self.lent.is_some()
    }

    #[inline]
    fn tx_ready(&mut self, len: usize) -> bool {
        UplinkPort::tx_ready(self, HDR_LEN + len)
    }

    /// A flood counts against the wire, not the sender.
    fn charge_flood(&mut self, _from: crate::PortId, _guest: bool, bytes: usize) -> bool {
        self.sched.charge(bytes);
        true
    }

    #[inline]
    fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        _cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError> {
        self.deliver_frame(f, tagging)
    }

    /// The round's frames to the wire leave in one system call; frames
    /// the scheduler held are tried again soon.
    fn end_round(&mut self, cx: RoundCx<'_>) -> Option<Instant> {
        self.flush();
        self.sched.wake_at(cx.now)
    }

    fn describe(&self) -> Described {
        let kind = if self.lent().is_some() {
            "uplink-queue"
        } else {
            "uplink"
        };
        Described {
            wire: kind == "uplink",
            ..Described::running(kind, self.ifname().to_string())
        }
    }

    fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize {
        UplinkPort::receive_from(sw, i, now, budget)
    }
}

/// The ring slot size for `ifname`'s MTU.
fn frame_size(ifname: &str) -> io::Result<usize> {
    Ok(packet::frame_size_for(packet::mtu(ifname)?))
}

/// An uplink's transmit ring and its socket for frames larger than a slot.
fn open_tx(
    ifname: &str,
    frame_size: usize,
    opts: &UplinkOptions,
) -> Result<(TxRing, PlainTx), (&'static str, io::Error)> {
    let tx = TxRing::open(ifname, frame_size, opts.tx_frames, opts.qdisc_bypass)
        .map_err(|e| ("transmit ring", e))?;
    let big_tx = PlainTx::open(ifname, opts.qdisc_bypass).map_err(|e| ("transmit socket", e))?;
    Ok((tx, big_tx))
}
