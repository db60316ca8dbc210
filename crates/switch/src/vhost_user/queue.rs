//! A started split virtqueue on the device side: popping validated chains,
//! returning used buffers, and notifying the driver (honouring EVENT_IDX
//! and VRING_AVAIL_F_NO_INTERRUPT).
//!
//! virtio-queue's [`Queue`] validates the ring addresses when the queue
//! starts; the per-frame ring accesses are ours, straight on the mapped
//! region that holds each ring (found once, at start), because the generic
//! guest-memory accessors cost more than the rest of the data path.
//! Chain walking is [`super::chain`].

use super::chain::{self, Chain, ChainError, Seg, MAX_SEGS};
use super::log::{log_chain, QueueLog};
use super::memory::GuestMem;
use crate::stats::QueueStats;
use crate::sys::ring_mem::RingMem;
use std::fs::File;
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

const VRING_AVAIL_F_NO_INTERRUPT: u16 =
    virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16;
const VRING_USED_F_NO_NOTIFY: u16 = virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY as u16;

/// Why a queue could not start.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Size not a power of two, or above the maximum.
    #[error("invalid queue size {0}")]
    Size(u16),
    /// Rings not inside guest memory (or across two regions), or misaligned.
    #[error("rings outside guest memory or misaligned")]
    Rings,
    /// The call eventfd could not be duplicated.
    #[error("call eventfd unusable")]
    Call(#[source] std::io::Error),
}

/// One ring, inside the mapped region that holds all of it.
#[derive(Debug)]
struct Ring(RingMem);

impl Ring {
    fn at(mem: &GuestMem, addr: GuestAddress, len: u64) -> Result<Self, QueueError> {
        let (region, base) = mem.region_for(addr, len).ok_or(QueueError::Rings)?;
        RingMem::new(region, base, len)
            .map(Self)
            .ok_or(QueueError::Rings)
    }

    fn load(&self, off: u64, order: Ordering) -> Result<u16, ChainError> {
        self.0.load_u16(off as usize, order).ok_or(ChainError::Ring)
    }

    fn store(&self, off: u64, v: u16, order: Ordering) -> Result<(), ChainError> {
        self.0
            .store_u16(off as usize, v, order)
            .ok_or(ChainError::Ring)
    }

    /// A ring entry the driver wrote earlier (it is published by the index
    /// the caller read with Acquire before).
    fn read_u16(&self, off: u64) -> Result<u16, ChainError> {
        self.load(off, Ordering::Relaxed)
    }

    /// A used element (id, len): two 4-byte stores, as the used ring is
    /// only 4-byte aligned.
    fn write_used(&self, off: u64, id: u32, len: u32) -> Result<(), ChainError> {
        let off = off as usize;
        self.0
            .store_u32(off, id, Ordering::Relaxed)
            .and_then(|()| self.0.store_u32(off + 4, len, Ordering::Relaxed))
            .ok_or(ChainError::Ring)
    }

    /// Descriptor `idx` as two 8-byte loads (the table is 16-byte aligned).
    fn descriptor(&self, idx: u16) -> Option<Descriptor> {
        let (lo, hi) = self.0.load_u64_pair(usize::from(idx))?;
        Some(Descriptor::new(
            lo,
            hi as u32,
            (hi >> 32) as u16,
            (hi >> 48) as u16,
        ))
    }

    /// Hints that descriptor `idx` will be read soon.
    fn prefetch_descriptor(&self, idx: u16) {
        self.0.prefetch(usize::from(idx) * 16);
    }
}

/// Most chains popped at once by [`ActiveQueue::pop_burst`].
pub const BURST: usize = 32;
/// Room for the buffers of a burst: popping stops while less than one
/// longest chain's worth is left.
const BURST_SEGS: usize = 4 * MAX_SEGS;

/// Chains popped together: their descriptors are read and their first
/// buffers prefetched before the first frame is looked at, so the misses
/// on what the driver wrote on another core overlap instead of adding up.
#[derive(Debug, Clone)]
pub struct Burst {
    heads: [u16; BURST],
    lens: [u64; BURST],
    /// Chain k's buffers are `segs[at[k]..at[k + 1]]`.
    at: [u16; BURST + 1],
    segs: [Seg; BURST_SEGS],
    n: usize,
    /// Chains the driver had made available when the burst was popped.
    pending: u16,
}

