//! The packed virtqueue (VIRTIO_F_RING_PACKED, virtio 1.1 §2.8) on the
//! device side.
//!
//! One ring of 16-byte descriptors (addr, len, buffer id, flags) that the
//! driver and the device both write. A descriptor is available when its
//! AVAIL flag equals the driver's wrap counter and its USED flag does not;
//! the device walks the ring in order, flipping its own copy of that
//! counter each time it passes the end. A chain is consecutive descriptors
//! linked by NEXT (its buffer id in the last one), or one descriptor
//! pointing at an indirect table. The device returns a chain by writing one
//! used descriptor (id, len, AVAIL = USED = its used wrap counter) at its
//! used position and skipping as many slots as the chain held.
//!
//! Event suppression replaces the split ring's flags and event indexes: two
//! 4-byte areas (offset and wrap, flags), the driver's telling the device
//! when to call, the device's telling the driver when to kick; their DESC
//! mode is EVENT_IDX's (`event.rs`). With VIRTIO_F_IN_ORDER the
//! transmit queue (whose used lengths are all zero) writes one used
//! descriptor per flush, naming the batch's last buffer, as the spec allows.
//!
//! Chains are popped in `pop.rs` (one by one, or a burst's lines of
//! four at once, and indirect tables); this file starts the ring and
//! returns used chains. Every chain goes through the same checks as a split
//! ring's ([`chain::check_buffer`](super::chain::check_buffer)); the ring
//! itself through [`RingMem`].
//!
//! While a migration logs ([`PackedRing::set_log`]), every write the device
//! makes to the ring is marked after it is made: the used descriptors and
//! their flags, and the device's event area. The buffers a returned chain
//! was written into are marked by the queue from the chain as it was
//! popped (`popped.rs`), never from the ring again: the driver may have
//! rewritten the descriptors since.

use super::chain::ChainError;
use super::log::DirtyLog;
use super::memory::GuestMem;
use super::queue::{QueueError, RingAddrs, BURST};
use crate::sys::ring_mem::RingMem;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use virtio_bindings::virtio_ring as vr;
use vm_memory::GuestAddress;

const F_NEXT: u16 = vr::VRING_DESC_F_NEXT as u16;
const F_INDIRECT: u16 = vr::VRING_DESC_F_INDIRECT as u16;
const F_AVAIL: u16 = 1 << vr::VRING_PACKED_DESC_F_AVAIL;
const F_USED: u16 = 1 << vr::VRING_PACKED_DESC_F_USED;
const EVENT_ENABLE: u16 = vr::VRING_PACKED_EVENT_FLAG_ENABLE as u16;
const EVENT_DISABLE: u16 = vr::VRING_PACKED_EVENT_FLAG_DISABLE as u16;
const EVENT_DESC: u16 = vr::VRING_PACKED_EVENT_FLAG_DESC as u16;
const WRAP_BIT: u16 = 1 << vr::VRING_PACKED_EVENT_F_WRAP_CTR;
/// Offset of the flags in a descriptor (and in an event area).
const DESC_FLAGS: usize = 14;
const EVENT_OFF_WRAP: usize = 0;
const EVENT_FLAGS: usize = 2;

/// Used descriptors a flush stores together (see `PackedRing::shadow`):
/// two bursts' worth.
const SHADOW: usize = 2 * BURST;

/// A place in the ring: a slot and the wrap counter that goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pos {
    idx: u16,
    wrap: bool,
}

impl Pos {
    /// Decodes `v` (slot in bits 0-14, wrap counter in bit 15), as the
    /// vhost-user vring base and the event areas carry it.
    fn decode(v: u16, size: u16) -> Option<Self> {
        let idx = v & !WRAP_BIT;
        (idx < size).then_some(Self {
            idx,
            wrap: v & WRAP_BIT != 0,
        })
    }

    fn encode(self) -> u16 {
        self.idx | if self.wrap { WRAP_BIT } else { 0 }
    }

