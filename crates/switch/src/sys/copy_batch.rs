//! A batch of frame copies between two front-ends' memories, kept as the
//! host addresses they were checked at.
//!
//! The fast case checks a copy's two ranges when it queues it and makes
//! it at the end of the burst (`datapath/copies/` says why). Kept as
//! guest addresses, each range would be looked up a second time when the
//! copy is made. Kept as host addresses, the batch must keep the
//! mappings they point into: it holds both tables ([`Regions`], which hold
//! the mappings and their SIGBUS registrations) for as long as it holds a
//! copy, so an address it kept is mapped, and registered, when it is used.

use super::regions::Regions;
use super::span::Span;
use std::sync::Arc;

/// One queued copy: a virtio-net header of `head_len` bytes (little-endian
/// words), then `len` bytes from `from`, at `to`.
#[derive(Debug, Clone, Copy)]
struct Job {
    to: *mut u8,
    from: *mut u8,
    len: usize,
    head: [u64; 2],
    head_len: usize,
}

impl Default for Job {
    fn default() -> Self {
        Job {
            to: std::ptr::null_mut(),
            from: std::ptr::null_mut(),
            len: 0,
            head: [0; 2],
            head_len: 0,
        }
    }
}

/// Up to `N` copies from one memory to another.
#[derive(Debug)]
pub struct CopyBatch<const N: usize> {
    /// The tables the queued jobs' addresses are in: source, destination.
    between: Option<(Arc<Regions>, Arc<Regions>)>,
    jobs: [Job; N],
    n: usize,
}

impl<const N: usize> Default for CopyBatch<N> {
    fn default() -> Self {
        CopyBatch {
            between: None,
            jobs: [Job::default(); N],
            n: 0,
        }
    }
}

// SAFETY: the raw addresses point into the mappings held by `between`,
// which are themselves `Send` and `Sync`; the batch is used by one thread
// at a time (`&mut self`), as any owned buffer.
unsafe impl<const N: usize> Send for CopyBatch<N> {}

impl<const N: usize> CopyBatch<N> {
    /// Queues `head` (its first `head_len` bytes, 8 to 16) then the `len`
    /// bytes at guest address `from` of `src`, for guest address `to` of
    /// `dst`, whose buffer there holds `room` bytes. False, with nothing
    /// queued, when they do not fit or are not mapped. A full batch, or
    /// one between other memories, is made first.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn push(
        &mut self,
        src: &Arc<Regions>,
        from: u64,
        len: u64,
        dst: &Arc<Regions>,
        to: u64,
        room: u64,
        head: [u64; 2],
        head_len: usize,
    ) -> bool {
        let (Some(body), Some(buf)) = (src.span(from, len), dst.span(to, room)) else {
            return false;
        };
        if !buf.fits_words_with(head_len, &body) {
            return false;
        }
        let job = Job {
            to: buf.as_ptr(),
            from: body.as_ptr(),
            len: body.len(),
            head,
            head_len,
        };
        let same = self
            .between
            .as_ref()
            .is_some_and(|(s, d)| Arc::ptr_eq(s, src) && Arc::ptr_eq(d, dst));
        if !same || self.n == N {
            self.flush();
            if !same {
                self.between = Some((Arc::clone(src), Arc::clone(dst)));
            }
        }
        self.jobs[self.n] = job;
        self.n += 1;
        true
    }

    /// Makes the queued copies.
    #[inline]
    pub fn flush(&mut self) {
        if self.n == 0 {
            return;
        }
        for j in &self.jobs[..self.n] {
            // SAFETY: both ranges were found inside the mappings of the
            // tables in `between` when queued (`push`), and those tables,
            // held since, keep them mapped and registered; the header and
            // the body fit the destination (checked in `push`).
            unsafe {
                let buf = Span::from_raw(j.to, j.head_len + j.len);
                let body = Span::from_raw(j.from, j.len);
                buf.write_words_with(j.head, j.head_len, &body);
            }
        }
        self.n = 0;
    }

    /// Makes the queued copies and lets go of the tables, so a front-end
    /// that went away, or replaced its memory table, gets its mappings
    /// back.
    pub fn release(&mut self) {
        self.flush();
        self.between = None;
    }

    /// True while it holds tables.
    #[cfg(test)]
    pub fn holds(&self) -> bool {
        self.between.is_some()
    }

    /// True when no copy waits.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}
