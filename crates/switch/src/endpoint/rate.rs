//! The rate loop of two endpoints driven by one thread (DPDK's two-port
//! shape, as the anchor harness's `vpair` drives its switches): a burst
//! goes out of one endpoint, and what arrived at the other is counted.
//!
//! It lives here, not in the lab, so that what a cost measurement counts
//! (`examples/datapath_cost.rs` under callgrind, with
//! `--toggle-collect='*rate_step*'`) is exactly what the lab runs.

use super::Endpoint;

/// Frames handed to the ring at once, and drained at most per step (as
/// `vpair` and testpmd do).
pub const BURST: usize = 32;

/// One step: `burst` offered to `tx` as one burst (one available-index
/// update, at most one kick), then up to [`BURST`] frames that reached `rx`
/// counted and their buffers given back, unread (as `vpair` frees its
/// mbufs). Returns (frames sent, frames received).
///
/// Never inlined: a profiler counts the endpoints' work by this symbol.
#[inline(never)]
pub fn rate_step(tx: &mut Endpoint, rx: &mut Endpoint, burst: &[&[u8]]) -> (usize, usize) {
    let sent = tx.send_burst(burst);
    (sent, rx.drain(BURST))
}
