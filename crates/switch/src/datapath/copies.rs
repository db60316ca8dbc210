//! A burst's frame copies on the fast case, made together at its end.
//!
//! Each plain frame's copy stores into the destination guest's buffer:
//! lines that, when the guest runs on another core, are in that core's
//! cache, so every store waits in the store buffer for its line. Made
//! frame by frame, those stores sat among the frame's own bookkeeping
//! stores, the store buffer filled within a frame or two, and the worker
//! waited for one line after another. Made back to back at the end of the
//! burst, as DPDK's vhost library batches its small copies, the lines are
//! asked for together.
//!
//! A copy is queued as guest addresses, with the two memories it goes
//! between held: it is made from the same mappings it was checked in,
//! whatever happens to the ports meanwhile. The data path still makes the
//! batch before anything that could reset a port, takes the full path, or
//! returns the burst's chains, so a guest sees every frame as before. The
//! memories are let go on every port event and idle round ([`Copies::release`]):
//! held on, a front-end that left could not get its hugepages back.

use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::BURST;
use std::sync::Arc;

/// One deferred copy: a virtio-net header of `head_len` bytes
/// (little-endian words), then `len` bytes from `from`, at `to`.
#[derive(Debug, Clone, Copy, Default)]
struct Job {
    to: u64,
    head: [u64; 2],
    head_len: usize,
    from: u64,
    len: u64,
}

/// Up to a burst of deferred copies between one source and one
/// destination memory.
#[derive(Debug, Default)]
pub(crate) struct Copies {
    /// The memories the queued jobs' addresses are in.
    between: Option<(Arc<GuestMem>, Arc<GuestMem>)>,
    jobs: [Job; BURST],
    n: usize,
}

impl Copies {
    /// Queues `head` (its first `head_len` bytes, 8 to 16) then the `len`
    /// bytes at `from` in `src`, for guest address `to` of `dst`, whose
    /// buffer there holds `room` bytes. False, with nothing queued, when
    /// they do not fit or are not mapped. A full batch, or one between
    /// other memories, is made first.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn push(
        &mut self,
        src: &Arc<GuestMem>,
        from: u64,
        len: u64,
        dst: &Arc<GuestMem>,
        to: u64,
        room: u64,
        head: [u64; 2],
        head_len: usize,
    ) -> bool {
        let fits = match (src.span(from, len), dst.span(to, room)) {
            (Some(body), Some(buf)) => buf.fits_words_with(head_len, &body),
            _ => false,
        };
        if !fits {
            return false;
        }
        let same = self
            .between
            .as_ref()
            .is_some_and(|(s, d)| Arc::ptr_eq(s, src) && Arc::ptr_eq(d, dst));
        if !same || self.n == BURST {
            self.flush();
            if !same {
                self.between = Some((Arc::clone(src), Arc::clone(dst)));
            }
        }
        self.jobs[self.n] = Job {
            to,
            head,
            head_len,
            from,
            len,
        };
        self.n += 1;
        true
    }

    /// Makes the queued copies.
    #[inline]
    pub(crate) fn flush(&mut self) {
        if self.n == 0 {
            return;
        }
        if let Some((src, dst)) = &self.between {
            for j in &self.jobs[..self.n] {
                // Checked when queued, in these same mappings.
                let room = j.head_len as u64 + j.len;
                if let (Some(body), Some(buf)) = (src.span(j.from, j.len), dst.span(j.to, room)) {
                    buf.write_words_with(j.head, j.head_len, &body);
                }
            }
        }
        self.n = 0;
    }

    /// Makes the queued copies and lets go of the memories: a front-end
    /// that went away, or replaced its memory table, gets its mappings
    /// (hugepages, often) back. For idle rounds and port events.
    pub(crate) fn release(&mut self) {
        self.flush();
        self.between = None;
    }

    /// The memories held, for tests.
    #[cfg(test)]
    pub(crate) fn holds(&self) -> bool {
        self.between.is_some()
    }

    /// True when no copy waits.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }
}

#[cfg(test)]
#[path = "copies_tests.rs"]
mod tests;
