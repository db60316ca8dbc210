//! Confidence intervals for percentiles, free of any assumption about the
//! latency distribution: the order-statistic interval (Le Boudec,
//! "Performance Evaluation of Computer and Communication Systems", ch. 2;
//! Lancet, USENIX ATC'19).
//!
//! For n independent samples of a continuous distribution with p-quantile
//! ξ, the count B of samples at or below ξ is Binomial(n, p), so the j-th
//! and k-th smallest samples (1-based, j < k) bracket ξ with probability
//! P(j <= B <= k - 1) = F(k - 1) - F(j - 1), F the binomial CDF. vnio takes
//! the **equal-tailed** pair, each tail at most alpha/2:
//!
//! - j = the largest rank with F(j - 1) <= alpha/2,
//! - k = the smallest rank with F(k - 1) >= 1 - alpha/2,
//!
//! so the coverage is at least 1 - alpha (discreteness makes it a little
//! more). The pair exists only when F(0) = (1-p)^n <= alpha/2 and
//! 1 - F(n-1) = p^n <= alpha/2: below that many samples a two-sided
//! interval cannot be had at all, and the result says "too few samples"
//! instead of a number (for p99.99 at 95% that is n >= 36,887).
//!
//! The values are read from the HdrHistogram: the lower bound is the
//! lowest value equivalent to the bucket holding the j-th sample, the
//! upper bound the highest value equivalent to the bucket holding the k-th,
//! so the bucket resolution (0.1%) widens the interval, never narrows it.
//!
//! The binomial CDF is summed in linear space from one probability mass
//! computed in log space (log-gamma), always over the tail that is the
//! smaller one, so it stays exact to about 1e-7 relative for n = 10^7 and
//! more, where a continued fraction for the incomplete beta function runs
//! out of iterations.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use statrs::function::gamma::ln_gamma;

/// The confidence level every reported interval has unless asked otherwise.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// P(B <= x) for B ~ Binomial(n, p).
pub fn binomial_cdf(x: u64, n: u64, p: f64) -> f64 {
    if x >= n || p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return 0.0;
    }
    let (nf, q) = (n as f64, 1.0 - p);
    if (x as f64) < nf * p {
        // The lower tail, summed downward from x: terms only shrink.
        lower_tail(x, n, p)
    } else {
        // 1 - the upper tail P(B >= x + 1), summed upward: terms shrink.
        // Summing the upper tail of Bin(n, p) is the lower tail of
        // Bin(n, q) at n - x - 1.
        1.0 - lower_tail(n - x - 1, n, q)
    }
}

/// P(B <= x) for x below the mean, summed from x down until the terms no
/// longer change the sum.
fn lower_tail(x: u64, n: u64, p: f64) -> f64 {
    let ratio = (1.0 - p) / p;
    let mut term = ln_pmf(x, n, p).exp();
    let mut sum = 0.0;
    let mut i = x;
    while term > 0.0 {
        sum += term;
        if i == 0 || term < sum * 1e-17 {
            break;
        }
        // pmf(i - 1) = pmf(i) * i / (n - i + 1) * (1 - p) / p
        term *= i as f64 / (n - i + 1) as f64 * ratio;
        i -= 1;
    }
    sum.min(1.0)
}

/// ln P(B = k).
fn ln_pmf(k: u64, n: u64, p: f64) -> f64 {
    let (k, n) = (k as f64, n as f64);
    ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
        + k * p.ln()
        + (n - k) * (-p).ln_1p()
}

/// Why an interval could not be had.
#[derive(Clone, Debug, PartialEq)]
pub struct TooFew {
    /// Samples needed for a two-sided interval at this percentile.
    pub needed: u64,
}

/// The 1-based ranks (j, k) of the order statistics that bracket the
/// p-quantile of n samples with probability >= `confidence`.
pub fn ranks(n: u64, p: f64, confidence: f64) -> Result<(u64, u64), TooFew> {
    let tail = (1.0 - confidence) / 2.0;
    let needed = samples_needed(p, confidence);
    if n < 2 || binomial_cdf(0, n, p) > tail || 1.0 - binomial_cdf(n - 1, n, p) > tail {
        return Err(TooFew { needed });
    }
    // j - 1 = the largest x with F(x) <= tail, i.e. the smallest x with
    // F(x) > tail, minus one; k - 1 = the smallest x with F(x) >= 1 - tail.
    let j = first(n, p, |f| f > tail);
    let k = first(n, p, |f| f >= 1.0 - tail) + 1;
    Ok((j, k))
}

