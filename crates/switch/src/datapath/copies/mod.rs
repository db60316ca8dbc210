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
use crate::vhost_user::queue::BURST;

/// Up to a burst of deferred copies between one source and one
/// destination memory (given as their lookup tables, `GuestMem::maps`).
pub(crate) type Copies = CopyBatch<BURST>;

#[cfg(test)]
mod tests;
