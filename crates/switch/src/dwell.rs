//! How long frames stay in the switch: from the polling round in which a
//! frame was taken from its source queue to the publication of its used
//! entry in the destination's receive ring, as a histogram per
//! destination port (the time OVS's pmd-perf-show does not give).
//!
//! The worker already reads its cycle counter at the start and the end of
//! every round ([`crate::perf`]); the used entries of a round are published
//! at its end, so every frame a round delivered to a port waited at most
//! the round's length, and the histogram records that length once per
//! destination and round, weighted by the frames. No clock read, and one
//! bucket update per destination per round, not per frame. A frame held
//! longer (an LRO aggregate kept across rounds) counts from the round that
//! published it.
//!
//! The buckets are log-linear in cycles: 32 per power of two, so a value
//! is known to within 1/32 (the reported value is the bucket's middle,
//! within 1.6%). They are relaxed atomic adds: more than one worker may
//! deliver to one port (a multiqueue vNIC's pairs spread over workers), and
//! the cost is per round. Never reset: readers take differences, and the
//! histograms of several ports or switches merge by adding buckets.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Sub-buckets per power of two (as a shift).
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Powers of two covered: up to 2^48 cycles (a day at 3 GHz); longer
/// values land in the last bucket.
const TOP_BIT: u32 = 47;
/// Buckets in all.
pub const BUCKETS: usize = (TOP_BIT - SUB_BITS + 2) as usize * SUB;

/// The bucket of `v` cycles.
#[inline]
fn bucket(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = (u64::BITS - 1 - v.leading_zeros()).min(TOP_BIT);
    let v = v.min((1u64 << (TOP_BIT + 1)) - 1);
    let sub = (v >> (e - SUB_BITS)) as usize & (SUB - 1);
    (e - SUB_BITS + 1) as usize * SUB + sub
}

/// The lowest value of bucket `i` and its width, in cycles.
fn bucket_range(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, 1);
    }
    let e = (i / SUB) as u32 + SUB_BITS - 1;
    let width = 1u64 << (e - SUB_BITS);
    ((1u64 << e) + (i % SUB) as u64 * width, width)
}

/// One port's time in the switch (written by the workers that deliver to it).
#[derive(Debug)]
pub struct Dwell {
    buckets: Box<[AtomicU64; BUCKETS]>,
    max: AtomicU64,
}

impl Default for Dwell {
    fn default() -> Self {
        Dwell {
            buckets: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            max: AtomicU64::new(0),
        }
    }
}

impl Dwell {
    /// `frames` waited `cycles` in the switch.
    #[inline]
    pub fn record(&self, cycles: u64, frames: u64) {
        self.buckets[bucket(cycles)].fetch_add(frames, Relaxed);
        // A read in the common case; the atomic maximum only for a new one.
        if cycles > self.max.load(Relaxed) {
            self.max.fetch_max(cycles, Relaxed);
        }
    }

    /// The counts now, in cycles.
    pub fn snapshot(&self) -> DwellCounts {
        DwellCounts {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            max_cycles: self.max.load(Relaxed),
        }
    }
}

/// A copy of a [`Dwell`]'s buckets (cycles), to subtract, merge and read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DwellCounts {
    pub buckets: Vec<u64>,
    pub max_cycles: u64,
}

/// Upper bounds of the cumulative counts reported with a summary (ns), for
/// a Prometheus histogram: 1 µs to 10 ms in 1-2-5 steps.
pub const LE_NS: [u64; 13] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000,
];

/// Time in the switch as reported: nanoseconds, percentiles of the frames.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DwellSummary {
    /// Frames counted.
    pub frames: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// The longest round that delivered to the port.
    pub max_ns: u64,
    /// Frames that stayed at most each of [`LE_NS`].
    pub le: Vec<u64>,
    /// The frames' times added up (bucket middles), ns.
    pub sum_ns: u64,
}

