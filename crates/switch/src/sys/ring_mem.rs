//! A virtqueue ring (descriptor table, available or used ring) in the
//! front-end's mapped memory, accessed with plain atomic loads and stores.
//!
//! Every access to a ring is a few bytes at a known offset, several per
//! frame. vm-memory's generic accessors re-derive the slice, its bounds and
//! its alignment on each of them, which cost more than the rest of the ring
//! handling; here the bounds are fixed when the queue starts and each access
//! checks one offset against them. The front-end writes the same memory
//! concurrently, so every access is atomic (relaxed unless the caller orders
//! it), never a reference to plain data.

use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress};

/// `len` bytes of a mapped region, from offset `off`.
#[derive(Debug)]
pub struct RingMem {
    /// Keeps the mapping alive as long as `base` is used.
    _region: Arc<GuestRegionMmap>,
    base: *mut u8,
    len: usize,
}

// SAFETY: `base` points into the mapping `_region` owns, which lives as long
// as this value wherever it is moved; every access through it is atomic, so
// moving the value to another thread (a port handed to another worker)
// cannot create a data race.
unsafe impl Send for RingMem {}

impl RingMem {
    /// The ring at offset `off` of `region`, `len` bytes long; None when it
    /// does not fit inside the region.
    pub fn new(region: Arc<GuestRegionMmap>, off: u64, len: u64) -> Option<Self> {
        if off.checked_add(len)? > region.len() {
            return None;
        }
        let base = region.get_host_address(MemoryRegionAddress(off)).ok()?;
        Some(Self {
            _region: region,
            base,
            len: usize::try_from(len).ok()?,
        })
    }

    /// The address of `size` bytes at `off`, when inside the ring and
    /// aligned to `size` (atomics need natural alignment).
    #[inline(always)]
    fn at(&self, off: usize, size: usize) -> Option<*mut u8> {
        if off.checked_add(size)? > self.len {
            return None;
        }
        let p = self.base.wrapping_add(off);
        (p as usize % size == 0).then_some(p)
    }

    /// The address of the `n` 16-byte entries from entry `i`, when inside
    /// the ring and 8-byte aligned (each half of an entry then is).
    #[inline(always)]
    fn entries(&self, i: usize, n: usize) -> Option<*mut u8> {
        let off = i.checked_mul(16)?;
        if off.checked_add(n.checked_mul(16)?)? > self.len {
            return None;
        }
        let p = self.base.wrapping_add(off);
        (p as usize % 8 == 0).then_some(p)
    }

    /// Loads the little-endian u16 at `off`.
    #[inline]
    pub fn load_u16(&self, off: usize, order: Ordering) -> Option<u16> {
        let p = self.at(off, 2)?;
        // SAFETY: `p` is inside the live mapping and 2-byte aligned (`at`);
        // AtomicU16 has the size and alignment of u16, and the access is
        // atomic, so the front-end writing concurrently is not a data race.
        let a = unsafe { AtomicU16::from_ptr(p.cast()) };
        Some(u16::from_le(a.load(order)))
    }

    /// Loads the little-endian u32 at `off`.
    #[inline]
    pub fn load_u32(&self, off: usize, order: Ordering) -> Option<u32> {
        let p = self.at(off, 4)?;
        // SAFETY: as in `load_u16`, 4-byte aligned.
        let a = unsafe { AtomicU32::from_ptr(p.cast()) };
        Some(u32::from_le(a.load(order)))
    }

    /// Loads the 16-byte entry `i` as two little-endian u64 (a descriptor):
    /// one bounds check for both halves.
    #[inline]
    pub fn load_u64_pair(&self, i: usize) -> Option<(u64, u64)> {
        let p = self.entries(i, 1)?;
        // SAFETY: as in `load_u16`: the 16 bytes at `p` are inside the live
        // mapping and `p` is 8-byte aligned (both checked by `entries`), so both
        // halves are aligned and in bounds.
        let (lo, hi) = unsafe {
            (
                AtomicU64::from_ptr(p.cast()),
                AtomicU64::from_ptr(p.wrapping_add(8).cast()),
            )
        };
        Some((
            u64::from_le(lo.load(Ordering::Relaxed)),
            u64::from_le(hi.load(Ordering::Relaxed)),
        ))
    }

