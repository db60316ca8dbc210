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
//! A copy is queued as the host addresses it was checked at, with the
//! two memories' tables held (`sys/copy_batch.rs`): it is made in the same
//! mappings whatever happens to the ports meanwhile. The data path still
//! makes the batch before anything that could reset a port, takes the full
//! path, or returns the burst's chains, so a guest sees every frame as
//! before. The tables are let go on every port event and idle round
//! ([`Copies::release`]): held on, a front-end that left could not get its
//! hugepages back.

use crate::sys::copy_batch::CopyBatch;
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::BURST;
use std::sync::Arc;

/// Up to a burst of deferred copies between one source and one
/// destination memory.
#[derive(Debug, Default)]
pub(crate) struct Copies(CopyBatch<BURST>);

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
        self.0
            .push(src.maps(), from, len, dst.maps(), to, room, head, head_len)
    }

    /// Makes the queued copies.
    #[inline]
    pub(crate) fn flush(&mut self) {
        self.0.flush();
    }

    /// Makes the queued copies and lets go of the memories: a front-end
    /// that went away, or replaced its memory table, gets its mappings
    /// (hugepages, often) back. For idle rounds and port events.
    pub(crate) fn release(&mut self) {
        self.0.release();
    }

    /// The memories held, for tests.
    #[cfg(test)]
    pub(crate) fn holds(&self) -> bool {
        self.0.holds()
    }

    /// True when no copy waits.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
#[path = "copies_tests.rs"]
mod tests;