impl DwellCounts {
    /// Frames counted.
    pub fn frames(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds another port's (or worker's) counts.
    pub fn merge(&mut self, o: &DwellCounts) {
        if self.buckets.len() < o.buckets.len() {
            self.buckets.resize(o.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.max_cycles = self.max_cycles.max(o.max_cycles);
    }

    /// What was counted since `earlier` (the max stays the all-time one).
    pub fn since(&self, earlier: &DwellCounts) -> DwellCounts {
        let mut d = self.clone();
        for (a, b) in d.buckets.iter_mut().zip(&earlier.buckets) {
            *a = a.saturating_sub(*b);
        }
        d
    }

    /// The value at quantile `q` (0..1), cycles: the middle of the bucket
    /// holding the frame of that rank.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.frames();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, w) = bucket_range(i);
                return Some(lo as f64 + (w as f64 - 1.0) / 2.0);
            }
        }
        None
    }

    /// Frames that waited at most `cycles` (whole buckets at or below it),
    /// for a Prometheus histogram's `le` buckets.
    pub fn at_most(&self, cycles: f64) -> u64 {
        self.buckets
            .iter()
            .enumerate()
            .take_while(|(i, _)| {
                let (lo, w) = bucket_range(*i);
                (lo + w - 1) as f64 <= cycles
            })
            .map(|(_, c)| c)
            .sum()
    }

    /// The percentiles in nanoseconds at `cycles_per_ns`.
    pub fn summary(&self, cycles_per_ns: f64) -> DwellSummary {
        let ns = |c: f64| (c / cycles_per_ns).round() as u64;
        let q = |p: f64| self.quantile(p).map_or(0, ns);
        let sum: f64 = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| {
                let (lo, w) = bucket_range(i);
                c as f64 * (lo as f64 + (w as f64 - 1.0) / 2.0)
            })
            .sum();
        DwellSummary {
            frames: self.frames(),
            p50_ns: q(0.5),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: ns(self.max_cycles as f64),
            le: LE_NS
                .iter()
                .map(|&b| self.at_most(b as f64 * cycles_per_ns))
                .collect(),
            sum_ns: ns(sum),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range_and_hold_their_values() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (lo, w) = bucket_range(i);
            assert_eq!(
                lo,
                next,
                "bucket {i} starts where {} ended",
                i.wrapping_sub(1)
            );
            assert_eq!(bucket(lo), i);
            assert_eq!(bucket(lo + w - 1), i);
            // Within 1/32 of its value.
            assert!(
                w == 1 || (w as f64) <= lo as f64 / 32.0 + 1.0,
                "{i}: {lo} {w}"
            );
            next = lo + w;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_known_rounds() {
        let d = Dwell::default();
        // 990 frames in rounds of 1 000 cycles, 9 in one of 10 000, 1 in 10^6.
        d.record(1_000, 990);
        d.record(10_000, 9);
        d.record(1_000_000, 1);
        let c = d.snapshot();
        assert_eq!(c.frames(), 1_000);
        let near = |v: Option<f64>, want: f64| (v.unwrap() - want).abs() <= want / 32.0;
        assert!(near(c.quantile(0.5), 1_000.0));
        assert!(near(c.quantile(0.99), 1_000.0));
        assert!(near(c.quantile(0.995), 10_000.0));
        assert!(near(c.quantile(1.0), 1_000_000.0));
        assert_eq!(c.max_cycles, 1_000_000);
        let s = c.summary(2.0);
        assert!(s.p50_ns.abs_diff(500) <= 500 / 32, "{s:?}");
        assert_eq!(s.max_ns, 500_000);
        // 990 frames by 1 µs (2 000 cycles), all by 10 ms.
        assert_eq!((s.le[0], s.le[12]), (990, 1_000));
        assert!(
            s.sum_ns.abs_diff(990 * 500 + 9 * 5_000 + 500_000) < 20_000,
            "{s:?}"
        );
        assert_eq!(c.at_most(2_000.0), 990);
        assert_eq!(c.at_most(f64::MAX), 1_000);
    }

    #[test]
    fn counts_merge_and_subtract() {
        let (a, b) = (Dwell::default(), Dwell::default());
        a.record(100, 5);
        let before = a.snapshot();
        a.record(200, 3);
        b.record(300, 2);
        let mut m = a.snapshot().since(&before);
        assert_eq!(m.frames(), 3);
        m.merge(&b.snapshot());
        assert_eq!(m.frames(), 5);
        assert_eq!(m.max_cycles, 300);
        assert!(DwellCounts::default().quantile(0.5).is_none());
    }

    #[test]
    fn several_writers_lose_nothing() {
        let d = std::sync::Arc::new(Dwell::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || (0..10_000).for_each(|_| d.record(777, 1)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(d.snapshot().frames(), 40_000);
    }
}
