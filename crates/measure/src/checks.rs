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
//! - **arrivals** (open loop only): the gaps between the sends that really
//!   left ([`crate::arrivals::GapSample`], thinned, pooled over sessions)
//!   against the process asked for, at the sender's resolution (20 µs: it
//!   spins only that close to a send). Poisson: the share of gaps below the
//!   resolution against the exponential's (binomial z), and the excess of
//!   the others over it against the exponential of the asked rate
//!   (memoryless), by Anderson-Darling (fully specified, Stephens 1974), as
//!   Lancet checks its load; each at 2.5%. Fixed: the share of sends that
//!   left later than the resolution after their instant, failing above 5%
//!   (on time, evenly spaced sends keep their gaps).
//!
//! Independence and stationarity need at least 8 seconds, arrivals 50
//! gaps; a failed check is a warning in the result, never silent, and
//! changes no figure.

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
    /// Seconds tested (0 for arrivals, which tests gaps).
    pub seconds: usize,
    /// Arrivals: the gaps tested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
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
        samples: None,
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
        samples: None,
        warning,
    })
}

/// Fewer gaps than this make no arrivals check.
pub const MIN_GAPS: usize = 50;
/// The sender's resolution: it spins only this close to a send, and sends
/// due within one turn of its loop leave together, so gaps are compared
/// one by one only above it (below it, their number is).
pub const RESOLUTION_NS: f64 = crate::rr::SEND_SPIN_NS as f64;
/// Anderson-Darling's 2.5% critical value for a fully specified
/// distribution (Stephens 1974), and the standard normal's two-sided 2.5%
/// one: the two tests of Poisson arrivals share the check's 5%.
const AD_CRIT: f64 = 3.070;
const Z_CRIT_HALF: f64 = 2.241;
/// Fixed arrivals: more than this share of sends later than the
/// resolution fails the check.
const FIXED_MAX_LATE: f64 = 0.05;

/// Anderson-Darling's A² of `x` against the exponential of rate `rate_per_ns`.
pub fn anderson_darling_exp(x: &[f64], rate_per_ns: f64) -> f64 {
    let mut x = x.to_vec();
    x.sort_by(f64::total_cmp);
    let n = x.len() as f64;
    // ln F(x) and ln(1 - F(x)) of the exponential, kept finite at zero.
    let ln_cdf = |v: f64| (-(-rate_per_ns * v).exp_m1()).max(1e-300).ln();
    let ln_sf = |v: f64| -rate_per_ns * v;
    let s: f64 = (0..x.len())
        .map(|i| (2 * i + 1) as f64 * (ln_cdf(x[i]) + ln_sf(x[x.len() - 1 - i])))
        .sum();
    -n - s / n
}

/// Poisson gaps at the sender's resolution: the share below it against
/// the exponential's (binomial z), and, the exponential being memoryless,
/// the excess of the others over it against the same exponential (A²).
/// Returns (passed, A², z).
fn poisson_gaps(gaps: &[f64], period_ns: f64) -> (bool, f64, f64) {
    let rate = 1.0 / period_ns;
    let n = gaps.len() as f64;
    let excess: Vec<f64> = gaps
        .iter()
        .filter(|&&d| d >= RESOLUTION_NS)
        .map(|d| d - RESOLUTION_NS)
        .collect();
    let p = -(-rate * RESOLUTION_NS).exp_m1();
    let below = n - excess.len() as f64;
    let z = (below - n * p) / (n * p * (1.0 - p)).sqrt().max(f64::MIN_POSITIVE);
    let a2 = if excess.len() >= MIN_GAPS {
        anderson_darling_exp(&excess, rate)
    } else {
        0.0
    };
    (a2 <= AD_CRIT && z.abs() <= Z_CRIT_HALF, a2, z)
}