    /// `n` slots on (`n` at most `size`).
    fn advance(&mut self, n: u16, size: u16) {
        let i = u32::from(self.idx) + u32::from(n);
        if i >= u32::from(size) {
            self.idx = (i - u32::from(size)) as u16;
            self.wrap = !self.wrap;
        } else {
            self.idx = i as u16;
        }
    }

    /// The place on a line twice the ring long (the wrap counter as the
    /// high part), to measure distances.
    fn linear(self, size: u16) -> u32 {
        u32::from(self.idx) + if self.wrap { u32::from(size) } else { 0 }
    }
}

/// A descriptor as read: address, length, buffer id, flags.
#[derive(Debug, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    id: u16,
    flags: u16,
}

impl Desc {
    fn from_halves(lo: u64, hi: u64) -> Self {
        Self {
            addr: lo,
            len: hi as u32,
            id: (hi >> 32) as u16,
            flags: (hi >> 48) as u16,
        }
    }
}

/// What the driver agreed to, for a packed ring.
#[derive(Debug, Clone, Copy, Default)]
pub struct PackedFeatures {
    /// VIRTIO_RING_F_EVENT_IDX: event areas in DESC mode.
    pub event_idx: bool,
    /// VIRTIO_F_IN_ORDER: buffers are used in the order they were made available.
    pub in_order: bool,
    /// VIRTIO_RING_F_INDIRECT_DESC: chains may be indirect tables.
    pub indirect: bool,
}

/// A running packed ring.
#[derive(Debug)]
pub(super) struct PackedRing {
    size: u16,
    desc: RingMem,
    /// The driver's event suppression area: when it wants calls.
    driver_event: RingMem,
    /// The device's event suppression area: when it wants kicks.
    device_event: RingMem,
    features: PackedFeatures,
    writable: bool,
    /// The next slot to look at for an available chain.
    avail: Pos,
    /// The next slot to write a used descriptor to.
    used: Pos,
    /// `used` when the driver was last called (or declined a call).
    signalled: Pos,
    /// Slots each buffer id in flight holds (0: not in flight), to skip
    /// when it is returned.
    slots: Box<[u16]>,
    /// Where the chains popped and not yet used began and their ids, by
    /// pop count (`pops`, counted modulo the size): giving chains back
    /// returns there.
    began: Box<[(Pos, u16)]>,
    /// Chains popped, modulo the size (kept in range by hand: a packed
    /// ring's size need not be a power of two, and a division per chain
    /// cost as much as the rest of its bookkeeping).
    pops: u16,
    /// The used descriptors returned since the last flush (offset, second
    /// half: length, id and flags), stored at the flush with the first
    /// one last, so the driver sees the batch at once. Stored as each chain
    /// was returned, they took a line of the ring the driver was polling
    /// (at the batch's first descriptor) once per descriptor in it, not
    /// once; and the flush comes after the burst's copies anyway. Holds
    /// [`SHADOW`] (`shadow_len` of them noted): past that, descriptors after
    /// the first are stored at once.
    shadow: Box<[(usize, u64); SHADOW]>,
    shadow_len: usize,
    /// Returning a chain takes only the common path: no dirty log, and
    /// each chain gets its own used descriptor (not in-order transmit).
    plain_return: bool,
    /// In-order transmit: where the batch not written yet starts (the
    /// used position at the last flush; open while `used` differs) and
    /// its last id. Two plain fields, not one `Option` of a tuple: that
    /// was written piece by piece per chain and read back whole, and the
    /// read waited for the stores (store-to-load forwarding fails).
    batch_from: Pos,
    batch_id: u16,
    /// Guest-physical addresses of the descriptor ring and the device's
    /// event area, where the log marks them.
    desc_gpa: u64,
    device_event_gpa: u64,
    /// The dirty log while a migration logs this queue's writes.
    log: Option<Arc<DirtyLog>>,
}

