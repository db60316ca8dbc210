//! Latency statistics: an HdrHistogram in nanoseconds plus the exact counters
//! the studies report (round trips above 1 ms and 5 ms), mergeable without loss
//! across sessions, agents and iterations.

use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::interval::{of_histogram, Ci, DEFAULT_CONFIDENCE};

/// Highest value a histogram tracks: 100 s. Larger values are clamped and counted.
pub const HIGHEST_NS: u64 = 100_000_000_000;
/// Significant digits kept: every value is within 0.1% of what was recorded.
pub const SIGNIFICANT_DIGITS: u8 = 3;

const ONE_MS: u64 = 1_000_000;
const FIVE_MS: u64 = 5_000_000;

/// A latency recorder. Recording never allocates: the bucket array is sized
/// once at creation, which is what lets sessions record on the fast path.
#[derive(Clone, Debug)]
pub struct Latency {
    hist: Histogram<u64>,
    over_1ms: u64,
    over_5ms: u64,
    clamped: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Latency {
            hist,
            over_1ms: 0,
            over_5ms: 0,
            clamped: 0,
        }
    }

    /// A recorder with 2 significant digits (1%): for per-second series.
    pub fn coarse() -> Self {
        let hist = Histogram::new_with_bounds(1, HIGHEST_NS, 2)
            .expect("constant histogram bounds are valid");
        Latency {
            hist,
            over_1ms: 0,
            over_5ms: 0,
            clamped: 0,
        }
    }

    /// Records one round trip of `ns` nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let v = if ns > HIGHEST_NS {
            self.clamped += 1;
            HIGHEST_NS
        } else {
            ns.max(1)
        };
        self.over_1ms += u64::from(v > ONE_MS);
        self.over_5ms += u64::from(v > FIVE_MS);
        // Cannot fail: v is within the bounds the histogram was created with.
        let _ = self.hist.record(v);
    }

    /// Records `count` round trips of `ns` each at once (for rebuilding a
    /// distribution from counts, e.g. in tests of the statistics).
    pub fn record_n(&mut self, ns: u64, count: u64) {
        let v = ns.clamp(1, HIGHEST_NS);
        self.clamped += if ns > HIGHEST_NS { count } else { 0 };
        self.over_1ms += if v > ONE_MS { count } else { 0 };
        self.over_5ms += if v > FIVE_MS { count } else { 0 };
        // Cannot fail: v is within the bounds the histogram was created with.
        let _ = self.hist.record_n(v, count);
    }

    /// Adds every value of `other` to this recorder.
    pub fn merge(&mut self, other: &Latency) {
        // Same value range on both sides, so the add cannot fail; a coarse
        // source is re-recorded at this recorder's precision.
        let _ = self.hist.add(&other.hist);
        self.over_1ms += other.over_1ms;
        self.over_5ms += other.over_5ms;
        self.clamped += other.clamped;
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.over_1ms = 0;
        self.over_5ms = 0;
        self.clamped = 0;
    }

    /// Value at quantile `q` (0..=1): the smallest recorded value (to 0.1%)
    /// such that at least `q` of all values are at or below it.
    pub fn quantile(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }

    /// The statistics with every percentile's 95% confidence interval.
    pub fn summary(&self) -> Summary {
        self.summary_at(DEFAULT_CONFIDENCE)
    }

    /// The statistics with every percentile's interval at `confidence`
    /// (e.g. 0.95), computed from the histogram after the run.
    pub fn summary_at(&self, confidence: f64) -> Summary {
        let n = self.hist.len();
        if n == 0 {
            return Summary::default();
        }
        let pct = |c: u64| 100.0 * c as f64 / n as f64;
        Summary {
            count: n,
            mean_ns: self.hist.mean(),
            stddev_ns: self.hist.stdev(),
            min_ns: self.hist.min(),
            p50_ns: self.quantile(0.50),
            p90_ns: self.quantile(0.90),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
            p9999_ns: self.quantile(0.9999),
            max_ns: self.hist.max(),
            over_1ms_pct: pct(self.over_1ms),
            over_5ms_pct: pct(self.over_5ms),
            clamped: self.clamped,
            ci: Intervals {
                p50: self.interval(0.50, confidence),
                p90: self.interval(0.90, confidence),
                p99: self.interval(0.99, confidence),
                p999: self.interval(0.999, confidence),
                p9999: self.interval(0.9999, confidence),
            },
        }
    }

    /// The order-statistic confidence interval of quantile `q` (0..1):
    /// see [`crate::interval`].
    pub fn interval(&self, q: f64, confidence: f64) -> Ci {
        of_histogram(&self.hist, q, confidence)
    }

    /// The mean round trip's interval at `confidence`, ns
    /// ([`crate::moments::mean`]).
    pub fn mean_interval(&self, confidence: f64) -> Option<(f64, f64)> {
        crate::moments::mean(&self.hist, confidence)
    }

    /// The percentage of round trips above 1 ms (`over_5ms`: 5 ms), exact,
    /// with its Wilson interval at `confidence` ([`crate::moments`]).
    pub fn over_interval(&self, over_5ms: bool, confidence: f64) -> Option<(f64, (f64, f64))> {
        let n = self.hist.len();
        let k = if over_5ms {
            self.over_5ms
        } else {
            self.over_1ms
        };
        let (lo, hi) = crate::moments::wilson(k, n, confidence)?;
        Some((100.0 * k as f64 / n as f64, (100.0 * lo, 100.0 * hi)))
    }

    /// The HdrHistogram itself (nanoseconds), e.g. for an interval log.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The histogram in HdrHistogram's V2 compressed interchange format,
    /// base64-encoded: readable by every HdrHistogram implementation.
    pub fn encode(&self) -> Encoded {
        let mut buf = Vec::new();
        // Serializing into a Vec cannot fail for a valid histogram.
        let _ = V2DeflateSerializer::new().serialize(&self.hist, &mut buf);
        use base64::Engine;
        Encoded {
            hdr_v2_deflate_b64: base64::engine::general_purpose::STANDARD.encode(buf),
            over_1ms: self.over_1ms,
            over_5ms: self.over_5ms,
            clamped: self.clamped,
        }
    }

    /// Rebuilds a recorder from [`Latency::encode`]'s output.
    pub fn decode(e: &Encoded) -> Result<Latency, DecodeError> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&e.hdr_v2_deflate_b64)
            .map_err(|err| DecodeError(err.to_string()))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|err| DecodeError(format!("{err:?}")))?;
        let mut l = Latency::new();
        l.hist
            .add(&h)
            .map_err(|err| DecodeError(format!("{err:?}")))?;
        l.over_1ms = e.over_1ms;
        l.over_5ms = e.over_5ms;
        l.clamped = e.clamped;
        Ok(l)
    }
}

