//! The driver side of a split virtqueue, in shared memory the endpoint owns:
//! it posts buffers, publishes them in the available ring, reaps the used
//! ring, and decides when to kick (EVENT_IDX or the NO_NOTIFY flag).
//!
//! The rings and buffers are found in the memory once, when the ring is
//! made, and then accessed directly (`sys::ring_mem`, `sys::span`):
//! vm-memory's generic accessors look the region up and check the access
//! again on every call, which cost more than the rest of a frame's handling.
//! Descriptor `i` always points at buffer `i`: publishing writes only its
//! length, flags and next.

use crate::sys::ring_mem::RingMem;
use crate::sys::span::Span;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use vm_memory::{
    Address, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, GuestRegionMmap,
};

const F_WRITE: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_WRITE as u16;
const F_NEXT: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_NEXT as u16;
/// No next descriptor in [`DriverRing`]'s chain table.
const END: u16 = u16::MAX;
const VRING_USED_F_NO_NOTIFY: u16 = virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY as u16;

/// Where a queue and its buffers live in the endpoint's memory.
#[derive(Debug, Clone, Copy)]
pub struct RingLayout {
    /// Entries (power of two).
    pub size: u16,
    /// Descriptor table.
    pub desc: u64,
    /// Available ring.
    pub avail: u64,
    /// Used ring.
    pub used: u64,
    /// First buffer; buffer `i` is at `buffers + i * buf_size`.
    pub buffers: u64,
    /// Bytes per buffer.
    pub buf_size: u32,
}

impl RingLayout {
    /// Bytes the rings need (descriptor table, available and used rings, each page-aligned).
    pub fn ring_bytes(size: u16) -> u64 {
        let n = u64::from(size);
        let page = |x: u64| x.div_ceil(4096) * 4096;
        page(16 * n) + page(6 + 2 * n) + page(6 + 8 * n)
    }

    /// A layout at `base` with buffers after the rings.
    pub fn at(base: u64, size: u16, buf_size: u32) -> Self {
        let n = u64::from(size);
        let page = |x: u64| x.div_ceil(4096) * 4096;
        let desc = base;
        let avail = desc + page(16 * n);
        let used = avail + page(6 + 2 * n);
        let buffers = used + page(6 + 8 * n);
        Self {
            size,
            desc,
            avail,
            used,
            buffers,
            buf_size,
        }
    }

    /// End of this layout's memory.
    pub fn end(&self) -> u64 {
        self.buffers + u64::from(self.size) * u64::from(self.buf_size)
    }

    /// Address of buffer `i`.
    pub fn buffer(&self, i: u16) -> GuestAddress {
        GuestAddress(self.buffers + u64::from(i) * u64::from(self.buf_size))
    }
}

/// One split queue, driver side.
#[derive(Debug)]
pub struct DriverRing {
    /// Where it lives.
    pub layout: RingLayout,
    /// The mapped region holding the rings and the buffers.
    region: Arc<GuestRegionMmap>,
    /// The descriptor table, available and used rings (offsets from `layout.desc`).
    rings: RingMem,
    /// Offsets from `layout.desc` of the available and used rings.
    avail: usize,
    used: usize,
    /// Offset of buffer 0 in `region`.
    buffers: u64,
    avail_idx: u16,
    last_used: u16,
    free: Vec<u16>,
    /// For each descriptor published in a chain, the next one (or [`END`]).
    next: Vec<u16>,
    event_idx: bool,
    kicked_at: u16,
    /// Publishing without making chains visible yet (see [`DriverRing::stage`]).
    staging: bool,
}

