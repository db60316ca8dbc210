//! A started split virtqueue on the device side: popping validated chains,
//! returning used buffers, and notifying the driver (honouring EVENT_IDX
//! and VRING_AVAIL_F_NO_INTERRUPT).
//!
//! virtio-queue's [`Queue`] validates the ring addresses when the queue
//! starts; the per-frame ring accesses are ours, straight on the mapped
//! region that holds each ring (found once, at start), because the generic
//! guest-memory accessors cost more than the rest of the data path.
//! Chain walking is [`super::chain`].

use super::chain::{self, Chain, ChainError};
use super::memory::GuestMem;
use crate::stats::QueueStats;
use std::fs::File;
use std::io::Write;
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestRegionMmap, MemoryRegionAddress};

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

/// One ring, addressed inside the mapped region that holds all of it.
#[derive(Debug)]
struct Ring {
    region: Arc<GuestRegionMmap>,
    base: u64,
}

impl Ring {
    fn at(mem: &GuestMem, addr: GuestAddress, len: u64) -> Result<Self, QueueError> {
        let (region, base) = mem.region_for(addr, len).ok_or(QueueError::Rings)?;
        Ok(Self { region, base })
    }

    fn addr(&self, off: u64) -> MemoryRegionAddress {
        MemoryRegionAddress(self.base + off)
    }

    fn load(&self, off: u64, order: Ordering) -> Result<u16, ChainError> {
        self.region
            .load::<u16>(self.addr(off), order)
            .map(u16::from_le)
            .map_err(|_| ChainError::Ring)
    }

    fn store(&self, off: u64, v: u16, order: Ordering) -> Result<(), ChainError> {
        self.region
            .store(v.to_le(), self.addr(off), order)
            .map_err(|_| ChainError::Ring)
    }

    fn read_u16(&self, off: u64) -> Result<u16, ChainError> {
        self.region
            .read_obj::<u16>(self.addr(off))
            .map(u16::from_le)
            .map_err(|_| ChainError::Ring)
    }

    fn write_u64(&self, off: u64, v: u64) -> Result<(), ChainError> {
        self.region
            .write_obj(v.to_le(), self.addr(off))
            .map_err(|_| ChainError::Ring)
    }

