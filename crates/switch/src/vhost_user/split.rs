//! The split virtqueue (virtio 1.1 §2.7) on the device side: a descriptor
//! table, the driver's available ring and the device's used ring, each
//! accessed straight on the mapped region that holds it (found once, at
//! start), because the generic guest-memory accessors cost more than the
//! rest of the data path. EVENT_IDX and the ring flags decide notifications.

use super::chain::{self, Chain, ChainError, Seg, MAX_SEGS};
use super::log::QueueLog;
use super::memory::GuestMem;
use super::queue::{Burst, QueueError, RingAddrs, BURST};
use crate::sys::ring_mem::RingMem;
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::GuestAddress;

const VRING_AVAIL_F_NO_INTERRUPT: u16 =
    virtio_bindings::virtio_ring::VRING_AVAIL_F_NO_INTERRUPT as u16;
const VRING_USED_F_NO_NOTIFY: u16 = virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY as u16;

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
    #[inline]
    fn write_used(&self, off: u64, id: u32, len: u32) -> Result<(), ChainError> {
        self.0
            .store_u32_pair(off as usize, id, len, Ordering::Relaxed)
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

    /// Hints that the used elements `from` to `from + n - 1` (slots, taken
    /// modulo the ring's `size`) will be written soon: every line they lie
    /// on, once.
    fn prefetch_used(&self, from: u16, n: u16, size: u16) {
        let slot = |k: u16| 4 + 8 * usize::from(from.wrapping_add(k) & (size - 1));
        // Eight elements to a line: every eighth, and the last.
        for k in (0..n).step_by(8) {
            self.0.prefetch_write(slot(k));
        }
        if n > 1 {
            self.0.prefetch_write(slot(n - 1) + 7);
        }
    }

    /// Hints that descriptor `idx` will be read soon.
    fn prefetch_descriptor(&self, idx: u16) {
        self.0.prefetch(usize::from(idx) * 16);
    }
}

/// A running split ring.
#[derive(Debug)]
pub(super) struct SplitRing {
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
    writable: bool,
    /// The dirty log while a migration logs this queue's writes.
    log: Option<QueueLog>,
}

impl SplitRing {
    /// The rings at `addrs`, resuming at `base`.
    pub(super) fn start(
        mem: &GuestMem,
        size: u16,
        addrs: RingAddrs,
        base: u16,
        event_idx: bool,
        writable: bool,
    ) -> Result<Self, QueueError> {
        // virtio-queue checks size, alignment and that the rings are in memory.
        let mut queue =
            Queue::new(super::queue::MAX_QUEUE_SIZE).map_err(|_| QueueError::Size(size))?;
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
        let used = Ring::at(mem, addrs.used, 6 + 8 * n)?;
        let base = resume_index(&used, base);
        Ok(Self {
            size,
            desc: Ring::at(mem, addrs.desc, 16 * n)?,
            avail: Ring::at(mem, addrs.avail, 6 + 2 * n)?,
            used,
            next_avail: Wrapping(base),
            avail_seen: base,
            next_used: Wrapping(base),
            num_added: Wrapping(0),
            unpublished: false,
            event_idx,
            writable,
            log: None,
        })
    }

    pub(super) fn next_avail(&self) -> u16 {
        self.next_avail.0
    }

    pub(super) fn has_available(&self) -> Result<bool, ChainError> {
        Ok(self.avail.load(2, Ordering::Acquire)? != self.next_avail.0)
    }

