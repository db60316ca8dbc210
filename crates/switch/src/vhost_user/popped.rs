//! What a receive queue wrote into, for the dirty log. While a migration
//! logs, the buffers of every chain the queue pops are recorded as they
//! were popped (validated), and a chain returned used marks the pages of
//! the first `len` bytes of those buffers. Never from a second read of the
//! ring: the driver may rewrite a descriptor (or an indirect table) after
//! the pop, and the switch writes where the chain pointed when it was
//! popped, so marks taken from the ring as it is when the chain is used
//! could miss the pages really written, and the migrated guest would run
//! on stale copies of them.
//!
//! The device returns chains in the order it popped them (split and
//! packed alike), so the record is a queue: a chain is pushed when popped,
//! dropped from the back when given back to the ring, and taken from the
//! front when used. Its room is fixed when logging starts (nothing is
//! allocated per frame) and lies far above what the data path holds in
//! flight (a burst popped ahead, and the chains of one frame or one LRO
//! aggregate); while it is full the queue pops nothing, as if the ring
//! were empty, until chains are used.

use super::chain::{Seg, MAX_SEGS};
use super::log::DirtyLog;
use std::sync::Arc;

/// Buffers recorded at most (a power of two).
const SEGS: usize = 4096;
/// Chains recorded at most (a power of two).
const CHAINS: usize = 512;
/// In a chain's count of buffers: it was used (out of pop order), and is
/// forgotten once the chains before it are.
const USED: u16 = 1 << 15;

/// The buffers of the chains popped and not yet used, in pop order.
#[derive(Debug)]
pub(super) struct Popped {
    log: Arc<DirtyLog>,
    /// A ring of buffers: the chains' buffers one after the other, from
    /// `seg_from` to `seg_to` (counters, taken modulo [`SEGS`]).
    segs: Box<[Seg]>,
    seg_from: usize,
    seg_to: usize,
    /// A ring of chains (head, buffers), from `chain_from` to `chain_to`.
    chains: Box<[(u16, u16)]>,
    chain_from: usize,
    chain_to: usize,
}

impl Popped {
    /// An empty record marking `log`.
    pub(super) fn new(log: Arc<DirtyLog>) -> Self {
        Self {
            log,
            segs: vec![Seg::default(); SEGS].into_boxed_slice(),
            seg_from: 0,
            seg_to: 0,
            chains: vec![(0, 0); CHAINS].into_boxed_slice(),
            chain_from: 0,
            chain_to: 0,
        }
    }

    /// Chains that may be popped now (each may have [`MAX_SEGS`] buffers).
    pub(super) fn room(&self) -> usize {
        let chains = CHAINS - (self.chain_to - self.chain_from);
        let segs = (SEGS - (self.seg_to - self.seg_from)) / MAX_SEGS;
        chains.min(segs)
    }

    /// Records a chain just popped.
    pub(super) fn push(&mut self, head: u16, segs: &[Seg]) {
        // The callers asked `room` first; a chain has at most MAX_SEGS buffers.
        debug_assert!(self.room() > 0 && segs.len() <= MAX_SEGS);
        if self.room() == 0 {
            return;
        }
        for &s in segs {
            self.segs[self.seg_to % SEGS] = s;
            self.seg_to += 1;
        }
        self.chains[self.chain_to % CHAINS] = (head, segs.len() as u16);
        self.chain_to += 1;
    }

    /// Forgets the last `n` chains pushed (given back to the ring).
    pub(super) fn unpop(&mut self, n: usize) {
        for _ in 0..n.min(self.chain_to - self.chain_from) {
            self.chain_to -= 1;
            let (_, k) = self.chains[self.chain_to % CHAINS];
            self.seg_to -= usize::from(k & !USED);
        }
    }

