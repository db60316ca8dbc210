//! A started virtqueue on the device side: popping validated chains,
//! returning used buffers, and notifying the driver, in either ring layout:
//! split (`vhost_user/split.rs`) or packed (`vhost_user/packed/`), chosen when the queue
//! starts. The layout is an enum matched in each call (one
//! predictable branch); what both share lives here: chains popped ahead
//! for the receive path, and the call eventfd. Chain walking is
//! [`super::chain`].

use super::chain::{Chain, ChainError, Seg, MAX_SEGS};
use super::log::QueueLog;
use super::memory::GuestMem;
pub use super::packed::PackedFeatures;
use super::packed::PackedRing;
use super::popped::Popped;
use super::split::SplitRing;
use crate::stats::QueueStats;
use std::fs::File;
use std::sync::Arc;
use vm_memory::GuestAddress;

/// Why a queue could not start.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Size not a power of two, or above the maximum.
    #[error("invalid queue size {0}")]
    Size(u16),
    /// Rings not inside guest memory (or across two regions), or misaligned.
    #[error("rings outside guest memory or misaligned")]
    Rings,
    /// A packed ring's vring base names a slot beyond the queue.
    #[error("vring base {0:#x} outside the queue")]
    Base(u32),
    /// The call eventfd could not be duplicated.
    #[error("call eventfd unusable")]
    Call(#[source] std::io::Error),
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
    pub(super) heads: [u16; BURST],
    pub(super) lens: [u64; BURST],
    /// Chain k's buffers are `segs[at[k]..at[k + 1]]`.
    pub(super) at: [u16; BURST + 1],
    pub(super) segs: [Seg; BURST_SEGS],
    pub(super) n: usize,
    /// Chains the driver had made available when the burst was popped
    /// (packed rings: the chains popped, as their depth is not known
    /// without walking the ring).
    pub(super) pending: u16,
    /// A transmit burst's buffers are prefetched as they are popped
    /// (receive buffers always are; `datapath/read_ahead.rs`).
    pub(super) read_ahead: bool,
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
            read_ahead: false,
        }
    }

    /// Whether the next pops prefetch transmit buffers.
    #[inline]
    pub fn set_read_ahead(&mut self, on: bool) {
        self.read_ahead = on;
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

    /// Chain `k`: its head index, buffers and total length. (Always
    /// inlined: called per frame, it was not, and the call cost as much as
    /// its body.)
    #[inline(always)]
    pub fn chain(&self, k: usize) -> (u16, &[Seg], u64) {
        let (from, to) = (usize::from(self.at[k]), usize::from(self.at[k + 1]));
        (self.heads[k], &self.segs[from..to], self.lens[k])
    }
}

/// The ring layout a queue runs.
#[derive(Debug)]
enum Layout {
    Split(SplitRing),
    Packed(PackedRing),
}

/// Calls `$m` on whichever ring the queue runs.
macro_rules! ring {
    ($q:expr, $r:ident => $e:expr) => {
        match $q {
            Layout::Split($r) => $e,
            Layout::Packed($r) => $e,
        }
    };
}

/// A running queue.
#[derive(Debug)]
pub struct ActiveQueue {
    mem: Arc<GuestMem>,
    ring: Layout,
    call: Option<File>,
    /// Set when signalling `call` failed (it would have blocked).
    call_failed: Option<std::io::Error>,
    used_pending: bool,
    /// False from the start until the first call: the driver's event index
    /// says nothing about what this device has signalled (see `running`).
    signalled: bool,
    /// Chains popped ahead ([`ActiveQueue::take`]): the next one to hand
    /// out is `ahead_next`; the rest are not consumed yet.
    ahead: Box<Burst>,
    ahead_next: usize,
    /// The driver's buffers are for the device to write (a receive queue).
    writable: bool,
    /// While a migration logs a receive queue: the buffers of the chains
    /// popped and not yet used, which a used chain marks in the log.
    popped: Option<Box<Popped>>,
}

/// Ring addresses in guest-physical space.
#[derive(Debug, Clone, Copy)]
pub struct RingAddrs {
    /// Descriptor table (a packed queue's descriptor ring).
    pub desc: GuestAddress,
    /// Available ring (a packed queue's driver event area).
    pub avail: GuestAddress,
    /// Used ring (a packed queue's device event area).
    pub used: GuestAddress,
}

/// Largest queue this device accepts.
pub const MAX_QUEUE_SIZE: u16 = 32768;