    /// The flags (bytes 14-15) of the four 16-byte entries from entry `i`,
    /// and then the entries as
    /// [`RingMem::load_u64_pair`] loads one, when `ready` says yes to the
    /// flags: a packed ring's line of descriptors, with one bounds check.
    /// (An Acquire fence between the two: what the driver wrote before the
    /// flags is visible.)
    #[inline(always)]
    pub fn load_four(
        &self,
        i: usize,
        ready: impl FnOnce([u16; 4]) -> bool,
    ) -> Option<[(u64, u64); 4]> {
        let p = self.entries(i, 4)?;
        // SAFETY: as in `load_u64_pair`: the 64 bytes at `p` are inside the
        // live mapping and `p` is 8-byte aligned (both checked by `entries`), so
        // every u16 at an even offset and every u64 at a multiple of 8 is
        // aligned and in bounds.
        let flags = |k: usize| unsafe {
            u16::from_le(
                AtomicU16::from_ptr(p.wrapping_add(16 * k + 14).cast()).load(Ordering::Relaxed),
            )
        };
        if !ready([flags(0), flags(1), flags(2), flags(3)]) {
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: as for the flags, every `at` below is a multiple of 8
        // under 64.
        let word = |at: usize| unsafe {
            u64::from_le(AtomicU64::from_ptr(p.wrapping_add(at).cast()).load(Ordering::Relaxed))
        };
        Some([
            (word(0), word(8)),
            (word(16), word(24)),
            (word(32), word(40)),
            (word(48), word(56)),
        ])
    }

    /// Stores `v` little-endian at `off`.
    #[inline]
    pub fn store_u16(&self, off: usize, v: u16, order: Ordering) -> Option<()> {
        let p = self.at(off, 2)?;
        // SAFETY: as in `load_u16`.
        let a = unsafe { AtomicU16::from_ptr(p.cast()) };
        a.store(v.to_le(), order);
        Some(())
    }

    /// Stores `a` at `off` and `b` right after it, little-endian, with
    /// one bounds check (a used element: 4-byte aligned, so two stores).
    #[inline]
    pub fn store_u32_pair(&self, off: usize, a: u32, b: u32, order: Ordering) -> Option<()> {
        let p = self.at(off, 4)?;
        if off + 8 > self.len {
            return None;
        }
        // SAFETY: both words lie inside the ring (`at` checked the first
        // and its alignment, the line above the second); every access to
        // the ring is atomic.
        let (x, y) = unsafe {
            (
                AtomicU32::from_ptr(p.cast()),
                AtomicU32::from_ptr(p.wrapping_add(4).cast()),
            )
        };
        x.store(a.to_le(), order);
        y.store(b.to_le(), order);
        Some(())
    }

    /// Stores `v` little-endian at `off`.
    #[inline]
    pub fn store_u64(&self, off: usize, v: u64, order: Ordering) -> Option<()> {
        let p = self.at(off, 8)?;
        // SAFETY: as in `load_u16`, 8-byte aligned.
        let a = unsafe { AtomicU64::from_ptr(p.cast()) };
        a.store(v.to_le(), order);
        Some(())
    }

    /// Hints that the line holding byte `off` will be read soon.
    #[inline]
    pub fn prefetch(&self, off: usize) {
        if off < self.len {
            super::prefetch::read(self.base.wrapping_add(off));
        }
    }

    /// Hints that the line holding byte `off` will be written soon.
    #[inline]
    pub fn prefetch_write(&self, off: usize) {
        if off < self.len {
            super::prefetch::write(self.base.wrapping_add(off));
        }
    }
}