/// The smallest n for which [`ranks`] has an answer: (1-p)^n and p^n both
/// at most (1 - confidence) / 2.
pub fn samples_needed(p: f64, confidence: f64) -> u64 {
    let tail = (1.0 - confidence) / 2.0;
    let worst = p.max(1.0 - p);
    if worst >= 1.0 {
        return u64::MAX;
    }
    (tail.ln() / worst.ln()).ceil().max(2.0) as u64
}

/// The smallest x in 0..=n with `pred(F(x))`, F monotone: a bisection,
/// started within 12 standard deviations of the mean where the answer lies
/// for any tail probability above 1e-30, widened if it does not.
fn first(n: u64, p: f64, pred: impl Fn(f64) -> bool) -> u64 {
    let (nf, sd) = (n as f64, (n as f64 * p * (1.0 - p)).sqrt());
    let mut lo = (nf * p - 12.0 * sd - 2.0).max(0.0) as u64;
    let mut hi = ((nf * p + 12.0 * sd + 2.0) as u64).min(n);
    if lo > 0 && pred(binomial_cdf(lo, n, p)) {
        lo = 0;
    }
    if !pred(binomial_cdf(hi, n, p)) {
        hi = n;
    }
    // Invariant: pred(F(hi)) holds; the answer is in lo..=hi.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(binomial_cdf(mid, n, p)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// A percentile's confidence interval as reported next to it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Ci {
    /// The probability the interval covers the true percentile, e.g. 0.95.
    pub confidence: f64,
    /// Lower and upper bound, ns; absent when there are too few samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi_ns: Option<u64>,
    /// The 1-based ranks of the order statistics the bounds are read at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<[u64; 2]>,
    /// Why there is no interval: "too few samples (...)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_few: Option<String>,
}

impl Ci {
    /// Both bounds, when there is an interval.
    pub fn bounds(&self) -> Option<(u64, u64)> {
        Some((self.lo_ns?, self.hi_ns?))
    }

    /// Half the interval's width relative to `estimate`, e.g. 0.05 for
    /// ±5%: the larger of the two sides, so it is never flattering.
    pub fn relative_half_width(&self, estimate: u64) -> Option<f64> {
        let (lo, hi) = self.bounds()?;
        let e = estimate.max(1) as f64;
        Some(((e - lo as f64).max(hi as f64 - e)).max(0.0) / e)
    }
}

/// The interval of quantile `q` (0..1) of the values in `hist`.
pub fn of_histogram(hist: &Histogram<u64>, q: f64, confidence: f64) -> Ci {
    let n = hist.len();
    match ranks(n, q, confidence) {
        Err(TooFew { needed }) => Ci {
            confidence,
            too_few: Some(format!(
                "too few samples: a two-sided {}% interval at p{} needs {needed}, has {n}",
                pct(confidence),
                pct(q)
            )),
            ..Default::default()
        },
        Ok((j, k)) => at_ranks(hist, j, k, confidence),
    }
}

/// The interval between the `j`-th and the `k`-th smallest samples of
/// `hist` (ranks from [`ranks`]): the lowest value of the j-th's bucket to
/// the highest of the k-th's.
pub fn at_ranks(hist: &Histogram<u64>, j: u64, k: u64, confidence: f64) -> Ci {
    let [lo, hi] = values_at_ranks(hist, [j, k]);
    let lo = lo.map(|v| hist.lowest_equivalent(v));
    let hi = hi.map(|v| hist.highest_equivalent(v));
    Ci {
        confidence,
        lo_ns: lo,
        hi_ns: hi,
        ranks: Some([j, k]),
        too_few: None,
    }
}