impl PackedRing {
    /// The ring and event areas at `addrs` (desc, driver area, device
    /// area), resuming at `base` (the avail position and wrap counter in
    /// its low 16 bits; the used position restarts there, as whatever was
    /// in flight when the ring stopped was not returned).
    pub(super) fn start(
        mem: &GuestMem,
        size: u16,
        addrs: RingAddrs,
        base: u32,
        features: PackedFeatures,
        writable: bool,
    ) -> Result<Self, QueueError> {
        if size == 0 || size > super::queue::MAX_QUEUE_SIZE {
            return Err(QueueError::Size(size));
        }
        if addrs.desc.0 % 16 != 0 || addrs.avail.0 % 4 != 0 || addrs.used.0 % 4 != 0 {
            return Err(QueueError::Rings);
        }
        let at = |addr: GuestAddress, len: u64| {
            let (region, off) = mem.region_for(addr, len).ok_or(QueueError::Rings)?;
            RingMem::new(region, off, len).ok_or(QueueError::Rings)
        };
        let avail = Pos::decode(base as u16, size).ok_or(QueueError::Base(base))?;
        Ok(Self {
            size,
            desc: at(addrs.desc, 16 * u64::from(size))?,
            driver_event: at(addrs.avail, 4)?,
            device_event: at(addrs.used, 4)?,
            features,
            writable,
            avail,
            used: avail,
            signalled: avail,
            slots: vec![0; usize::from(size)].into_boxed_slice(),
            began: vec![(avail, 0); usize::from(size)].into_boxed_slice(),
            pops: 0,
            shadow: Box::new([(0, 0); SHADOW]),
            shadow_len: 0,
            plain_return: !features.in_order || writable,
            batch_from: avail,
            batch_id: 0,
            desc_gpa: addrs.desc.0,
            device_event_gpa: addrs.used.0,
            log: None,
        })
    }

    /// Starts (Some) or stops (None) marking this ring's writes in a dirty log.
    pub(super) fn set_log(&mut self, log: Option<Arc<DirtyLog>>) {
        self.plain_return = log.is_none() && (!self.features.in_order || self.writable);
        self.log = log;
    }

    /// Marks `len` bytes at `off` in the descriptor ring, if logging.
    #[inline]
    fn log_desc(&self, off: usize, len: u64) {
        if let Some(l) = &self.log {
            l.mark(self.desc_gpa + off as u64, len);
        }
    }

    /// The avail position and wrap counter (GET_VRING_BASE's low half).
    pub(super) fn next_avail(&self) -> u16 {
        self.avail.encode()
    }

    /// The vring state to hand back: avail in bits 0-15, used in 16-31.
    pub(super) fn state(&self) -> u32 {
        u32::from(self.avail.encode()) | u32::from(self.used.encode()) << 16
    }

    fn is_avail(&self, flags: u16) -> bool {
        (flags & F_AVAIL != 0) == self.avail.wrap && (flags & F_USED != 0) != self.avail.wrap
    }

    /// The flags of descriptor `idx`, read with Acquire: when available,
    /// the rest of the chain the driver wrote before is visible.
    fn flags(&self, idx: u16) -> Result<u16, ChainError> {
        self.desc
            .load_u16(usize::from(idx) * 16 + DESC_FLAGS, Ordering::Acquire)
            .ok_or(ChainError::Ring)
    }

    fn descriptor(&self, idx: u16) -> Result<Desc, ChainError> {
        let (lo, hi) = self
            .desc
            .load_u64_pair(usize::from(idx))
            .ok_or(ChainError::Ring)?;
        Ok(Desc::from_halves(lo, hi))
    }

    pub(super) fn has_available(&self) -> Result<bool, ChainError> {
        Ok(self.is_avail(self.flags(self.avail.idx)?))
    }

    /// Returns chain `id` with `len` bytes written: its used descriptor
    /// noted for the flush. The common case inline; a dirty log or an
    /// in-order transmit queue out of line ([`PackedRing::add_used_other`]),
    /// which kept the call's registers busy for every frame.
    #[inline]
    pub(super) fn add_used(&mut self, id: u16, len: u32) -> Result<(), ChainError> {
        if !self.plain_return {
            return self.add_used_other(id, len);
        }
        let slots = self.take_in_flight(id)?;
        let at = self.used;
        self.used.advance(slots, self.size);
        self.write_used(at, id, len)
    }