impl ActiveQueue {
    /// Starts a split queue of `size` entries at `addrs`, resuming at `base`.
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
        let ring = SplitRing::start(&mem, size, addrs, base, event_idx, writable)?;
        Ok(Self::running(mem, Layout::Split(ring), call, writable))
    }

    /// Starts a packed queue of `size` entries at `addrs`, resuming at
    /// `base` (a vhost-user vring state: the avail slot in bits 0-14, its
    /// wrap counter in bit 15).
    pub fn start_packed(
        mem: Arc<GuestMem>,
        size: u16,
        addrs: RingAddrs,
        base: u32,
        features: PackedFeatures,
        call: Option<File>,
        writable: bool,
    ) -> Result<Self, QueueError> {
        let ring = PackedRing::start(&mem, size, addrs, base, features, writable)?;
        Ok(Self::running(mem, Layout::Packed(ring), call, writable))
    }

    fn running(mem: Arc<GuestMem>, ring: Layout, call: Option<File>, writable: bool) -> Self {
        let mut q = Self {
            mem,
            ring,
            call,
            call_failed: None,
            // A queue that starts on rings already in use (the switch
            // restarted, or the front-end reconnected) cannot know whether the
            // last used entries were ever signalled: a device killed between
            // publishing them and calling leaves a driver waiting for a call
            // that the event index will never ask for again (its used_event
            // lies behind the used index). So the first round calls once,
            // whatever the driver's suppression says, as Linux's vhost does
            // (`signalled_used_valid`): a spurious interrupt costs the guest
            // a look at its ring; a lost one stops its queue for good.
            used_pending: true,
            signalled: false,
            ahead: Box::new(Burst::new()),
            ahead_next: 0,
            writable,
            popped: None,
        };
        // The worker polls a queue that just started; it asks for kicks again before it sleeps.
        q.disable_notification();
        q
    }

    /// Starts (Some) or stops (None) marking this queue's writes in a dirty
    /// log. (A packed ring marks its descriptor ring and event area at the
    /// addresses it runs on; the used-ring address the front-end gave for
    /// logging is a split ring's.) A receive queue marks the buffers it
    /// writes from what it popped (`popped.rs`): the chains popped ahead
    /// are given back first, to be recorded when popped again.
    pub fn set_log(&mut self, log: Option<QueueLog>) {
        let left = self.ahead_left() as u16;
        self.unpop_n(left);
        self.ahead.n = 0;
        self.ahead_next = 0;
        self.popped = match &log {
            Some(l) if self.writable => Some(Box::new(Popped::new(Arc::clone(&l.log)))),
            _ => None,
        };
        match &mut self.ring {
            Layout::Split(r) => r.set_log(log),
            Layout::Packed(r) => r.set_log(log.map(|l| l.log)),
        }
    }

    /// True when the queue runs the packed layout.
    pub fn is_packed(&self) -> bool {
        matches!(self.ring, Layout::Packed(_))
    }

    /// The memory the queue's buffers live in.
    pub fn mem(&self) -> &Arc<GuestMem> {
        &self.mem
    }

    /// Where the device will resume: the available index (packed: the
    /// slot and, in bit 15, the wrap counter).
    pub fn next_avail(&self) -> u16 {
        ring!(&self.ring, r => r.next_avail())
    }

    /// True when the driver has offered chains not yet popped.
    pub fn has_available(&self) -> Result<bool, ChainError> {
        ring!(&self.ring, r => r.has_available())
    }

    /// Pops and validates the next available chain into `chain`; false when none is available.
    pub fn pop_into(&mut self, chain: &mut Chain) -> Result<bool, ChainError> {
        if self.popped.as_ref().is_some_and(|p| p.room() == 0) {
            return Ok(false);
        }
        let popped = match &mut self.ring {
            Layout::Split(r) => r.pop_into(&self.mem, chain)?,
            Layout::Packed(r) => {
                let mut segs = [Seg::default(); MAX_SEGS];
                match r.pop_segs(&self.mem, &mut segs)? {
                    Some((id, n, len)) => {
                        chain.set(id, &segs[..n], len);
                        true
                    }
                    None => false,
                }
            }
        };
        if let (Some(p), true) = (self.popped.as_deref_mut(), popped) {
            p.push(chain.head(), chain.segs());
        }
        Ok(popped)
    }

    /// Like [`ActiveQueue::pop_into`], from chains popped ahead a burst at a
    /// time (the receive path takes one chain per frame from a ring the
    /// driver refills in batches): each refill overlaps the misses on the
    /// driver's descriptors and buffers. A refill pops `want` chains (the
    /// frames the caller has waiting, at most [`BURST`]): a single frame in
    /// flight waits for one walk, not for 32. [`ActiveQueue::untake`] gives
    /// chains back; [`ActiveQueue::stop`] returns the ones never taken.
    #[inline]
    pub fn take(&mut self, chain: &mut Chain, want: usize) -> Result<bool, ChainError> {
        let Some(k) = self.next_ahead(want)? else {
            return Ok(false);
        };
        let (head, segs, len) = self.ahead.chain(k);
        chain.set(head, segs, len);
        Ok(true)
    }

    /// Like [`ActiveQueue::take`], handing out only the chain's head, first
    /// buffer and total length (the fast case copies a frame into one
    /// buffer): its buffers are not copied into a [`Chain`]. None when no
    /// chain is available; [`ActiveQueue::untake`] gives it back.
    #[inline(always)]
    pub fn take_first(&mut self, want: usize) -> Result<Option<(u16, Seg, u64)>, ChainError> {
        let Some(k) = self.next_ahead(want)? else {
            return Ok(None);
        };
        let (head, segs, len) = self.ahead.chain(k);
        // A validated chain has a buffer.
        Ok(segs.first().map(|&first| (head, first, len)))
    }

    /// The next chain popped ahead, handed out (its index in `ahead`),
    /// refilling with up to `want` chains when all were handed out; None
    /// when the ring has none.
    #[inline(always)]
    fn next_ahead(&mut self, want: usize) -> Result<Option<usize>, ChainError> {
        if self.ahead_next == self.ahead.len() {
            self.refill(want.clamp(1, BURST))?;
        }
        let k = self.ahead_next;
        if k >= self.ahead.len() {
            return Ok(None);
        }
        self.ahead_next += 1;
        Ok(Some(k))
    }

    /// Readies the next receive chain while the worker has nothing else to
    /// do: pops it ahead (its available entry and descriptor read now) and
    /// asks for its first buffer and its used element for ownership, so a
    /// lone frame arriving later waits for none of those lines, each one a
    /// miss on the driver's core. For idle rounds: a chain already ahead is
    /// only hinted again (in case its lines went), and a busy ring pops a
    /// burst at a time in [`ActiveQueue::take`] anyway.
    pub fn prepare(&mut self) -> Result<(), ChainError> {
        if self.ahead_left() == 0 {
            self.refill(1)?;
        }
        if self.ahead_left() > 0 {
            let (_, segs, _) = self.ahead.chain(self.ahead_next);
            if let Some(first) = segs.first() {
                self.mem.prefetch(first.addr, first.len, true);
            }
        }
        Ok(())
    }

    /// Pops up to `max` chains ahead, the previous ones all handed out.
    #[inline]
    fn refill(&mut self, max: usize) -> Result<(), ChainError> {
        self.ahead_next = 0;
        // The ring's pop, not `self.pop_burst`: the burst is a field of
        // `self`, borrowed beside the ring.
        pop_recorded(
            &mut self.ring,
            &self.mem,
            self.popped.as_deref_mut(),
            &mut self.ahead,
            max,
        )
    }

    /// Chains popped ahead and not handed out yet.
    fn ahead_left(&self) -> usize {
        self.ahead.len().saturating_sub(self.ahead_next)
    }

    /// Gives back the last `n` chains [`ActiveQueue::take`] handed out.
    pub fn untake(&mut self, n: usize) {
        if n <= self.ahead_next {
            self.ahead_next -= n;
        } else {
            // Some came from an earlier burst: give back everything not
            // consumed (contiguous in the available ring) and pop again.
            let back = self.ahead_left() + n;
            self.unpop_n(back as u16);
            self.ahead.n = 0;
            self.ahead_next = 0;
        }
    }

    /// Pops and validates up to `max` (at most [`BURST`]) available chains
    /// into `b`. On a bad chain, `b` holds the valid chains before it and
    /// the error is returned (the caller resets the port).
    pub fn pop_burst(&mut self, b: &mut Burst, max: usize) -> Result<(), ChainError> {
        pop_recorded(
            &mut self.ring,
            &self.mem,
            self.popped.as_deref_mut(),
            b,
            max,
        )
    }

    /// Gives back the last `n` popped chains (they will be popped again).
    pub fn unpop_n(&mut self, n: u16) {
        ring!(&mut self.ring, r => r.unpop_n(n));
        if let Some(p) = self.popped.as_deref_mut() {
            p.unpop(usize::from(n));
        }
    }

    /// Pops and validates the next available chain.
    pub fn pop(&mut self) -> Result<Option<Chain>, ChainError> {
        let mut c = Chain::new();
        Ok(self.pop_into(&mut c)?.then_some(c))
    }

    /// Gives back the last popped chain (it will be popped again).
    pub fn unpop(&mut self) {
        self.unpop_n(1);
    }

    /// Where the device stops: used elements published, the next available index returned.
    pub fn stop(self) -> u16 {
        self.stop_state() as u16
    }

    /// Like [`ActiveQueue::stop`], as GET_VRING_BASE answers: a split
    /// queue's available index; a packed queue's avail slot and wrap
    /// counter in bits 0-15, its used slot and wrap counter in bits 16-31.
    pub fn stop_state(mut self) -> u32 {
        self.flush();
        // Chains popped ahead but never taken were not consumed.
        let left = self.ahead_left() as u16;
        self.unpop_n(left);
        match &self.ring {
            Layout::Split(r) => u32::from(r.next_avail()),
            Layout::Packed(r) => r.state(),
        }
    }

    /// Returns a chain to the driver with `len` bytes written. The driver
    /// sees it at the next [`ActiveQueue::flush`] (or [`ActiveQueue::signal`],
    /// which flushes): one used-index store (packed: one flags store) per batch.
    /// Chains are returned in the order they were popped. (Always inlined:
    /// once per frame on the fast case.)
    #[inline(always)]
    pub fn add_used(&mut self, head: u16, len: u32) -> Result<(), ChainError> {
        ring!(&mut self.ring, r => r.add_used(head, len))?;
        if let Some(p) = self.popped.as_deref_mut() {
            p.used(head, u64::from(len));
        }
        self.used_pending = true;
        Ok(())
    }

    /// Returns the first `n` chains of burst `b` as used, with no length
    /// (a transmit queue's: the device wrote nothing): one dispatch on the
    /// layout for the burst. Stops at the first error.
    pub fn add_used_burst(&mut self, b: &Burst, n: usize) -> Result<(), ChainError> {
        if n == 0 {
            return Ok(());
        }
        self.used_pending = true;
        let heads = &b.heads[..n.min(b.n)];
        if let Some(p) = self.popped.as_deref_mut() {
            for &head in heads {
                p.used(head, 0);
            }
        }
        match &mut self.ring {
            Layout::Split(r) => {
                for &head in heads {
                    r.add_used(head, 0)?;
                }
                Ok(())
            }
            Layout::Packed(r) => r.add_used_run(heads),
        }
    }

    /// Publishes the used elements added since the last flush.
    // Inline across codegen units: every round's end calls it, and whether
    // the compiler inlines it otherwise depends on how modules fall into
    // units.
    #[inline]
    pub fn flush(&mut self) {
        ring!(&mut self.ring, r => r.flush())
    }

    /// Notifies the driver of used buffers if it wants to be (at most one write per call).
    #[inline]
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
    /// the last one: with EVENT_IDX, its event index lies among them;
    /// without, its flags do not suppress calls.
    pub fn driver_wants_call(&self) -> bool {
        !self.signalled || ring!(&self.ring, r => r.driver_wants_call())
    }

    /// Signals the call eventfd now (the used ring is published first).
    pub fn call(&mut self, stats: &QueueStats) {
        self.flush();
        self.used_pending = false;
        self.signalled = true;
        ring!(&mut self.ring, r => r.notified());
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
        ring!(&mut self.ring, r => r.notified());
        crate::stats::bump(&stats.notifications_suppressed, 1);
    }

    /// Asks the driver to kick on new buffers; returns true when some
    /// arrived meanwhile (poll again instead of sleeping).
    pub fn enable_notification(&mut self) -> bool {
        ring!(&mut self.ring, r => r.enable_notification())
    }

    /// Switches EVENT_IDX on or off (features may be acked after the start).
    pub fn set_event_idx(&mut self, on: bool) {
        ring!(&mut self.ring, r => r.set_event_idx(on))
    }

    /// Asks the driver not to kick (the worker is polling).
    pub fn disable_notification(&mut self) {
        ring!(&mut self.ring, r => r.disable_notification())
    }
}