/// A fraction as a percentage without trailing zeros: 0.999 -> "99.9".
fn pct(f: f64) -> String {
    let s = format!("{:.4}", f * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The values (as the histogram's buckets) of the samples of the given
/// 1-based ranks, in one pass over the histogram; none beyond its count.
pub fn values_at_ranks<const N: usize>(hist: &Histogram<u64>, ranks: [u64; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| ranks[i]);
    let mut next = 0;
    let mut seen = 0u64;
    for v in hist.iter_recorded() {
        seen += v.count_at_value();
        while next < N && ranks[order[next]] <= seen {
            out[order[next]] = Some(v.value_iterated_to());
            next += 1;
        }
        if next == N {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CDF by summing every term from k = 0, each from the product
    /// formula carried in log space (no gamma function, no underflow of
    /// the first terms): the reference for small n.
    fn naive_cdf(x: u64, n: u64, p: f64) -> f64 {
        let mut ln_pmf = n as f64 * (1.0 - p).ln();
        let mut sum = 0.0;
        for k in 0..=x {
            sum += ln_pmf.exp();
            ln_pmf += ((n - k) as f64 / (k + 1) as f64 * p / (1.0 - p)).ln();
        }
        sum
    }

    #[test]
    fn cdf_matches_direct_sums_for_small_n() {
        for n in [1u64, 2, 5, 20, 100, 500] {
            for p in [0.01, 0.3, 0.5, 0.9, 0.99] {
                for x in 0..n {
                    let (got, want) = (binomial_cdf(x, n, p), naive_cdf(x, n, p));
                    assert!(
                        (got - want).abs() < 1e-12 + 1e-9 * want,
                        "n {n} p {p} x {x}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn cdf_at_ten_million_agrees_with_the_normal_limit() {
        // Bin(1e7, 0.5) at mean - 1.959964 sd: 0.025 to within the
        // continuity correction's and skew's few 1e-4.
        let n = 10_000_000u64;
        let sd = (n as f64 * 0.25).sqrt();
        let x = (n as f64 * 0.5 - 1.959964 * sd) as u64;
        let f = binomial_cdf(x, n, 0.5);
        assert!((f - 0.025).abs() < 5e-4, "{f}");
        // And the two tails sum to one around the middle.
        let m = n / 2;
        let lower = binomial_cdf(m - 1, n, 0.5);
        let upper = 1.0 - binomial_cdf(m, n, 0.5);
        assert!((lower - upper).abs() < 1e-9, "{lower} {upper}");
        // A far tail is tiny, not negative, not NaN.
        let far = binomial_cdf(n / 2 - 20 * sd as u64, n, 0.5);
        assert!((0.0..1e-80).contains(&far), "{far}");
        // p99.99 of 1e7: the mean count above it is 1000.
        let f = binomial_cdf(n - 1001, n, 0.9999);
        assert!((0.4..0.6).contains(&f), "{f}");
    }

    #[test]
    fn ranks_are_the_equal_tailed_pair() {
        for (n, p) in [
            (100u64, 0.5),
            (1000, 0.99),
            (1_000_000, 0.999),
            (10_000_000, 0.5),
        ] {
            let (j, k) = ranks(n, p, 0.95).unwrap();
            let t = 0.025;
            assert!(binomial_cdf(j - 1, n, p) <= t && binomial_cdf(j, n, p) > t);
            assert!(binomial_cdf(k - 1, n, p) >= 1.0 - t && binomial_cdf(k - 2, n, p) < 1.0 - t);
            assert!(binomial_cdf(k - 1, n, p) - binomial_cdf(j - 1, n, p) >= 0.95);
        }
        // The textbook case (Le Boudec, table 2.1): n = 100, the median's
        // 95% interval is between the 40th and the 61st sample.
        assert_eq!(ranks(100, 0.5, 0.95), Ok((40, 61)));
    }

    #[test]
    fn too_few_samples_has_no_interval() {
        assert_eq!(samples_needed(0.9999, 0.95), 36_887);
        assert!(ranks(36_886, 0.9999, 0.95).is_err());
        assert!(ranks(36_887, 0.9999, 0.95).is_ok());
        assert_eq!(ranks(5, 0.5, 0.95), Err(TooFew { needed: 6 }));
        assert!(ranks(6, 0.5, 0.95).is_ok());
        assert!(ranks(0, 0.5, 0.95).is_err());
    }

    #[test]
    fn histogram_bounds_bracket_the_sample_values() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).unwrap();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let ci = of_histogram(&h, 0.5, 0.95);
        let [j, k] = ci.ranks.unwrap();
        let (lo, hi) = ci.bounds().unwrap();
        assert!(lo <= j * 1000 && j * 1000 - lo <= j);
        assert!(hi >= k * 1000 && hi - k * 1000 <= k);
        assert!(ci.relative_half_width(500_000).unwrap() < 0.1);
        let tail = of_histogram(&h, 0.9999, 0.95);
        assert_eq!(tail.bounds(), None);
        assert_eq!(
            tail.too_few.as_deref(),
            Some("too few samples: a two-sided 95% interval at p99.99 needs 36887, has 1000")
        );
    }
}
