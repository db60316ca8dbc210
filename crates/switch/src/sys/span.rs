//! A range of a front-end's mapped memory, borrowed for one copy: the fast
//! case moves a plain frame with plain memory copies (as DPDK's vhost
//! library does), without vm-memory's per-access slices, their checks and
//! their alignment-driven loops. The poll-mode endpoint fills and reads its
//! own buffers the same way.
//!
//! The front-end may write the same bytes while they are copied: what is
//! copied is then whatever the bytes held, which garbles only that
//! front-end's own frame. Nothing here hands out a reference to the memory.

use std::marker::PhantomData;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress};

/// `len` bytes of a mapped region, valid while the region is borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    ptr: *mut u8,
    len: usize,
    _region: PhantomData<&'a GuestRegionMmap>,
}

impl<'a> Span<'a> {
    /// The `len` bytes at offset `off` of `region`; None when they are not
    /// all inside it.
    #[inline]
    pub fn new(region: &'a GuestRegionMmap, off: u64, len: u64) -> Option<Self> {
        if off.checked_add(len)? > region.len() {
            return None;
        }
        let ptr = region.get_host_address(MemoryRegionAddress(off)).ok()?;
        Some(Self {
            ptr,
            len: usize::try_from(len).ok()?,
            _region: PhantomData,
        })
    }

    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// They must lie inside one mapping that stays mapped for `'a`.
    #[inline(always)]
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Self {
        Self {
            ptr,
            len,
            _region: PhantomData,
        }
    }

    /// Its length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the span's first bytes into `out` (as many as both hold);
    /// returns how many.
    #[inline]
    pub fn read_into(&self, out: &mut [u8]) -> usize {
        let n = self.len.min(out.len());
        // SAFETY: `n` bytes at `ptr` are inside the mapping borrowed for
        // 'a (checked in `new`); `out` is a distinct, local buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), n) };
        n
    }

    /// Writes `head` at the span's start, then the whole of `body` (local
    /// bytes) after it; false (nothing written) when they do not fit.
    #[inline]
    pub fn write_parts(&self, head: &[u8], body: &[u8]) -> bool {
        let Some(total) = head.len().checked_add(body.len()) else {
            return false;
        };
        if total > self.len {
            return false;
        }
        // SAFETY: the range is inside the mapping borrowed for 'a (`new`)
        // and fits (checked above); `head` and `body` are local buffers,
        // distinct from the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), self.ptr, head.len());
            std::ptr::copy_nonoverlapping(body.as_ptr(), self.ptr.add(head.len()), body.len());
        }
        true
    }

    /// Writes `head` at the span's start, then the whole of `body` after it;
    /// false (nothing written) when they do not fit.
    #[inline]
    pub fn write_with(&self, head: &[u8], body: &Span<'_>) -> bool {
        let Some(total) = head.len().checked_add(body.len) else {
            return false;
        };
        if total > self.len {
            return false;
        }
        // SAFETY: both ranges are inside mappings borrowed for the spans'
        // lifetimes (`new`) and fit (checked above); `head` is local. `copy`
        // allows the front-ends' ranges to overlap (a hostile chain pair).
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), self.ptr, head.len());
            std::ptr::copy(body.ptr, self.ptr.add(head.len()), body.len);
        }
        true
    }
}