impl Default for Burst {
    fn default() -> Self {
        Self::new()
    }
}

impl Burst {
    /// An empty burst (reused round after round).
    pub fn new() -> Self {
        Self {
            heads: [0; BURST],
            lens: [0; BURST],
            at: [0; BURST + 1],
            segs: [Seg::default(); BURST_SEGS],
            n: 0,
            pending: 0,
        }
    }

    /// Chains in the burst.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when nothing was popped.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Chains the driver had made available when the burst was popped (the
    /// queue's depth as the switch found it).
    pub fn pending(&self) -> u16 {
        self.pending
    }

    /// Chain `k`: its head index, buffers and total length.
    pub fn chain(&self, k: usize) -> (u16, &[Seg], u64) {
        let (from, to) = (usize::from(self.at[k]), usize::from(self.at[k + 1]));
        (self.heads[k], &self.segs[from..to], self.lens[k])
    }
}

/// A running queue.
#[derive(Debug)]
pub struct ActiveQueue {
    mem: Arc<GuestMem>,
    size: u16,
    desc: Ring,
    avail: Ring,
    used: Ring,
    next_avail: Wrapping<u16>,
    /// The driver's available index as last read (re-read only when caught up).
    avail_seen: u16,
    next_used: Wrapping<u16>,
    num_added: Wrapping<u16>,
    /// Used elements written but not yet published with the used index.
    unpublished: bool,
    event_idx: bool,
    call: Option<File>,
    /// Set when signalling `call` failed (it would have blocked).
    call_failed: Option<std::io::Error>,
    writable: bool,
    used_pending: bool,
    /// Chains popped ahead ([`ActiveQueue::take`]; moved out while being
    /// refilled): the next one to hand out is `ahead_next`; the rest are not
    /// consumed yet.
    ahead: Option<Box<Burst>>,
    ahead_next: usize,
    /// The dirty log while a migration logs this queue's writes.
    log: Option<QueueLog>,
}

/// Ring addresses in guest-physical space.
#[derive(Debug, Clone, Copy)]
pub struct RingAddrs {
    /// Descriptor table.
    pub desc: GuestAddress,
    /// Available ring.
    pub avail: GuestAddress,
    /// Used ring.
    pub used: GuestAddress,
}

/// Largest queue this device accepts.
pub const MAX_QUEUE_SIZE: u16 = 32768;

impl ActiveQueue {
    /// Starts a queue of `size` entries at `addrs`, resuming at `base`.
    /// `writable`: the driver's buffers are for the device to write (a receive queue).
    pub fn start(
        mem: Arc<GuestMem>,
        size: u16,
        addrs: RingAddrs,
        base: u16,
        event_idx: bool,
        call: Option<File>,
        writable: bool,
    ) -> Result<Self, QueueError> {
        // virtio-queue checks size, alignment and that the rings are in memory.
        let mut queue = Queue::new(MAX_QUEUE_SIZE).map_err(|_| QueueError::Size(size))?;
        queue
            .try_set_size(size)
            .map_err(|_| QueueError::Size(size))?;
        queue
            .try_set_desc_table_address(addrs.desc)
            .map_err(|_| QueueError::Rings)?;
        queue
            .try_set_avail_ring_address(addrs.avail)
            .map_err(|_| QueueError::Rings)?;
        queue
            .try_set_used_ring_address(addrs.used)
            .map_err(|_| QueueError::Rings)?;
        queue.set_ready(true);
        if !queue.is_valid(mem.mem()) {
            return Err(QueueError::Rings);
        }
        let n = u64::from(size);
        let desc = Ring::at(&mem, addrs.desc, 16 * n)?;
        let avail = Ring::at(&mem, addrs.avail, 6 + 2 * n)?;
        let used = Ring::at(&mem, addrs.used, 6 + 8 * n)?;
        let base = resume_index(&used, base);
        let mut q = Self {
            mem,
            size,
            desc,
            avail,
            used,
            next_avail: Wrapping(base),
            avail_seen: base,
            next_used: Wrapping(base),
            num_added: Wrapping(0),
            unpublished: false,
            event_idx,
            call,
            call_failed: None,
            writable,
            used_pending: false,
            ahead: Some(Box::new(Burst::new())),
            ahead_next: 0,
            log: None,
        };
        // The worker polls a queue that just started; it asks for kicks again before it sleeps.
        q.disable_notification();
        Ok(q)
    }

