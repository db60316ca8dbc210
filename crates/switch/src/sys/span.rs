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

    /// Its first byte's host address.
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
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

    /// The `N` bytes at offset `off`, read straight into a value (one load
    /// for a register's width); None past the end. The fast case reads a
    /// frame's fields this way: copied into a stack buffer and read back
    /// wider, they made loads the store buffer cannot forward (see
    /// [`Span::write_words_with`]).
    #[inline(always)]
    pub fn read_at<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        if off.checked_add(N)? > self.len {
            return None;
        }
        // SAFETY: `[off, off + N)` is inside the mapping borrowed for 'a
        // (checked in `new`, and above); unaligned reads are allowed.
        Some(unsafe { self.ptr.add(off).cast::<[u8; N]>().read_unaligned() })
    }

    /// True when the span starts with `head` then `body` (local bytes), as
    /// [`Span::write_parts`] would leave it. Read eight bytes at a time,
    /// through the pointer (no reference to memory the other side shares).
    #[inline]
    pub fn holds_parts(&self, head: &[u8], body: &[u8]) -> bool {
        let same = |at: usize, want: &[u8]| {
            let mut chunks = want.chunks_exact(8);
            let mut off = at;
            for c in chunks.by_ref() {
                // SAFETY: `off + 8` is inside the span (the caller checked
                // the total against `len`), which lies inside the mapping
                // borrowed for 'a; an unaligned read of plain bytes.
                let v = unsafe { self.ptr.add(off).cast::<[u8; 8]>().read_unaligned() };
                if v != c {
                    return false;
                }
                off += 8;
            }
            chunks.remainder().iter().enumerate().all(|(k, b)| {
                // SAFETY: as above, one byte inside the span.
                unsafe { self.ptr.add(off + k).read() == *b }
            })
        };
        head.len()
            .checked_add(body.len())
            .is_some_and(|total| total <= self.len)
            && same(0, head)
            && same(head.len(), body)
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

    /// Writes the `head_len` (8 to 16) bytes of `head` (little-endian
    /// words) at the span's start, each word only when it differs from
    /// what is there, then the whole of `body` after it; false (nothing
    /// written) when they do not fit.
    ///
    /// For the fast case's virtio-net header: assembled in a stack buffer
    /// and copied, its bytes were stored piecewise and loaded back wider,
    /// and such a load waits until the stores drain, behind every older
    /// store. Those are the previous frames' stores into the guest's
    /// buffers, each waiting for its line to come from the other core.
    #[inline(always)]
    pub fn write_words_with(&self, head: [u64; 2], head_len: usize, body: &Span<'_>) -> bool {
        if !self.fits_words_with(head_len, body) {
            return false;
        }
        self.store_header(head, head_len);
        // SAFETY: the body's range is inside the mapping borrowed for its
        // lifetime, and after the header it fits this span (checked
        // above). `copy` allows the front-ends' ranges to overlap (a
        // hostile chain pair).
        unsafe { std::ptr::copy(body.ptr, self.ptr.add(head_len), body.len) };
        true
    }

    /// Writes the `head_len` (8 to 16) bytes of `head` (little-endian
    /// words) at the span's start, each word only when it differs from
    /// what is there; false (nothing written) when they do not fit.
    #[inline(always)]
    pub fn write_header(&self, head: [u64; 2], head_len: usize) -> bool {
        if !(8..=16).contains(&head_len) || head_len > self.len {
            return false;
        }
        self.store_header(head, head_len);
        true
    }

    /// The header's words, each stored only when it differs, as DPDK's
    /// virtio drivers and vhost library leave a header field that holds
    /// its value already. A DPDK driver puts the header at the end of its
    /// own line, before the frame's, and a buffer's header mostly holds
    /// what the next frame's will (no offloads, one buffer): that line then
    /// stays shared between the two cores instead of crossing twice a
    /// frame, taken for the store and read back by the driver.
    #[inline(always)]
    fn store_header(&self, head: [u64; 2], head_len: usize) {
        debug_assert!((8..=16).contains(&head_len) && head_len <= self.len);
        // SAFETY: the callers checked that `head_len` (8 to 16) bytes fit
        // the span, which lies inside the mapping borrowed for 'a; `hi` is
        // local.
        unsafe {
            let lo = self.ptr.cast::<u64>();
            if lo.read_unaligned() != head[0].to_le() {
                lo.write_unaligned(head[0].to_le());
            }
            let rest = self.ptr.add(8);
            match head_len - 8 {
                // The two virtio-net header lengths, as single accesses.
                4 => {
                    let r = rest.cast::<u32>();
                    if r.read_unaligned() != (head[1] as u32).to_le() {
                        r.write_unaligned((head[1] as u32).to_le());
                    }
                }
                2 => {
                    let r = rest.cast::<u16>();
                    if r.read_unaligned() != (head[1] as u16).to_le() {
                        r.write_unaligned((head[1] as u16).to_le());
                    }
                }
                n => {
                    let hi = head[1].to_le_bytes();
                    std::ptr::copy_nonoverlapping(hi.as_ptr(), rest, n);
                }
            }
        }
    }

    /// Whether a header of `head_len` bytes (8 to 16) then all of `body`
    /// fit in the span ([`Span::write_words_with`]).
    #[inline(always)]
    pub fn fits_words_with(&self, head_len: usize, body: &Span<'_>) -> bool {
        (8..=16).contains(&head_len)
            && head_len
                .checked_add(body.len)
                .is_some_and(|total| total <= self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pages mapped: a DPDK-style receive buffer with its 12-byte
    /// header at the end of the first and the frame at the start of the
    /// second.
    struct TwoPages(*mut u8);

    impl TwoPages {
        fn new() -> Self {
            // SAFETY: a fresh private anonymous mapping, unmapped in `drop`.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    8192,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            TwoPages(p.cast())
        }

        /// The first page read-only, as a line the switch must not store to.
        fn protect_first(&self) {
            // SAFETY: the first page of our own mapping.
            let r = unsafe { libc::mprotect(self.0.cast(), 4096, libc::PROT_READ) };
            assert_eq!(r, 0);
        }
    }

    impl Drop for TwoPages {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, not used after this.
            unsafe { libc::munmap(self.0.cast(), 8192) };
        }
    }

    #[test]
    fn a_header_that_already_holds_its_words_is_not_stored_to() {
        let pages = TwoPages::new();
        let frame = [7u8; 64];
        // SAFETY: 76 bytes across the boundary of our own two pages; the
        // frame is a local array.
        let (buf, body) = unsafe {
            (
                Span::from_raw(pages.0.add(4096 - 12), 76),
                Span::from_raw(frame.as_ptr().cast_mut(), 64),
            )
        };
        let head = [0x0807_0605_0403_0201, 0x0c0b_0a09];
        assert!(buf.write_words_with(head, 12, &body), "first frame: stored");
        let mut out = [0u8; 76];
        buf.read_into(&mut out);
        assert_eq!(out[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        // The header's page can no longer be written: a store there would
        // fault. The same header again, a new frame: only the frame's page
        // is written.
        pages.protect_first();
        let frame2 = [9u8; 64];
        // SAFETY: as above.
        let body2 = unsafe { Span::from_raw(frame2.as_ptr().cast_mut(), 64) };
        assert!(buf.write_words_with(head, 12, &body2));
        buf.read_into(&mut out);
        assert_eq!(out[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(out[12..].iter().all(|&b| b == 9));
    }

    #[test]
    fn a_header_word_that_differs_is_stored() {
        let pages = TwoPages::new();
        let frame = [7u8; 4];
        // SAFETY: inside our own mapping; the frame is a local array.
        let (buf, body) = unsafe {
            (
                Span::from_raw(pages.0, 16),
                Span::from_raw(frame.as_ptr().cast_mut(), 4),
            )
        };
        for (head, len) in [
            ([1u64, 1 << 16], 12),
            ([1, 2 << 16], 12),
            ([3, 2 << 16], 12),
            ([5, 6], 10),
        ] {
            assert!(buf.write_words_with(head, len, &body));
            let mut out = [0u8; 16];
            buf.read_into(&mut out);
            let mut want = [head[0].to_le_bytes(), head[1].to_le_bytes()].concat();
            want.truncate(len);
            assert_eq!(out[..len], want[..], "{head:?} {len}");
            assert_eq!(out[len..len + 4], [7; 4]);
        }
    }

    #[test]
    fn a_span_holds_what_was_written_and_nothing_else() {
        let mut mem = vec![0u8; 64];
        // SAFETY: `mem` outlives the span and is only accessed through it.
        let span = unsafe { Span::from_raw(mem.as_mut_ptr(), mem.len()) };
        let (head, body) = ([1u8, 2, 3], [7u8; 21]);
        assert!(!span.holds_parts(&head, &body), "zeros are not the frame");
        assert!(span.write_parts(&head, &body));
        assert!(span.holds_parts(&head, &body));
        // A prefix of what is there is held too (the bytes after are not asked about).
        assert!(span.holds_parts(&head, &[7u8; 20]));
        let mut other = body;
        other[20] = 8;
        assert!(!span.holds_parts(&head, &other), "its last byte differs");
        assert!(!span.holds_parts(&[1, 2, 4], &body), "its header differs");
        assert!(!span.holds_parts(&head, &[7u8; 64]), "longer than the span");
    }
}