    fn descriptor(&self, idx: u16) -> Option<Descriptor> {
        self.region
            .read_obj::<Descriptor>(self.addr(u64::from(idx) * 16))
            .ok()
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
    writable: bool,
    used_pending: bool,
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
            writable,
            used_pending: false,
        };
        // The worker polls a queue that just started; it asks for kicks again before it sleeps.
        q.disable_notification();
        Ok(q)
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
        let head = self
            .avail
            .read_u16(4 + 2 * u64::from(self.next_avail.0 % self.size))?;
        self.next_avail += Wrapping(1);
        let desc = &self.desc;
        chain::walk_into(
            chain,
            |i| desc.descriptor(i),
            self.mem.mem(),
            self.size,
            head,
            self.writable,
        )?;
        Ok(true)
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
        self.next_avail.0
    }

    /// Returns a chain to the driver with `len` bytes written. The driver
    /// sees it at the next [`ActiveQueue::flush`] (or [`ActiveQueue::signal`],
    /// which flushes): one used-index store per batch.
    pub fn add_used(&mut self, head: u16, len: u32) -> Result<(), ChainError> {
        if head >= self.size {
            return Err(ChainError::IndexOutOfRange(head));
        }
        let slot = 4 + 8 * u64::from(self.next_used.0 % self.size);
        self.used
            .write_u64(slot, u64::from(head) | (u64::from(len) << 32))?;
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
        if let Some(mut call) = self.call.as_ref() {
            if call.write(&1u64.to_ne_bytes()).is_ok() {
                crate::stats::bump(&stats.notifications_sent, 1);
            }
        }
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
        let r = if self.event_idx {
            self.used.store(
                4 + 8 * u64::from(self.size),
                self.next_avail.0,
                Ordering::Relaxed,
            )
        } else {
            self.used.store(0, 0, Ordering::Relaxed)
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ring::{DriverRing, RingLayout};
    use crate::stats::QueueStats;
    use crate::vhost_user::protocol::MemoryRegion;
    use std::io::Read;
    use vm_memory::GuestMemoryMmap;

    const SIZE: u16 = 8;

    /// Device and driver sides of one queue over the same memfd.
    fn pair(event_idx: bool, writable: bool) -> (ActiveQueue, DriverRing, GuestMemoryMmap, File) {
        let layout = RingLayout::at(0, SIZE, 256);
        let size = layout.end().div_ceil(4096) * 4096;
        let f = crate::sys::memfd::create("queue-test", size).unwrap();
        let driver_mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
            GuestAddress(0),
            size as usize,
            Some(vm_memory::FileOffset::new(f.try_clone().unwrap(), 0)),
        )])
        .unwrap();
        let region = MemoryRegion {
            guest_phys_addr: 0,
            memory_size: size,
            userspace_addr: 0,
            mmap_offset: 0,
        };
        let dev_mem =
            Arc::new(GuestMem::from_table(vec![(region, f.try_clone().unwrap())]).unwrap());
        let ring = DriverRing::new(&driver_mem, layout, event_idx);
        let call = crate::sys::memfd::create("not-an-eventfd", 0).unwrap();
        let addrs = RingAddrs {
            desc: GuestAddress(layout.desc),
            avail: GuestAddress(layout.avail),
            used: GuestAddress(layout.used),
        };
        let q = ActiveQueue::start(
            dev_mem,
            SIZE,
            addrs,
            0,
            event_idx,
            Some(call.try_clone().unwrap()),
            writable,
        )
        .unwrap();
        (q, ring, driver_mem, call)
    }

    fn calls(f: &File) -> u64 {
        // The stand-in for the call eventfd is a plain file: each signal appends 8 bytes.
        let mut v = Vec::new();
        let mut r = f.try_clone().unwrap();
        std::io::Seek::rewind(&mut r).unwrap();
        r.read_to_end(&mut v).unwrap();
        v.len() as u64 / 8
    }

    #[test]
    fn pop_use_and_reap_round_trip() {
        let (mut q, mut ring, mem, _call) = pair(false, false);
        assert!(q.pop().unwrap().is_none(), "nothing offered yet");
        for len in [60u32, 61, 62] {
            let id = ring.take().unwrap();
            ring.publish(&mem, id, len, false);
        }
        assert!(q.has_available().unwrap());
        let mut heads = Vec::new();
        while let Some(c) = q.pop().unwrap() {
            heads.push((c.head, c.len()));
            q.add_used(c.head, 0).unwrap();
        }
        assert_eq!(
            heads.iter().map(|h| h.1).collect::<Vec<_>>(),
            vec![60, 61, 62]
        );
        assert_eq!(q.next_avail(), 3);
        assert!(
            ring.reap(&mem).is_none(),
            "used elements are published per batch"
        );
        q.flush();
        let mut reaped = Vec::new();
        while let Some((id, _)) = ring.reap(&mem) {
            reaped.push(id);
            ring.release(id);
        }
        assert_eq!(reaped, heads.iter().map(|h| h.0).collect::<Vec<_>>());
    }

    #[test]
    fn unpop_gives_the_chain_back() {
        let (mut q, mut ring, mem, _call) = pair(false, true);
        let id = ring.take().unwrap();
        ring.publish(&mem, id, 256, true);
        let c = q.pop().unwrap().unwrap();
        q.unpop();
        assert_eq!(q.pop().unwrap().unwrap().head, c.head);
        assert!(q.pop().unwrap().is_none());
    }

    #[test]
    fn no_interrupt_flag_suppresses_calls() {
        let (mut q, mut ring, mem, call) = pair(false, false);
        let stats = QueueStats::default();
        let id = ring.take().unwrap();
        ring.publish(&mem, id, 64, false);
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head, 0).unwrap();
        q.signal(&stats);
        assert_eq!(calls(&call), 1);
        q.signal(&stats);
        assert_eq!(calls(&call), 1, "nothing new used: no call");
        // The driver sets VRING_AVAIL_F_NO_INTERRUPT.
        mem.write_obj(1u16, GuestAddress(ring.layout.avail))
            .unwrap();
        let id = ring.take().unwrap();
        ring.publish(&mem, id, 64, false);
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head, 0).unwrap();
        q.signal(&stats);
        assert_eq!(calls(&call), 1, "suppressed");
        assert_eq!(stats.notifications_sent.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn event_idx_calls_only_when_used_event_is_passed() {
        let (mut q, mut ring, mem, call) = pair(true, false);
        let stats = QueueStats::default();
        let used_event = GuestAddress(ring.layout.avail + 4 + 2 * u64::from(SIZE));
        // The driver asks to be called once the used index passes 2.
        mem.write_obj(2u16, used_event).unwrap();
        for expected in [0u64, 0, 1, 1] {
            let id = ring.take().unwrap();
            ring.publish(&mem, id, 64, false);
            let c = q.pop().unwrap().unwrap();
            q.add_used(c.head, 0).unwrap();
            q.signal(&stats);
            assert_eq!(calls(&call), expected);
        }
    }

    #[test]
    fn index_jump_is_refused() {
        let (mut q, ring, mem, _call) = pair(false, false);
        mem.write_obj(SIZE + 1, GuestAddress(ring.layout.avail + 2))
            .unwrap();
        assert_eq!(q.pop().unwrap_err(), ChainError::IndexJump);
    }

    #[test]
    fn rings_outside_memory_do_not_start() {
        let (q, ring, _mem, _call) = pair(false, false);
        let mem = q.mem().clone();
        let bad = RingAddrs {
            desc: GuestAddress(1 << 40),
            avail: GuestAddress(ring.layout.avail),
            used: GuestAddress(ring.layout.used),
        };
        assert!(matches!(
            ActiveQueue::start(mem, SIZE, bad, 0, false, None, false),
            Err(QueueError::Rings)
        ));
    }
}