impl DriverRing {
    /// A ring with every descriptor free; descriptor `i` always points at
    /// buffer `i`. None when the layout is not inside one region of `mem`.
    pub fn new(mem: &GuestMemoryMmap, layout: RingLayout, event_idx: bool) -> Option<Self> {
        let region = region_holding(mem, layout.desc, layout.end())?;
        let start = region.start_addr().raw_value();
        // Offsets from the descriptor table (a layout in another order is refused).
        let from_desc = |at: u64| at.checked_sub(layout.desc);
        let rings = RingMem::new(
            region.clone(),
            layout.desc - start,
            from_desc(layout.buffers)?,
        )?;
        let ring = Self {
            layout,
            avail: usize::try_from(from_desc(layout.avail)?).ok()?,
            used: usize::try_from(from_desc(layout.used)?).ok()?,
            buffers: layout.buffers - start,
            region,
            rings,
            avail_idx: 0,
            last_used: 0,
            free: (0..layout.size).rev().collect(),
            next: vec![END; usize::from(layout.size)],
            event_idx,
            kicked_at: 0,
            staging: false,
        };
        for i in 0..layout.size {
            let addr = layout.buffer(i).raw_value();
            ring.rings
                .store_u64(16 * usize::from(i), addr, Ordering::Relaxed)?;
        }
        ring.rings.store_u16(ring.avail, 0, Ordering::Relaxed)?;
        ring.rings.store_u16(ring.avail + 2, 0, Ordering::Relaxed)?;
        Some(ring)
    }

    /// Buffer `id`, all `layout.buf_size` bytes of it.
    #[inline]
    pub(crate) fn buffer(&self, id: u16) -> Option<Span<'_>> {
        let size = u64::from(self.layout.buf_size);
        Span::new(&self.region, self.buffers + u64::from(id) * size, size)
    }

    /// `len` bytes of buffer `id` from byte `at`.
    #[inline]
    pub(crate) fn buffer_part(&self, id: u16, at: u32, len: u32) -> Option<Span<'_>> {
        if at.checked_add(len)? > self.layout.buf_size {
            return None;
        }
        let off = self.buffers + u64::from(id) * u64::from(self.layout.buf_size);
        Span::new(&self.region, off + u64::from(at), u64::from(len))
    }

    /// Writes descriptor `id`'s length, flags and next (its address is fixed)
    /// in one store.
    #[inline]
    fn set_desc(&self, id: u16, len: u32, flags: u16, next: u16) {
        let v = u64::from(len) | u64::from(flags) << 32 | u64::from(next) << 48;
        let _ = self
            .rings
            .store_u64(16 * usize::from(id) + 8, v, Ordering::Relaxed);
    }

    /// Takes a free descriptor (its buffer is `layout.buffer(id)`).
    #[inline]
    pub fn take(&mut self) -> Option<u16> {
        self.free.pop()
    }

    /// Descriptors free to take.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Publishes descriptor `id` with `len` bytes (device-writable when `writable`).
    #[inline]
    pub fn publish(&mut self, id: u16, len: u32, writable: bool) {
        let dir = if writable { F_WRITE } else { 0 };
        self.set_desc(id, len, dir, 0);
        if let Some(n) = self.next.get_mut(usize::from(id)) {
            *n = END;
        }
        self.offer(id);
    }

    /// Publishes descriptors `ids` as one chain: every buffer full except the
    /// last, which holds `last_len` bytes. [`DriverRing::release`] of the
    /// head frees them all.
    pub fn publish_chain(&mut self, ids: &[u16], last_len: u32, writable: bool) {
        let Some((&id, _)) = ids.split_first() else {
            return;
        };
        let dir = if writable { F_WRITE } else { 0 };
        for (k, &d) in ids.iter().enumerate() {
            match ids.get(k + 1) {
                Some(&n) => {
                    self.set_desc(d, self.layout.buf_size, dir | F_NEXT, n);
                    self.next[usize::from(d)] = n;
                }
                None => {
                    self.set_desc(d, last_len, dir, 0);
                    self.next[usize::from(d)] = END;
                }
            }
        }
        self.offer(id);
    }

    /// Puts head `id` in the next slot of the available ring (visible at
    /// once unless staging).
    #[inline]
    fn offer(&mut self, id: u16) {
        let slot = self.avail + 4 + 2 * usize::from(self.avail_idx % self.layout.size);
        let _ = self.rings.store_u16(slot, id, Ordering::Relaxed);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        if !self.staging {
            self.flush();
        }
    }

    /// Until [`DriverRing::flush`], published chains are staged: the
    /// device sees them all at once (a burst, as a driver's batch).
    pub fn stage(&mut self) {
        self.staging = true;
    }

    /// Makes every staged chain visible to the device (one index store).
    #[inline]
    pub fn flush(&mut self) {
        self.staging = false;
        let _ = self
            .rings
            .store_u16(self.avail + 2, self.avail_idx, Ordering::Release);
    }

    /// True when the device wants a kick for what was published since the last kick.
    pub fn needs_kick(&mut self) -> bool {
        let old = self.kicked_at;
        let new = self.avail_idx;
        if old == new {
            return false;
        }
        // The index store before the device's event index or flags is read.
        fence(Ordering::SeqCst);
        self.kicked_at = new;
        if self.event_idx {
            let at = self.used + 4 + 8 * usize::from(self.layout.size);
            let event = self.rings.load_u16(at, Ordering::Acquire).unwrap_or(0);
            // vring_need_event: kick when event lies in [old, new).
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            let flags = self
                .rings
                .load_u16(self.used, Ordering::Acquire)
                .unwrap_or(0);
            flags & VRING_USED_F_NO_NOTIFY == 0
        }
    }

    /// The used index the device last published (what it has returned so
    /// far, modulo 2^16).
    #[inline]
    pub fn used_index(&self) -> u16 {
        self.rings
            .load_u16(self.used + 2, Ordering::Acquire)
            .unwrap_or(self.last_used)
    }

    /// The next used element (descriptor id, length), if the device returned one.
    #[inline]
    pub fn reap(&mut self) -> Option<(u16, u32)> {
        if self.used_index() == self.last_used {
            return None;
        }
        let e = self.used + 4 + 8 * usize::from(self.last_used % self.layout.size);
        // Published by the index read with Acquire above.
        let id = self.rings.load_u32(e, Ordering::Relaxed)?;
        let len = self.rings.load_u32(e + 4, Ordering::Relaxed)?;
        self.last_used = self.last_used.wrapping_add(1);
        Some((id as u16 % self.layout.size, len))
    }

    /// Returns a reaped descriptor (and the rest of its chain) to the free list.
    #[inline]
    pub fn release(&mut self, id: u16) {
        let mut d = id;
        // Bounded by the ring size even if the table were corrupted.
        for _ in 0..self.layout.size {
            self.free.push(d);
            let n = std::mem::replace(&mut self.next[usize::from(d)], END);
            if n == END || n >= self.layout.size {
                break;
            }
            d = n;
        }
    }

    /// Asks the device for a call once the used index passes the current
    /// position; returns true when something is already there.
    pub fn arm_call(&mut self) -> bool {
        if self.event_idx {
            let at = self.avail + 4 + 2 * usize::from(self.layout.size);
            let _ = self.rings.store_u16(at, self.last_used, Ordering::Release);
        }
        fence(Ordering::SeqCst);
        self.used_index() != self.last_used
    }

    /// Descriptors currently owned by the driver.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