    /// Starts (Some) or stops (None) marking this queue's writes in a
    /// dirty log.
    pub fn set_log(&mut self, log: Option<QueueLog>) {
        self.log = log;
    }

    /// Marks `len` bytes of the used ring at `off` in the log, if logging.
    #[inline]
    fn log_used(&self, off: u64, len: u64) {
        if let Some(l) = &self.log {
            l.log.mark(l.used.wrapping_add(off), len);
        }
    }

    /// The memory the queue's buffers live in.
    pub fn mem(&self) -> &Arc<GuestMem> {
        &self.mem
    }

    /// Where the device will resume (GET_VRING_BASE's answer).
    pub fn next_avail(&self) -> u16 {
        self.next_avail.0
    }

    /// True when the driver has offered chains not yet popped.
    pub fn has_available(&self) -> Result<bool, ChainError> {
        Ok(self.avail.load(2, Ordering::Acquire)? != self.next_avail.0)
    }

    /// Pops and validates the next available chain into `chain`; false when none is available.
    pub fn pop_into(&mut self, chain: &mut Chain) -> Result<bool, ChainError> {
        // The driver's index lives in a cache line it keeps writing: read it
        // once per batch, not once per chain.
        if self.avail_seen == self.next_avail.0 {
            self.avail_seen = self.avail.load(2, Ordering::Acquire)?;
        }
        let pending = self.avail_seen.wrapping_sub(self.next_avail.0);
        if pending == 0 {
            return Ok(false);
        }
        if pending > self.size {
            return Err(ChainError::IndexJump);
        }
        let head = self.avail.read_u16(self.avail_slot(0))?;
        self.next_avail += Wrapping(1);
        let (desc, mem) = (&self.desc, &self.mem);
        chain::walk_into(
            chain,
            |i| desc.descriptor(i),
            |addr, len| mem.contains(addr, len),
            self.size,
            head,
            self.writable,
        )?;
        Ok(true)
    }

    /// Like [`ActiveQueue::pop_into`], from chains popped ahead a burst at a
    /// time (the receive path takes one chain per frame from a ring the
    /// driver refills in batches): each refill overlaps the misses on the
    /// driver's descriptors and buffers. A refill pops `want` chains (the
    /// frames the caller has waiting, at most [`BURST`]): a single frame in
    /// flight waits for one walk, not for 32. [`ActiveQueue::untake`] gives
    /// chains back; [`ActiveQueue::stop`] returns the ones never taken.
    pub fn take(&mut self, chain: &mut Chain, want: usize) -> Result<bool, ChainError> {
        let Some(mut ahead) = self.ahead.take() else {
            return Ok(false);
        };
        let mut r = Ok(());
        if self.ahead_next == ahead.len() {
            self.ahead_next = 0;
            r = self.pop_burst(&mut ahead, want.clamp(1, BURST));
        }
        let got = r.is_ok() && self.ahead_next < ahead.len();
        if got {
            let (head, segs, len) = ahead.chain(self.ahead_next);
            chain.set(head, segs, len);
            self.ahead_next += 1;
        }
        self.ahead = Some(ahead);
        r.map(|()| got)
    }

    /// Chains popped ahead and not handed out yet.
    fn ahead_left(&self) -> usize {
        self.ahead
            .as_ref()
            .map_or(0, |a| a.len().saturating_sub(self.ahead_next))
    }

    /// Gives back the last `n` chains [`ActiveQueue::take`] handed out.
    pub fn untake(&mut self, n: usize) {
        if n <= self.ahead_next {
            self.ahead_next -= n;
        } else {
            // Some came from an earlier burst: give back everything not
            // consumed (contiguous in the available ring) and pop again.
            let back = self.ahead_left() + n;
            self.next_avail -= Wrapping(back as u16);
            if let Some(a) = self.ahead.as_mut() {
                a.n = 0;
            }
            self.ahead_next = 0;
        }
    }

    /// The available ring's entry `ahead` chains after the next one.
    fn avail_slot(&self, ahead: u16) -> u64 {
        4 + 2 * u64::from(self.next_avail.0.wrapping_add(ahead) % self.size)
    }