    pub(super) fn pop_into(
        &mut self,
        mem: &GuestMem,
        chain: &mut Chain,
    ) -> Result<bool, ChainError> {
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
        let desc = &self.desc;
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

    /// The available ring's entry `ahead` chains after the next one.
    fn avail_slot(&self, ahead: u16) -> u64 {
        // The size is a power of two (checked at start): a mask, not a division.
        4 + 2 * u64::from(self.next_avail.0.wrapping_add(ahead) & (self.size - 1))
    }

    pub(super) fn pop_burst(
        &mut self,
        mem: &GuestMem,
        b: &mut Burst,
        max: usize,
    ) -> Result<(), ChainError> {
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
        // The used elements these chains will take, asked for ownership
        // now: the driver's core reads those lines, and a store to a line
        // another core holds waits for it at commit, one line after another.
        // (A lone chain's too: these hints do not delay the one-frame round
        // trip.)
        self.used
            .prefetch_used(self.next_used.0, n as u16, self.size);
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
        let start = self.next_avail;
        let mut used = 0;
        b.at[0] = 0;
        let desc = &self.desc;
        // A receive buffer's virtio-net header and the Ethernet header
        // after it: written first, and often across a line boundary (a
        // driver that puts the header in the headroom before the frame, as
        // DPDK does). Asked for as each buffer is checked, with the same
        // lookup; a lone chain is written right away. A transmit buffer is
        // asked for after the loop, when the worker reads ahead.
        let (hint, w) = (n > 1 && self.writable, self.writable);
        let mut k = 0;
        while k < n && used + MAX_SEGS <= b.segs.len() {
            let head = b.heads[k];
            let one = (head < self.size)
                .then(|| desc.descriptor(head))
                .flatten()
                .and_then(|d| chain::single(&d, w, |a, l| mem.contains_prefetch(a, l, hint, w)));
            let (cnt, len) = match one {
                Some(seg) => {
                    b.segs[used] = seg;
                    (1, u64::from(seg.len))
                }
                None => {
                    // A longer chain, or a bad one. Whatever its walk
                    // finds, the chains before it stay popped and it is
                    // taken (the ring's state, in case the walk fails).
                    self.next_avail = start + Wrapping(k as u16 + 1);
                    b.n = k;
                    let room = &mut b.segs[used..used + MAX_SEGS];
                    let room: &mut [Seg; MAX_SEGS] =
                        room.try_into().map_err(|_| ChainError::TooLong)?;
                    let walked = chain::walk_segs(
                        room,
                        |i| desc.descriptor(i),
                        |addr, len| mem.contains(addr, len),
                        self.size,
                        head,
                        w,
                    )?;
                    if hint {
                        mem.prefetch(room[0].addr, room[0].len, w);
                    }
                    walked
                }
            };
            used += cnt;
            b.lens[k] = len;
            b.at[k + 1] = used as u16;
            k += 1;
        }
        // Stored once for the burst: the common chain's loop keeps both in
        // registers.
        self.next_avail = start + Wrapping(k as u16);
        b.n = k;
        // A transmit burst read ahead (`datapath/read_ahead.rs`): each
        // chain's first buffer asked for, in a pass of its own. Asked for
        // in the loop above, as a receive buffer is, the test cost every
        // frame whether it was on or not (`ring_cost`).
        if b.read_ahead && !w && k > 1 {
            for j in 0..k {
                let s = b.segs[usize::from(b.at[j])];
                mem.prefetch(s.addr, s.len, false);
            }
        }
        Ok(())
    }

    pub(super) fn unpop_n(&mut self, n: u16) {
        self.next_avail -= Wrapping(n);
    }

    #[inline]
    pub(super) fn add_used(&mut self, head: u16, len: u32) -> Result<(), ChainError> {
        if head >= self.size {
            return Err(ChainError::IndexOutOfRange(head));
        }
        let slot = 4 + 8 * u64::from(self.next_used.0 & (self.size - 1));
        self.used.write_used(slot, u32::from(head), len)?;
        // The buffers written are marked by the queue, from what it popped
        // (`popped.rs`); the used element here.
        if let Some(l) = &self.log {
            l.log.mark(l.used.wrapping_add(slot), 8);
        }
        self.next_used += Wrapping(1);
        self.num_added += Wrapping(1);
        self.unpublished = true;
        Ok(())
    }

    pub(super) fn flush(&mut self) {
        if self.unpublished {
            self.unpublished = false;
            let _ = self.used.store(2, self.next_used.0, Ordering::Release);
            self.log_used(2, 2);
        }
    }

    /// Starts (Some) or stops (None) marking this ring's writes in a dirty log.
    pub(super) fn set_log(&mut self, log: Option<QueueLog>) {
        self.log = log;
    }

    /// Marks `len` bytes of the used ring at `off` in the log, if logging.
    #[inline]
    fn log_used(&self, off: u64, len: u64) {
        if let Some(l) = &self.log {
            l.log.mark(l.used.wrapping_add(off), len);
        }
    }

    /// The driver was called (or declined a call) for what was used so far.
    pub(super) fn notified(&mut self) {
        self.num_added = Wrapping(0);
    }

    /// With EVENT_IDX, the driver's used_event lies among the elements
    /// added since the last call; without, VRING_AVAIL_F_NO_INTERRUPT is clear.
    pub(super) fn driver_wants_call(&self) -> bool {
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

    pub(super) fn enable_notification(&mut self) -> bool {
        let r = if self.event_idx {
            let avail_event = 4 + 8 * u64::from(self.size);
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

    pub(super) fn set_event_idx(&mut self, on: bool) {
        self.event_idx = on;
    }

    pub(super) fn disable_notification(&mut self) {
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
