//! Confidence intervals for the two figures of a latency run that are not
//! percentiles: the mean round trip, and the share of round trips above a
//! threshold (the studies' "at most 0.009% over 1 ms"). Like the
//! percentiles' intervals ([`crate::interval`]) they assume independent
//! round trips ([`crate::checks`] tests that), and are read from the whole
//! histogram of a point.
//!
//! - **Mean**: the normal interval mean ± z·s/√n (central limit theorem;
//!   n is thousands of round trips and more, s the histogram's standard
//!   deviation, its bucket resolution of 0.1% added to both ends).
//! - **Share above a threshold**: Wilson's score interval for k of n
//!   (Wilson 1927; Brown, Cai and DasGupta 2001 recommend it over the
//!   normal one, which collapses to a point when k = 0, the usual case for
//!   spikes). The count above the threshold is read from the histogram,
//!   so a bucket straddling the threshold is counted on the side that
//!   widens the interval.

use hdrhistogram::Histogram;
use statrs::distribution::{ContinuousCDF, Normal};

/// The two-sided standard normal quantile for `confidence` (0.95 -> 1.96).
fn z(confidence: f64) -> f64 {
    Normal::new(0.0, 1.0)
        .expect("the standard normal")
        .inverse_cdf(0.5 + confidence / 2.0)
}

/// The interval of the mean of `hist`'s values at `confidence`, ns; none
/// below two values.
pub fn mean(hist: &Histogram<u64>, confidence: f64) -> Option<(f64, f64)> {
    let n = hist.len();
    if n < 2 {
        return None;
    }
    let m = hist.mean();
    let half = z(confidence) * hist.stdev() / (n as f64).sqrt();
    // A value is known to within its bucket (one part in 10^3 here).
    let bucket = m * 10f64.powi(-(hist.sigfig() as i32));
    Some(((m - half - bucket).max(0.0), m + half + bucket))
}

/// Wilson's score interval for a share of `k` in `n`, as fractions.
pub fn wilson(k: u64, n: u64, confidence: f64) -> Option<(f64, f64)> {
    if n == 0 || k > n {
        return None;
    }
    let (n, z) = (n as f64, z(confidence));
    let p = k as f64 / n;
    let z2n = z * z / n;
    let centre = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z / (1.0 + z2n) * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt();
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// The share of `hist`'s values above `threshold_ns`, in percent, with its
/// interval at `confidence`: (value, (lo, hi)).
pub fn share_above(
    hist: &Histogram<u64>,
    threshold_ns: u64,
    confidence: f64,
) -> Option<(f64, (f64, f64))> {
    let n = hist.len();
    if n == 0 {
        return None;
    }
    // Values surely above (the bucket starts above the threshold) and
    // possibly above (the bucket holds the threshold).
    let surely = n - hist.count_between(0, hist.highest_equivalent(threshold_ns));
    let possibly =
        n - hist.count_between(0, hist.lowest_equivalent(threshold_ns).saturating_sub(1));
    let (lo, _) = wilson(surely, n, confidence)?;
    let (_, hi) = wilson(possibly, n, confidence)?;
    Some((100.0 * surely as f64 / n as f64, (100.0 * lo, 100.0 * hi)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, Exp};

    fn hist(v: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for x in v {
            h.record(x).unwrap();
        }
        h
    }

    #[test]
    fn wilson_matches_its_textbook_values() {
        // Brown, Cai and DasGupta's example: 0 of 20 at 95%: [0, 0.161].
        let (lo, hi) = wilson(0, 20, 0.95).unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 0.1611).abs() < 1e-3, "{hi}");
        // 15 of 20: [0.531, 0.888].
        let (lo, hi) = wilson(15, 20, 0.95).unwrap();
        assert!(
            (lo - 0.5313).abs() < 1e-3 && (hi - 0.8881).abs() < 1e-3,
            "{lo} {hi}"
        );
        assert!(wilson(1, 0, 0.95).is_none() && wilson(3, 2, 0.95).is_none());
    }

    #[test]
    fn the_mean_interval_covers_the_true_mean_about_as_often_as_it_says() {
        // Exponential round trips of mean 50 µs, 10^4 a repeat, 400 repeats.
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let exp = Exp::new(1.0 / 50_000.0).unwrap();
        let covered = (0..400)
            .filter(|_| {
                let h = hist((0..10_000).map(|_| exp.sample(&mut rng) as u64 + 1));
                let (lo, hi) = mean(&h, 0.95).unwrap();
                lo <= 50_000.0 && 50_000.0 <= hi
            })
            .count();
        assert!((368..=392).contains(&covered), "covered {covered} of 400");
        assert!(mean(&hist([7]), 0.95).is_none());
    }

    #[test]
    fn a_share_above_a_threshold_counts_the_straddling_bucket_against_itself() {
        // 3 of 10 000 above 1 ms, one of them in the bucket holding 1 ms.
        let v = (0..9_997)
            .map(|_| 20_000)
            .chain([1_000_100, 2_000_000, 9_000_000]);
        let (share, (lo, hi)) = share_above(&hist(v), 1_000_000, 0.95).unwrap();
        assert!(
            (share - 0.02).abs() < 1e-9 || (share - 0.03).abs() < 1e-9,
            "{share}"
        );
        assert!(lo > 0.0 && lo < 0.02 && hi > 0.03 && hi < 0.1, "{lo} {hi}");
        // None above: the interval still has an upper bound.
        let (share, (lo, hi)) = share_above(&hist([20_000; 1_000]), 1_000_000, 0.95).unwrap();
        assert_eq!((share, lo), (0.0, 0.0));
        assert!(hi > 0.1 && hi < 0.5, "{hi}");
    }
}