/// Pops up to `max` chains of `ring` into `b`, recorded in `popped` when
/// a migration logs (at most as many as it has room for). The recording
/// pop is out of line: inlined beside the plain one, the two copies of
/// the ring's pop made a packed ring's pop dearer even without a log
/// (`examples/ring_cost` under callgrind shows it).
#[inline(always)]
fn pop_recorded(
    ring: &mut Layout,
    mem: &GuestMem,
    popped: Option<&mut Popped>,
    b: &mut Burst,
    max: usize,
) -> Result<(), ChainError> {
    match popped {
        None => ring!(ring, r => r.pop_burst(mem, b, max)),
        Some(p) => pop_and_record(ring, mem, p, b, max),
    }
}

#[inline(never)]
#[cold]
fn pop_and_record(
    ring: &mut Layout,
    mem: &GuestMem,
    p: &mut Popped,
    b: &mut Burst,
    max: usize,
) -> Result<(), ChainError> {
    let result = ring!(ring, r => r.pop_burst(mem, b, max.min(p.room())));
    // Also the chains popped before a bad one: the port is reset, but
    // the record stays what the ring holds.
    for k in 0..b.len() {
        let (head, segs, _) = b.chain(k);
        p.push(head, segs);
    }
    result
}

#[cfg(test)]
mod tests;
