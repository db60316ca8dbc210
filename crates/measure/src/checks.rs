//! Checks that a run's samples mean what the intervals assume: that round
//! trips are independent and the run is stationary (Lancet, USENIX ATC'19,
//! checks both). vnio keeps no per-transaction sequence (the hot loop only
//! adds to histograms), so both run on the per-second series of the
//! reported iteration: the mean round trip of each whole second.
//!
//! - **independence**: Spearman's rank correlation between each second's
//!   mean and the next's (lag 1); under independence ρ·√(n-1) is about
//!   standard normal, so |ρ|·√(n-1) > 1.96 fails at 5%. The check also
//!   names the smallest lag at which the correlation passes (how far apart
//!   samples must be to count as independent), if any.
//! - **stationarity**: the first half of the seconds against the second
//!   half, Mann-Whitney's two-sample rank test (normal approximation, 5%).
//!
//! Each needs at least 8 seconds; a failed check is a warning in the
//! result, never silent, and changes no figure.

use serde::{Deserialize, Serialize};

use crate::result::Document;

/// Fewer whole seconds than this make no check.
pub const MIN_SECONDS: usize = 8;
/// Fewer round trips in a second than this leave the second out.
const MIN_OPS: u64 = 10;
/// Two-sided 5% critical value of the standard normal.
const Z_CRIT: f64 = 1.959_964;

/// One check's outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleCheck {
    /// "independence" or "stationarity".
    pub name: String,
    pub passed: bool,
    /// The test statistic: Spearman's ρ at lag 1, or Mann-Whitney's z.
    pub statistic: f64,
    /// Seconds tested.
    pub seconds: usize,
    /// Independence: the smallest lag at which the correlation passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes_at_lag: Option<usize>,
    /// What failed, in one line (empty when passed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub warning: String,
}

/// Ranks (1-based, ties averaged).
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            r[idx[k]] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of two equally long series (0 when either
/// is constant).
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

/// Whether the series' lag-`k` correlation passes, with ρ.
fn lag_passes(s: &[f64], k: usize) -> (bool, f64) {
    let rho = spearman(&s[..s.len() - k], &s[k..]);
    let n = (s.len() - k) as f64;
    (rho.abs() * (n - 1.0).max(1.0).sqrt() <= Z_CRIT, rho)
}

/// Lag-1 independence of a series.
pub fn independence(s: &[f64]) -> Option<SampleCheck> {
    if s.len() < MIN_SECONDS {
        return None;
    }
    let (passed, rho) = lag_passes(s, 1);
    // Lags up to a third of the series leave enough pairs to test.
    let lag = (1..=s.len() / 3).find(|&k| lag_passes(s, k).0);
    let warning = if passed {
        String::new()
    } else {
        format!(
            "per-second mean round trips are correlated at lag 1 (Spearman ρ = {rho:.2} over {} s): the samples are not independent, so the percentiles' intervals are too narrow; {}",
            s.len(),
            match lag {
                Some(k) => format!("the correlation passes at lag {k} s"),
                None => format!("it does not pass at any lag up to {} s", s.len() / 3),
            }
        )
    };
    Some(SampleCheck {
        name: "independence".into(),
        passed,
        statistic: rho,
        seconds: s.len(),
        passes_at_lag: lag,
        warning,
    })
}

/// Split-half stationarity of a series: Mann-Whitney's U, normal
/// approximation.
pub fn stationarity(s: &[f64]) -> Option<SampleCheck> {
    if s.len() < MIN_SECONDS {
        return None;
    }
    let half = s.len() / 2;
    let (n1, n2) = (half as f64, (s.len() - half) as f64);
    let r = ranks(s);
    let r1: f64 = r[..half].iter().sum();
    let u = r1 - n1 * (n1 + 1.0) / 2.0;
    let z = (u - n1 * n2 / 2.0) / (n1 * n2 * (n1 + n2 + 1.0) / 12.0).sqrt();
    let passed = z.abs() <= Z_CRIT;
    let warning = if passed {
        String::new()
    } else {
        format!(
            "the run is not stationary: the first {half} s's mean round trips are {} the last {} s's (Mann-Whitney z = {z:.2}); something changed during the run",
            if z > 0.0 { "above" } else { "below" },
            s.len() - half
        )
    };
    Some(SampleCheck {
        name: "stationarity".into(),
        passed,
        statistic: z,
        seconds: s.len(),
        passes_at_lag: None,
        warning,
    })
}

/// The checks of `doc`'s reported iteration (latency workloads only).
pub fn of_document(doc: &Document) -> Vec<SampleCheck> {
    let Some(it) = doc.chosen() else {
        return Vec::new();
    };
    if it.merged.latency.is_none() {
        return Vec::new();
    }
    let whole = it.seconds.floor() as u64;
    let series: Vec<f64> = it
        .intervals
        .iter()
        .filter(|p| p.t_s < whole && p.ops >= MIN_OPS)
        .map(|p| p.mean_ns)
        .collect();
    independence(&series)
        .into_iter()
        .chain(stationarity(&series))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn spearman_of_known_series() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!((spearman(&x, &[2.0, 4.0, 6.0, 8.0, 10.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        // The textbook case with ties averaged: ranks [1, 2.5, 2.5, 4].
        assert_eq!(ranks(&[1.0, 2.0, 2.0, 3.0]), vec![1.0, 2.5, 2.5, 4.0]);
        assert_eq!(spearman(&x, &[3.0; 5]), 0.0);
    }

    #[test]
    fn independent_noise_passes_and_a_random_walk_does_not() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let noise: Vec<f64> = (0..60)
            .map(|_| 20_000.0 + rng.gen_range(0.0..1000.0))
            .collect();
        let i = independence(&noise).unwrap();
        assert!(i.passed, "{i:?}");
        assert_eq!(i.passes_at_lag, Some(1));
        assert!(stationarity(&noise).unwrap().passed);
        // A slow drift: each second's mean is the last one's plus noise.
        let mut walk = vec![20_000.0];
        for _ in 1..60 {
            let last = *walk.last().unwrap();
            walk.push(last + rng.gen_range(-100.0..300.0));
        }
        let i = independence(&walk).unwrap();
        assert!(!i.passed && i.statistic > 0.5, "{i:?}");
        assert!(i.warning.contains("not independent"), "{}", i.warning);
        let s = stationarity(&walk).unwrap();
        assert!(!s.passed && s.statistic < 0.0, "{s:?}");
        assert!(s.warning.contains("below the last"), "{}", s.warning);
        // Too short to test.
        assert!(independence(&walk[..5]).is_none());
    }

    #[test]
    fn alternating_seconds_pass_at_lag_two() {
        // 1, 0, 1, 0, ... with noise: strongly negative at lag 1, positive
        // at lag 2; the first passing lag is beyond both.
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let s: Vec<f64> = (0..30)
            .map(|i| (i % 2) as f64 * 1000.0 + rng.gen_range(0.0..10.0))
            .collect();
        let i = independence(&s).unwrap();
        assert!(!i.passed && i.statistic < -0.5, "{i:?}");
        assert!(i.passes_at_lag.is_none_or(|k| k > 2), "{i:?}");
    }
}