/// The arrivals check of an open-loop run's sessions (None for closed
/// loops and for too few gaps).
pub fn arrivals(samples: &[&crate::arrivals::GapSample]) -> Option<SampleCheck> {
    use crate::arrivals::Arrival;
    let first = samples.first()?;
    let gaps: Vec<f64> = samples
        .iter()
        .flat_map(|g| g.gaps_ns.iter().map(|&d| d as f64))
        .collect();
    if gaps.len() < MIN_GAPS || first.rate_per_s == 0 {
        return None;
    }
    let period = 1e9 / first.rate_per_s as f64;
    let (passed, statistic, warning) = match first.arrival {
        Arrival::Poisson => {
            let (passed, a2, z) = poisson_gaps(&gaps, period);
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            (
                passed,
                a2,
                format!(
                    "the sends' gaps are not the asked-for Poisson arrivals at {:.0} µs resolution (over {} gaps, mean {:.1} µs for {:.1} µs asked: Anderson-Darling A² = {a2:.1}, limit {AD_CRIT}; gaps below the resolution z = {z:.1}, limit ±{Z_CRIT_HALF}): the sender fell behind or bunched, so the load was not the one intended",
                    RESOLUTION_NS / 1e3,
                    gaps.len(),
                    mean / 1e3,
                    period / 1e3
                ),
            )
        }
        Arrival::Fixed => {
            // Evenly spaced sends that keep their instants keep the gaps.
            let lags = samples.iter().flat_map(|g| g.lags_ns.iter());
            let late =
                lags.filter(|&&d| d as f64 > RESOLUTION_NS).count() as f64 / gaps.len() as f64;
            (
                late <= FIXED_MAX_LATE,
                late,
                format!(
                    "{:.1}% of the sends left more than {:.0} µs after their instant (over {} sends, {:.1} µs apart asked): the sender fell behind or bunched, so the load was not the one intended",
                    late * 100.0,
                    RESOLUTION_NS / 1e3,
                    gaps.len(),
                    period / 1e3
                ),
            )
        }
    };
    Some(SampleCheck {
        name: "arrivals".into(),
        passed,
        statistic,
        seconds: 0,
        passes_at_lag: None,
        samples: Some(gaps.len()),
        warning: if passed { String::new() } else { warning },
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
        .chain(it.arrivals.clone())
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

    fn sample(
        arrival: crate::arrivals::Arrival,
        rate: u64,
        gaps: Vec<u64>,
    ) -> crate::arrivals::GapSample {
        let mut g = crate::arrivals::GapSample::new(arrival, rate, 0, 1.0);
        g.gaps_ns = gaps;
        g
    }

    #[test]
    fn poisson_gaps_pass_and_a_sender_that_falls_behind_fails() {
        use crate::arrivals::Arrival;
        use rand_distr::{Distribution, Exp};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let exp = Exp::new(1.0 / 100_000.0).unwrap(); // 10 000/s
                                                      // Over many samples the test's false alarm rate is its level, 5%.
        let fails = (0..200)
            .filter(|_| {
                let g: Vec<u64> = (0..2_000).map(|_| exp.sample(&mut rng) as u64).collect();
                !arrivals(&[&sample(Arrival::Poisson, 10_000, g)])
                    .unwrap()
                    .passed
            })
            .count();
        assert!((2..=20).contains(&fails), "{fails} of 200 failed");
        // A sender that wakes every 250 µs and sends what is due back to
        // back: the gaps are 0 or multiples of the wake-up.
        let g: Vec<u64> = (0..2_000)
            .map(|_| {
                let d = exp.sample(&mut rng) as u64;
                (d / 250_000) * 250_000
            })
            .collect();
        let c = arrivals(&[&sample(Arrival::Poisson, 10_000, g)]).unwrap();
        assert!(!c.passed, "{c:?}");
        assert!(c.warning.contains("fell behind"), "{}", c.warning);
        assert_eq!(c.samples, Some(2_000));
        // The wrong rate fails too.
        let g: Vec<u64> = (0..2_000)
            .map(|_| exp.sample(&mut rng) as u64 * 2)
            .collect();
        assert!(
            !arrivals(&[&sample(Arrival::Poisson, 10_000, g)])
                .unwrap()
                .passed
        );
    }

    #[test]
    fn fixed_arrivals_pass_when_the_sends_keep_their_instants() {
        use crate::arrivals::Arrival;
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // 1 000/s, each send up to 15 µs late.
        let mut g = sample(Arrival::Fixed, 1_000, vec![1_000_000; 1_000]);
        g.lags_ns = (0..1_000).map(|_| rng.gen_range(0..15_000)).collect();
        let c = arrivals(&[&g]).unwrap();
        assert!(c.passed && c.statistic == 0.0, "{c:?}");
        // Every tenth send 100 µs late.
        for (i, d) in g.lags_ns.iter_mut().enumerate() {
            if i % 10 == 0 {
                *d = 100_000;
            }
        }
        let c = arrivals(&[&g]).unwrap();
        assert!(!c.passed && (c.statistic - 0.1).abs() < 1e-9, "{c:?}");
        assert!(c.warning.contains("fell behind"), "{}", c.warning);
        // Too few gaps make no check; a closed loop has none.
        assert!(arrivals(&[&sample(Arrival::Fixed, 1_000, vec![1_000_000; 10])]).is_none());
        assert!(arrivals(&[]).is_none());
    }
}