    /// Pops and validates up to `max` (at most [`BURST`]) available chains
    /// into `b`. On a bad chain, `b` holds the valid chains before it and
    /// the error is returned (the caller resets the port).
    pub fn pop_burst(&mut self, b: &mut Burst, max: usize) -> Result<(), ChainError> {
        b.n = 0;
        if self.avail_seen == self.next_avail.0 {
            self.avail_seen = self.avail.load(2, Ordering::Acquire)?;
        }
        let pending = self.avail_seen.wrapping_sub(self.next_avail.0);
        if pending > self.size {
            return Err(ChainError::IndexJump);
        }
        b.pending = pending;
        let n = usize::from(pending).min(max).min(BURST);
        // Every head first, their descriptors prefetched: the walks below
        // then find them arriving together.
        for k in 0..n {
            let h = self.avail.read_u16(self.avail_slot(k as u16))?;
            b.heads[k] = h;
            // A lone chain is read right away: a hint would only cost.
            if n > 1 && h < self.size {
                self.desc.prefetch_descriptor(h);
            }
        }
        let mut used = 0;
        b.at[0] = 0;
        let desc = &self.desc;
        let mem = &self.mem;
        for k in 0..n {
            let Some(room) = b.segs.get_mut(used..used + MAX_SEGS) else {
                break;
            };
            let room: &mut [Seg; MAX_SEGS] = room.try_into().map_err(|_| ChainError::TooLong)?;
            self.next_avail += Wrapping(1);
            let (cnt, len) = chain::walk_segs(
                room,
                |i| desc.descriptor(i),
                |addr, len| mem.contains(addr, len),
                self.size,
                b.heads[k],
                self.writable,
            )?;
            // The virtio-net header and the Ethernet header after it: read
            // (or written) first, and often across a line boundary (a driver
            // that puts the header in the headroom before the frame, as DPDK does).
            let first = b.segs[used];
            if n > 1 {
                self.mem.prefetch(first.addr, self.writable);
                if first.len > 32 {
                    self.mem.prefetch(first.addr + 32, self.writable);
                }
            }
            used += cnt;
            b.lens[k] = len;
            b.at[k + 1] = used as u16;
            b.n = k + 1;
        }
        Ok(())
    }

    /// Gives back the last `n` popped chains (they will be popped again).
    pub fn unpop_n(&mut self, n: u16) {
        self.next_avail -= Wrapping(n);
    }

    /// Pops and validates the next available chain.
    pub fn pop(&mut self) -> Result<Option<Chain>, ChainError> {
        let mut c = Chain::new();
        Ok(self.pop_into(&mut c)?.then_some(c))
    }

    /// Gives back the last popped chain (it will be popped again).
    pub fn unpop(&mut self) {
        self.next_avail -= Wrapping(1);
    }

    /// Where the device stops: used elements published, the next available index returned.
    pub fn stop(mut self) -> u16 {
        self.flush();
        // Chains popped ahead but never taken were not consumed.
        (self.next_avail - Wrapping(self.ahead_left() as u16)).0
    }

    /// Returns a chain to the driver with `len` bytes written. The driver
    /// sees it at the next [`ActiveQueue::flush`] (or [`ActiveQueue::signal`],
    /// which flushes): one used-index store per batch.
    pub fn add_used(&mut self, head: u16, len: u32) -> Result<(), ChainError> {
        if head >= self.size {
            return Err(ChainError::IndexOutOfRange(head));
        }
        let slot = 4 + 8 * u64::from(self.next_used.0 % self.size);
        self.used.write_used(slot, u32::from(head), len)?;
        if let Some(l) = &self.log {
            l.log.mark(l.used.wrapping_add(slot), 8);
            if self.writable {
                let desc = &self.desc;
                log_chain(
                    &l.log,
                    |i| desc.descriptor(i),
                    self.size,
                    head,
                    u64::from(len),
                );
            }
        }
        self.next_used += Wrapping(1);
        self.num_added += Wrapping(1);
        self.unpublished = true;
        self.used_pending = true;
        Ok(())
    }