    /// Chain `head` was used with `len` bytes written: marks the pages of
    /// its buffers those bytes fill (the write came first) and forgets it.
    /// The device uses chains in pop order, so it is the first recorded;
    /// were it not, the first one recorded under its head is taken (and
    /// none when it was popped before logging started, which the queue
    /// rules out by giving back what it popped ahead).
    #[inline(never)]
    pub(super) fn used(&mut self, head: u16, len: u64) {
        let mut seg = self.seg_from;
        let mut found = None;
        for c in self.chain_from..self.chain_to {
            let (h, k) = self.chains[c % CHAINS];
            if h == head && k & USED == 0 {
                found = Some((c, seg, k));
                break;
            }
            seg += usize::from(k & !USED);
        }
        let Some((c, seg, k)) = found else {
            return;
        };
        let mut left = len;
        for i in seg..seg + usize::from(k) {
            if left == 0 {
                break;
            }
            let s = self.segs[i % SEGS];
            let n = u64::from(s.len).min(left);
            self.log.mark(s.addr, n);
            left -= n;
        }
        self.chains[c % CHAINS].1 |= USED;
        // Forget the chains used at the front.
        while self.chain_from < self.chain_to {
            let (_, k) = self.chains[self.chain_from % CHAINS];
            if k & USED == 0 {
                break;
            }
            self.chain_from += 1;
            self.seg_from += usize::from(k & !USED);
        }
    }

    /// Chains recorded.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.chain_to - self.chain_from
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::log::{DirtyLog, LogBounds};

    fn log() -> Arc<DirtyLog> {
        let f = crate::sys::memfd::create("popped-test", 4096).unwrap();
        let bounds = LogBounds {
            mem_end: 64 * 8 * 4096,
            left: 1 << 30,
        };
        Arc::new(DirtyLog::map(f, 64, 0, bounds).unwrap())
    }

    fn marked(log: &DirtyLog) -> Vec<u64> {
        (0..64 * 8).filter(|&p| log.is_marked(p)).collect()
    }

    fn seg(page: u64, len: u32) -> Seg {
        Seg {
            addr: page * 4096,
            len,
        }
    }

    #[test]
    fn marks_the_bytes_written_into_the_buffers_popped() {
        let l = log();
        let mut p = Popped::new(Arc::clone(&l));
        p.push(3, &[seg(5, 4096), seg(9, 8192)]);
        p.push(4, &[seg(20, 4096)]);
        p.push(7, &[seg(30, 4096)]);
        // The last one given back, then popped again as another chain.
        p.unpop(1);
        p.push(8, &[seg(40, 4096)]);
        assert_eq!(p.len(), 3);
        // 4 KiB + 1 byte: page 5 whole and the first byte of page 9.
        p.used(3, 4097);
        assert_eq!(marked(&l), vec![5, 9]);
        p.used(4, 0);
        p.used(8, 10);
        assert_eq!(marked(&l), vec![5, 9, 40]);
        assert_eq!(p.len(), 0);
        // Out of pop order: each chain still marks its own buffers, and
        // the record empties once the first is used too.
        p.push(1, &[seg(50, 4096)]);
        p.push(2, &[seg(51, 4096)]);
        p.used(2, 1);
        assert_eq!(p.len(), 2);
        assert!(l.is_marked(51) && !l.is_marked(50));
        p.used(1, 1);
        assert!(l.is_marked(50));
        assert_eq!(p.len(), 0);
        // Never recorded: nothing marked.
        p.used(9, 4096);
        assert_eq!(marked(&l), vec![5, 9, 40, 50, 51]);
    }

    #[test]
    fn room_shrinks_and_comes_back() {
        let mut p = Popped::new(log());
        let start = p.room();
        assert_eq!(start, SEGS / MAX_SEGS);
        let long = [seg(1, 1); MAX_SEGS];
        for k in 0..start {
            p.push(k as u16, &long);
        }
        assert_eq!(p.room(), 0);
        p.used(0, 1);
        assert_eq!(p.room(), 1);
        p.unpop(start);
        assert_eq!(p.room(), start);
    }
}