/// A histogram as stored in result documents.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Encoded {
    pub hdr_v2_deflate_b64: String,
    pub over_1ms: u64,
    pub over_5ms: u64,
    pub clamped: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("stored histogram is not a valid HdrHistogram V2 encoding: {0}")]
pub struct DecodeError(String);

/// The statistics the studies report, all in nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
    /// Percentage of round trips above 1 ms (exact, not from buckets).
    pub over_1ms_pct: f64,
    /// Percentage of round trips above 5 ms (exact, not from buckets).
    pub over_5ms_pct: f64,
    /// Values above [`HIGHEST_NS`], recorded as that value.
    pub clamped: u64,
    /// Each percentile's confidence interval (absent in documents stored
    /// before intervals were computed: read back as empty).
    #[serde(default)]
    pub ci: Intervals,
}

/// The confidence intervals of [`Summary`]'s percentiles, by the same names.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Intervals {
    pub p50: Ci,
    pub p90: Ci,
    pub p99: Ci,
    pub p999: Ci,
    pub p9999: Ci,
}

impl Intervals {
    /// The intervals with the percentile each belongs to, e.g. (99.9, ..).
    pub fn by_percentile(&self) -> [(f64, &Ci); 5] {
        [
            (50.0, &self.p50),
            (90.0, &self.p90),
            (99.0, &self.p99),
            (99.9, &self.p999),
            (99.99, &self.p9999),
        ]
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// none when empty. Sorts them.
pub fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// Picks the median iteration by mean round trip (the studies' rule): with
/// an even count, the lower of the two middle ones. Returns its index.
pub fn median_by_mean(means: &[f64]) -> Option<usize> {
    if means.is_empty() {
        return None;
    }
    let mut idx: Vec<usize> = (0..means.len()).collect();
    idx.sort_by(|&a, &b| means[a].total_cmp(&means[b]));
    Some(idx[(means.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn an_even_count_takes_the_middle_two() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    /// The brute-force answer: the smallest sample with at least q of the
    /// samples at or below it.
    fn brute_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    fn close(hist: u64, exact: u64) -> bool {
        // HdrHistogram reports the highest value equivalent to the bucket:
        // never below the exact value and at most 0.1% above it.
        hist >= exact && (hist - exact) as f64 <= exact as f64 * 1e-3 + 1.0
    }

    fn samples(seed: u64, n: usize) -> Vec<u64> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // A latency-like shape: a body around 20-80 us with a long tail.
        (0..n)
            .map(|_| {
                let body = rng.gen_range(20_000..80_000u64);
                if rng.gen_bool(0.002) {
                    body * rng.gen_range(10..400)
                } else {
                    body
                }
            })
            .collect()
    }

    #[test]
    fn percentiles_match_sorted_samples() {
        for seed in 0..5 {
            let s = samples(seed, 50_000);
            let mut l = Latency::new();
            s.iter().for_each(|&v| l.record(v));
            let mut sorted = s.clone();
            sorted.sort_unstable();
            let sum = l.summary();
            for (q, got) in [
                (0.5, sum.p50_ns),
                (0.9, sum.p90_ns),
                (0.99, sum.p99_ns),
                (0.999, sum.p999_ns),
                (0.9999, sum.p9999_ns),
            ] {
                let exact = brute_quantile(&sorted, q);
                assert!(
                    close(got, exact),
                    "seed {seed} q {q}: hdr {got} exact {exact}"
                );
            }
            assert!(close(sum.max_ns, *sorted.last().unwrap()));
            // min is reported as the lowest equivalent value: within 0.1% below.
            let min = sorted[0];
            assert!(sum.min_ns <= min && (min - sum.min_ns) as f64 <= min as f64 * 1e-3);
            let mean = s.iter().sum::<u64>() as f64 / s.len() as f64;
            assert!(
                (sum.mean_ns - mean).abs() / mean < 1e-3,
                "mean {} vs {mean}",
                sum.mean_ns
            );
            let var = s.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / s.len() as f64;
            assert!((sum.stddev_ns - var.sqrt()).abs() / var.sqrt() < 1e-2);
            let over1 =
                s.iter().filter(|&&v| v > 1_000_000).count() as f64 * 100.0 / s.len() as f64;
            let over5 =
                s.iter().filter(|&&v| v > 5_000_000).count() as f64 * 100.0 / s.len() as f64;
            assert_eq!(sum.over_1ms_pct, over1);
            assert_eq!(sum.over_5ms_pct, over5);
        }
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let a = samples(1, 10_000);
        let b = samples(2, 30_000);
        let (mut la, mut lb, mut all) = (Latency::new(), Latency::new(), Latency::new());
        a.iter().for_each(|&v| la.record(v));
        b.iter().for_each(|&v| lb.record(v));
        a.iter().chain(b.iter()).for_each(|&v| all.record(v));
        la.merge(&lb);
        assert_eq!(la.summary(), all.summary());
    }

    #[test]
    fn encode_decode_round_trip_is_lossless() {
        let mut l = Latency::new();
        samples(3, 5_000).iter().for_each(|&v| l.record(v));
        l.record(HIGHEST_NS * 2);
        let back = Latency::decode(&l.encode()).unwrap();
        assert_eq!(back.summary(), l.summary());
        assert_eq!(back.summary().clamped, 1);
    }

    #[test]
    fn garbage_encoding_is_an_error_not_a_panic() {
        let bad = Encoded {
            hdr_v2_deflate_b64: "bm90IGEgaGlzdG9ncmFt".into(),
            over_1ms: 0,
            over_5ms: 0,
            clamped: 0,
        };
        assert!(Latency::decode(&bad).is_err());
        let bad = Encoded {
            hdr_v2_deflate_b64: "***".into(),
            ..bad
        };
        assert!(Latency::decode(&bad).is_err());
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(Latency::new().summary(), Summary::default());
    }

    #[test]
    fn median_iteration_by_mean() {
        assert_eq!(median_by_mean(&[]), None);
        assert_eq!(median_by_mean(&[5.0]), Some(0));
        assert_eq!(median_by_mean(&[30.0, 10.0, 20.0]), Some(2));
        assert_eq!(median_by_mean(&[40.0, 10.0, 30.0, 20.0]), Some(3));
    }
}
