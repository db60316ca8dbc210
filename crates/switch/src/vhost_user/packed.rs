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
//! mode is EVENT_IDX's (`packed_event.rs`). With VIRTIO_F_IN_ORDER the transmit queue (whose
//! used lengths are all zero) writes one used descriptor per flush, naming
//! the batch's last buffer, as the spec allows.
//!
//! Every chain goes through the same checks as a split ring's
//! ([`chain::check_buffer`]); the ring itself through [`RingMem`].
//!
//! While a migration logs ([`PackedRing::set_log`]), every write the device
//! makes is marked after it is made: a returned chain's writable buffers
//! for the bytes written (read from its descriptors before its used
//! descriptor overwrites the first: chains are used in the order they were
//! popped, so a chain begins at the used position), the used descriptors
//! and their flags, and the device's event area.

use super::chain::{self, ChainError, Seg, MAX_SEGS};
use super::log::DirtyLog;
use super::memory::GuestMem;
use super::queue::{Burst, QueueError, RingAddrs, BURST};
use crate::sys::ring_mem::RingMem;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use virtio_bindings::virtio_ring as vr;
use vm_memory::{Bytes, GuestAddress};

const F_NEXT: u16 = vr::VRING_DESC_F_NEXT as u16;
const F_INDIRECT: u16 = vr::VRING_DESC_F_INDIRECT as u16;
const F_WRITE: u16 = vr::VRING_DESC_F_WRITE as u16;
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

    /// Marks the writable buffers of the `slots` descriptors from `at` for
    /// the first `left` bytes: the chain being returned there.
    fn log_chain(&self, log: &DirtyLog, mut at: Pos, slots: u16, mut left: u64) {
        for _ in 0..slots {
            if left == 0 {
                return;
            }
            let Ok(d) = self.descriptor(at.idx) else {
                return;
            };
            if d.flags & F_WRITE != 0 {
                let n = u64::from(d.len).min(left);
                log.mark(d.addr, n);
                left -= n;
            }
            at.advance(1, self.size);
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

    /// Pops the next available chain's buffers into `segs`: (buffer id,
    /// buffers, total length), None when nothing is available.
    pub(super) fn pop_segs(
        &mut self,
        mem: &GuestMem,
        segs: &mut [Seg; MAX_SEGS],
    ) -> Result<Option<(u16, usize, u64)>, ChainError> {
        if !self.has_available()? {
            return Ok(None);
        }
        let mut at = self.avail;
        let (mut n, mut total, mut count) = (0usize, 0u64, 0u16);
        let in_memory = |addr, len| mem.contains(addr, len);
        let id = loop {
            if count == self.size {
                // Every slot of the ring says NEXT: nothing ends the chain.
                return Err(ChainError::Loop);
            }
            count += 1;
            let d = self.descriptor(at.idx)?;
            at.advance(1, self.size);
            if d.flags & F_INDIRECT != 0 {
                if !self.features.indirect {
                    return Err(ChainError::Indirect);
                }
                if count != 1 || d.flags & F_NEXT != 0 {
                    return Err(ChainError::IndirectTable(d.len));
                }
                (n, total) = indirect(mem, d, segs, self.writable)?;
                break d.id;
            }
            if n == MAX_SEGS {
                return Err(ChainError::TooLong);
            }
            segs[n] = chain::check_buffer(d.addr, d.len, d.flags, self.writable, in_memory)?;
            n += 1;
            total += u64::from(d.len);
            if total > u64::from(u32::MAX) {
                return Err(ChainError::TooLarge);
            }
            if d.flags & F_NEXT == 0 {
                break d.id;
            }
        };
        let in_flight = self.in_flight();
        let slot = self
            .slots
            .get_mut(usize::from(id))
            .ok_or(ChainError::IndexOutOfRange(id))?;
        // An id already in flight: the driver offered slots it does not
        // own (the split ring's index jump).
        if *slot != 0 || in_flight + u32::from(count) > u32::from(self.size) {
            return Err(ChainError::IndexJump);
        }
        *slot = count;
        self.note_pop(self.avail, id);
        self.avail = at;
        Ok(Some((id, n, total)))
    }

    /// Slots popped and not yet returned.
    fn in_flight(&self) -> u32 {
        let (avail, used) = (self.avail.linear(self.size), self.used.linear(self.size));
        if avail >= used {
            avail - used
        } else {
            avail + 2 * u32::from(self.size) - used
        }
    }

    /// Records a popped chain's first slot and id, to give it back.
    #[inline]
    fn note_pop(&mut self, began: Pos, id: u16) {
        self.began[usize::from(self.pops)] = (began, id);
        self.pops += 1;
        if self.pops == self.size {
            self.pops = 0;
        }
    }

    /// Pops the next four slots as four chains of one buffer each, into
    /// burst `b` from chain `k` and buffer `at`, when they all are: one
    /// line of the ring read at once, as DPDK's vhost reads its packed
    /// rings: one bounds check for the line, the four flags tested together
    /// against the wrap counter ([`RingMem::load_four`]), and one in-flight
    /// check for the four ([`PackedRing::mark_four`]). (Four loads of the
    /// flags, each checked on its own, then four of the descriptors took a
    /// tenth of the packed ring's instructions.) Pops nothing and returns
    /// false otherwise (a chain of several slots, one not available yet, a
    /// fault): the one-by-one path then takes them, and finds a fault at
    /// the chain that has it.
    fn pop_four(&mut self, mem: &GuestMem, b: &mut Burst, k: usize, at: usize) -> bool {
        let first = self.avail.idx;
        if first % 4 != 0
            || u32::from(first) + 4 > u32::from(self.size)
            || self.in_flight() + 4 > u32::from(self.size)
        {
            return false;
        }
        // Each of the four available and alone in its chain: its AVAIL and
        // USED bits as the wrap counter wants, NEXT and INDIRECT clear.
        let want = if self.avail.wrap { F_AVAIL } else { F_USED };
        let mask = F_AVAIL | F_USED | F_NEXT | F_INDIRECT;
        let ready = |f: [u16; 4]| f.iter().fold(0, |acc, &x| acc | ((x & mask) ^ want)) == 0;
        let Some(line) = self.desc.load_four(usize::from(first), ready) else {
            return false;
        };
        // Checked, and a receive buffer's first lines asked for, with one
        // lookup (a transmit buffer's when the worker reads ahead).
        let w = self.writable;
        let hint = w || b.read_ahead;
        let in_memory = |addr, len| mem.contains_prefetch(addr, len, hint, w);
        // The burst's four places of each kind, each slice checked once.
        let (Some(heads), Some(segs), Some(lens), Some(ends)) = (
            b.heads.get_mut(k..k + 4),
            b.segs.get_mut(at..at + 4),
            b.lens.get_mut(k..k + 4),
            b.at.get_mut(k + 1..k + 5),
        ) else {
            return false;
        };
        let mut ids = [0u16; 4];
        for (j, &(lo, hi)) in line.iter().enumerate() {
            let d = Desc::from_halves(lo, hi);
            // Read again behind the fence: the driver may have changed them.
            if d.flags & (F_NEXT | F_INDIRECT) != 0 || usize::from(d.id) >= self.slots.len() {
                return false;
            }
            let Ok(seg) = chain::check_buffer(d.addr, d.len, d.flags, self.writable, in_memory)
            else {
                return false;
            };
            // Written into the burst now, counted only once the four are
            // marked (a refused line leaves `b.n` where it was).
            ids[j] = d.id;
            heads[j] = d.id;
            segs[j] = seg;
            lens[j] = u64::from(seg.len);
            ends[j] = (at + j + 1) as u16;
        }
        if !self.mark_four(&ids) {
            return false;
        }
        // The four share the wrap counter: they end at the ring's end at
        // the latest.
        let wrap = self.avail.wrap;
        let pos = |j: u16| Pos {
            idx: first + j,
            wrap,
        };
        let from = usize::from(self.pops);
        match self.began.get_mut(from..from + 4) {
            // The four in the pop log at once, when they do not wrap it.
            Some(log) => {
                for (j, (e, &id)) in log.iter_mut().zip(&ids).enumerate() {
                    *e = (pos(j as u16), id);
                }
                self.pops += 4;
                if self.pops == self.size {
                    self.pops = 0;
                }
            }
            None => {
                for (j, &id) in ids.iter().enumerate() {
                    self.note_pop(pos(j as u16), id);
                }
            }
        }
        self.avail.advance(4, self.size);
        true
    }

    /// Marks the four ids (each below the size) in flight, one slot each:
    /// true, or false with nothing marked when one of them already was, or
    /// comes twice among the four. Marked first and tested once for the
    /// four, with one advance of the position for them in `pop_four`: a
    /// test before marking each id, a search of the ids before it and an
    /// advance per id took a seventh more of the packed ring's time on one
    /// core (`examples/ring_cost`: 31.4 ns per frame, transmit and receive,
    /// against 27.6).
    #[inline(always)]
    fn mark_four(&mut self, ids: &[u16; 4]) -> bool {
        let mut was = [0u16; 4];
        for j in 0..4 {
            let slot = &mut self.slots[usize::from(ids[j])];
            was[j] = *slot;
            *slot = 1;
        }
        if was == [0; 4] {
            return true;
        }
        // Undone last first: an id that came twice gets back its first value.
        for j in (0..4).rev() {
            self.slots[usize::from(ids[j])] = was[j];
        }
        false
    }

    pub(super) fn pop_burst(
        &mut self,
        mem: &GuestMem,
        b: &mut Burst,
        max: usize,
    ) -> Result<(), ChainError> {
        b.n = 0;
        b.pending = 0;
        b.at[0] = 0;
        let mut used = 0;
        let want = max.min(BURST);
        let mut k = 0;
        while k < want {
            if k + 4 <= want && used + 4 <= b.segs.len() && self.pop_four(mem, b, k, used) {
                // The next line of descriptors (the buffers were asked for
                // as they were checked).
                self.desc.prefetch(usize::from(self.avail.idx) * 16);
                used += 4;
                k += 4;
                b.n = k;
                b.pending = k as u16;
                continue;
            }
            let Some(room) = b.segs.get_mut(used..used + MAX_SEGS) else {
                break;
            };
            let room: &mut [Seg; MAX_SEGS] = room.try_into().map_err(|_| ChainError::TooLong)?;
            let Some((id, cnt, len)) = self.pop_segs(mem, room)? else {
                break;
            };
            // The next chain's descriptors, and this one's first buffer
            // when it is for receiving or the worker reads ahead.
            self.desc.prefetch(usize::from(self.avail.idx) * 16);
            if self.writable || b.read_ahead {
                mem.prefetch(b.segs[used].addr, b.segs[used].len, self.writable);
            }
            b.heads[k] = id;
            used += cnt;
            b.lens[k] = len;
            b.at[k + 1] = used as u16;
            k += 1;
            b.n = k;
            b.pending = k as u16;
        }
        Ok(())
    }

    /// Gives back the last `n` chains popped (never used).
    pub(super) fn unpop_n(&mut self, n: u16) {
        if n == 0 {
            return;
        }
        // At most a ring's worth is in flight: `n` is below the size.
        let size = u32::from(self.size);
        let back = (u32::from(self.pops) + size - u32::from(n) % size) % size;
        self.pops = back as u16;
        for k in 0..u32::from(n) {
            // That chain's id is no longer in flight.
            let (_, id) = self.began[((back + k) % size) as usize];
            if let Some(s) = self.slots.get_mut(usize::from(id)) {
                *s = 0;
            }
        }
        self.avail = self.began[usize::from(self.pops)].0;
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
        if let (Some(log), true) = (&self.log, self.writable) {
            self.log_chain(log, at, slots, u64::from(len));
        }
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

/// Walks the indirect table `d` points at into `segs`: a whole number of
/// descriptors inside guest memory, each checked like any buffer (only
/// WRITE counts in a table; another indirect one is refused).
fn indirect(
    mem: &GuestMem,
    d: Desc,
    segs: &mut [Seg; MAX_SEGS],
    writable: bool,
) -> Result<(usize, u64), ChainError> {
    if d.len == 0 {
        return Err(ChainError::ZeroLength);
    }
    if d.len % 16 != 0 {
        return Err(ChainError::IndirectTable(d.len));
    }
    if !mem.contains(d.addr, d.len) {
        return Err(ChainError::OutOfMemory {
            addr: d.addr,
            len: d.len,
        });
    }
    let n = (d.len / 16) as usize;
    if n > MAX_SEGS {
        return Err(ChainError::TooLong);
    }
    let mut total = 0u64;
    for (k, seg) in segs.iter_mut().enumerate().take(n) {
        let at = d.addr + 16 * k as u64;
        let read = |off: u64| mem.mem().read_obj::<u64>(GuestAddress(at + off));
        let (lo, hi) = match (read(0), read(8)) {
            (Ok(lo), Ok(hi)) => (u64::from_le(lo), u64::from_le(hi)),
            _ => return Err(ChainError::OutOfMemory { addr: at, len: 16 }),
        };
        let e = Desc::from_halves(lo, hi);
        if e.flags & F_INDIRECT != 0 {
            return Err(ChainError::IndirectTable(d.len));
        }
        *seg = chain::check_buffer(e.addr, e.len, e.flags, writable, |a, l| mem.contains(a, l))?;
        total += u64::from(e.len);
    }
    if total > u64::from(u32::MAX) {
        return Err(ChainError::TooLarge);
    }
    Ok((n, total))
}

#[path = "packed_event.rs"]
mod event;

#[cfg(test)]
#[path = "packed_tests.rs"]
mod tests;