    /// Takes `id` out of flight: the slots its chain held, or
    /// `IndexOutOfRange` when it is not in flight.
    #[inline(always)]
    fn take_in_flight(&mut self, id: u16) -> Result<u16, ChainError> {
        match self.slots.get_mut(usize::from(id)) {
            Some(s) if *s != 0 => Ok(std::mem::take(s)),
            _ => Err(ChainError::IndexOutOfRange(id)),
        }
    }

    /// [`PackedRing::add_used`] while a dirty log is on or for an in-order
    /// transmit queue.
    #[inline(never)]
    fn add_used_other(&mut self, id: u16, len: u32) -> Result<(), ChainError> {
        let slots = self.take_in_flight(id)?;
        let at = self.used;
        self.used.advance(slots, self.size);
        if self.features.in_order && !self.writable {
            // One used descriptor for the batch (from `batch_from`),
            // naming its last buffer.
            self.batch_id = id;
            return Ok(());
        }
        self.write_used(at, id, len)
    }

    /// Returns transmit chains `heads`, in the order they were popped, with
    /// no length. With VIRTIO_F_IN_ORDER and no dirty log, in one pass: each
    /// id taken out of flight, the batch moved on by their slots at once
    /// (the flush writes its one used descriptor). Called once per chain,
    /// [`PackedRing::add_used`] cost a call and its checks of the features
    /// and the log per frame. Otherwise one by one. Stops at the first id not
    /// in flight, the chains before it returned.
    pub(super) fn add_used_run(&mut self, heads: &[u16]) -> Result<(), ChainError> {
        if !self.features.in_order || self.writable || self.log.is_some() {
            for &id in heads {
                self.add_used(id, 0)?;
            }
            return Ok(());
        }
        // At most a ring's worth is in flight: the sum fits a slot count.
        let mut slots = 0u16;
        let mut fault = None;
        for &id in heads {
            match self.take_in_flight(id) {
                Ok(n) => {
                    slots += n;
                    self.batch_id = id;
                }
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        self.used.advance(slots, self.size);
        fault.map_or(Ok(()), Err)
    }

    /// Returns used descriptor (`id`, `len`) at `at`: noted for the flush
    /// (see `shadow`), or stored now when the flush has enough to store.
    #[inline]
    fn write_used(&mut self, at: Pos, id: u16, len: u32) -> Result<(), ChainError> {
        let off = usize::from(at.idx) * 16;
        let flags = if at.wrap { F_AVAIL | F_USED } else { 0 };
        // Length, id and flags in one store: one store-buffer entry for a
        // line the driver's core holds, not three (the descriptor is
        // 16-byte aligned, so its second half is 8-byte aligned).
        let word = u64::from(len) | u64::from(id) << 32 | u64::from(flags) << 48;
        if let Some(e) = self.shadow.get_mut(self.shadow_len) {
            *e = (off, word);
            self.shadow_len += 1;
            return Ok(());
        }
        // The driver stops at the first, still unstored: this one waits
        // behind it all the same.
        self.desc
            .store_u64(off + 8, word, Ordering::Release)
            .ok_or(ChainError::Ring)?;
        self.log_desc(off + 8, 8);
        Ok(())
    }

    pub(super) fn flush(&mut self) {
        if self.used != self.batch_from {
            if self.features.in_order && !self.writable {
                let _ = self.write_used(self.batch_from, self.batch_id, 0);
            }
            self.batch_from = self.used;
        }
        let noted = &self.shadow[..self.shadow_len];
        let Some(&(first, word)) = noted.first() else {
            return;
        };
        for &(off, w) in &noted[1..] {
            let _ = self.desc.store_u64(off + 8, w, Ordering::Relaxed);
            self.log_desc(off + 8, 8);
        }
        // Release: the driver that sees the first sees the rest, and the
        // buffers' bytes.
        let _ = self.desc.store_u64(first + 8, word, Ordering::Release);
        self.log_desc(first + 8, 8);
        self.shadow_len = 0;
    }
}

mod event;

mod pop;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pop_tests;