    /// Publishes the used elements added since the last flush.
    pub fn flush(&mut self) {
        if self.unpublished {
            self.unpublished = false;
            let _ = self.used.store(2, self.next_used.0, Ordering::Release);
            self.log_used(2, 2);
        }
    }

    /// Notifies the driver of used buffers if it wants to be (at most one write per call).
    pub fn signal(&mut self, stats: &QueueStats) {
        self.flush();
        if !self.used_pending {
            return;
        }
        if self.driver_wants_call() {
            self.call(stats);
        } else {
            self.decline(stats);
        }
    }

    /// True when used elements were added since the last call (or decline).
    pub fn used_pending(&self) -> bool {
        self.used_pending
    }

    /// True when the driver wants a call for the used elements added since
    /// the last one: with EVENT_IDX, its used_event lies among them; without,
    /// VRING_AVAIL_F_NO_INTERRUPT is clear.
    pub fn driver_wants_call(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.event_idx {
            let used_event = Wrapping(
                self.avail
                    .load(4 + 2 * u64::from(self.size), Ordering::Relaxed)
                    .unwrap_or(0),
            );
            let new = self.next_used;
            let old = new - self.num_added;
            // vring_need_event: the driver's event index lies in [old, new).
            new - used_event - Wrapping(1) < new - old
        } else {
            self.avail.load(0, Ordering::Relaxed).unwrap_or(0) & VRING_AVAIL_F_NO_INTERRUPT == 0
        }
    }

    /// Signals the call eventfd now (the used ring is published first).
    pub fn call(&mut self, stats: &QueueStats) {
        self.flush();
        self.used_pending = false;
        self.num_added = Wrapping(0);
        if let Some(call) = self.call.as_ref() {
            match crate::sys::eventfd::signal(call) {
                Ok(()) => crate::stats::bump(&stats.notifications_sent, 1),
                // The front-end made its call eventfd block (or broke it):
                // the caller resets the port at the end of the round.
                Err(e) => self.call_failed = Some(e),
            }
        }
    }

    /// True when signalling the call eventfd failed (the port must be reset).
    #[inline]
    pub fn call_failed(&self) -> bool {
        self.call_failed.is_some()
    }

    /// Why the last call could not be signalled, once (the port is reset).
    pub fn take_call_failure(&mut self) -> Option<std::io::Error> {
        self.call_failed.take()
    }

    /// The driver does not want a call for what was added so far (it polls).
    pub fn decline(&mut self, stats: &QueueStats) {
        self.used_pending = false;
        self.num_added = Wrapping(0);
        crate::stats::bump(&stats.notifications_suppressed, 1);
    }

    /// Asks the driver to kick on new buffers; returns true when some
    /// arrived meanwhile (poll again instead of sleeping).
    pub fn enable_notification(&mut self) -> bool {
        let avail_event = 4 + 8 * u64::from(self.size);
        let r = if self.event_idx {
            let r = self
                .used
                .store(avail_event, self.next_avail.0, Ordering::Relaxed);
            self.log_used(avail_event, 2);
            r
        } else {
            let r = self.used.store(0, 0, Ordering::Relaxed);
            self.log_used(0, 2);
            r
        };
        fence(Ordering::SeqCst);
        r.is_err() || self.has_available().unwrap_or(true)
    }

    /// Switches EVENT_IDX on or off (features may be acked after the start).
    pub fn set_event_idx(&mut self, on: bool) {
        self.event_idx = on;
    }

    /// Asks the driver not to kick (the worker is polling).
    pub fn disable_notification(&mut self) {
        if !self.event_idx {
            let _ = self
                .used
                .store(0, VRING_USED_F_NO_NOTIFY, Ordering::Relaxed);
            self.log_used(0, 2);
        }
    }
}

/// Where a starting queue resumes. This device completes chains in
/// order, so the used index in the ring is where it stopped, even when it
/// died without answering GET_VRING_BASE: a front-end whose base disagrees
/// (a stale copy after a crash) is overruled by the ring, as rewinding the
/// used index under the driver would corrupt it. A fresh ring holds 0, as
/// does the base.
fn resume_index(used: &Ring, base: u16) -> u16 {
    match used.load(2, Ordering::Acquire) {
        Ok(idx) if idx != base => {
            log::warn!("vring base {base} but the used index is {idx}: resuming at {idx}");
            idx
        }
        _ => base,
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