/// The region of `mem` holding guest addresses `[start, end)`, shared (the
/// ring keeps the mapping alive as long as it uses it). vm-memory lends a
/// collection's regions by reference only; `remove_region` hands out the
/// collection's own `Arc` of one, building a new collection and leaving
/// `mem` as it was.
fn region_holding(mem: &GuestMemoryMmap, start: u64, end: u64) -> Option<Arc<GuestRegionMmap>> {
    let r = mem.find_region(GuestAddress(start))?;
    if end > r.start_addr().raw_value().checked_add(r.len())? {
        return None;
    }
    mem.remove_region(r.start_addr(), r.len())
        .ok()
        .map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_outside_one_region_is_refused() {
        let layout = RingLayout::at(0, 16, 2048);
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), layout.end() as usize)])
            .unwrap();
        let mut ring = DriverRing::new(&mem, layout, false).expect("inside");
        assert_eq!(ring.free_count(), 16);
        let id = ring.take().unwrap();
        assert_eq!(ring.buffer(id).map(|b| b.len()), Some(2048));
        assert!(ring.buffer_part(id, 2040, 16).is_none(), "past the buffer");
        let past = RingLayout::at(4096, 16, 2048);
        assert!(
            DriverRing::new(&mem, past, false).is_none(),
            "ends past the memory"
        );
        let mut reordered = layout;
        reordered.desc = layout.avail;
        reordered.avail = layout.desc;
        assert!(
            DriverRing::new(&mem, reordered, false).is_none(),
            "avail before desc"
        );
    }
}
