//! The decision rule: a finding is judged on the run's own spread, never
//! on one number against another.
//!
//! Each side of a comparison is a set of samples of the statistic (one per
//! iteration, or one per second of measurement when a point ran a single
//! iteration) and the reported value (the median iteration's). Its *band*
//! is the smallest interval holding all of them. The quantity's band
//! follows by interval arithmetic: a difference spans
//! `[lo_s - hi_a, hi_s - lo_a]`, a ratio `[lo_s / hi_a, hi_s / lo_a]`.
//! The verdict:
//!
//! - *reproduced*: the whole band is on the side of `than` the study says;
//! - *not reproduced*: the whole band is on the other side (or at it);
//! - *inconclusive*: the band straddles `than` (the difference is within
//!   the run's spread), or a side has a single sample (no spread to judge
//!   by), or a ratio's base reaches zero.
//!
//! With 3 iterations a side, "every sample of one above every sample of
//! the other" is the one-sided rank test (Mann-Whitney U = 0) at
//! p = 1/20: chance alone orders them so one time in twenty.
//!
//! A percentile (p50 to p99.99) is judged differently: over every round
//! trip of every iteration (their histograms merged), its band is its
//! distribution-free confidence interval from the order statistics
//! ([`vnio_measure::interval`]): 95% for a verdict on one point; for a
//! difference or ratio each side's interval is taken at 97.5%, so the
//! combined band covers the true difference or ratio with probability at
//! least 95% (Bonferroni). *Inconclusive* then means that interval
//! straddles `than`, or that a side had too few samples for one.

use serde::{Deserialize, Serialize};

use super::spec::{Expect, Quantity};

/// Where a side's samples come from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SampleSource {
    /// One per iteration.
    Iterations,
    /// One per second of measurement (a single iteration ran).
    Seconds,
    /// One value only: no spread.
    Single,
    /// A percentile over every round trip of every iteration, with its
    /// confidence interval from the order statistics
    /// ([`vnio_measure::interval`]).
    OrderStatistics,
    /// The mean over every round trip of every iteration, with its normal
    /// interval ([`vnio_measure::moments::mean`]).
    MeanInterval,
    /// A share of round trips (over 1 or 5 ms) over every round trip of
    /// every iteration, with its Wilson interval
    /// ([`vnio_measure::moments::wilson`]).
    ShareInterval,
}

impl SampleSource {
    /// Whether the band is a confidence interval over all round trips
    /// (not the spread of iterations or seconds).
    pub fn is_interval(self) -> bool {
        matches!(
            self,
            SampleSource::OrderStatistics
                | SampleSource::MeanInterval
                | SampleSource::ShareInterval
        )
    }

    /// How the interval is made, for the verdict's sentence.
    pub fn method(self) -> &'static str {
        match self {
            SampleSource::MeanInterval => "the mean's normal interval",
            SampleSource::ShareInterval => "Wilson's interval of the share",
            _ => "order statistics",
        }
    }
}

/// A statistic's confidence intervals over all of a point's samples (a
/// percentile's from the order statistics, a mean's or a share's): at
/// 95% for a verdict on one point, at 97.5% for a side of a comparison (two
/// sides at 97.5% each bound their difference or ratio at 95% or more, by
/// Bonferroni's inequality). None where the samples were too few.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderStat {
    /// Round trips the percentile is taken over.
    pub count: u64,
    /// The 95% interval, in the statistic's unit.
    pub ci95: Option<Band>,
    /// The 97.5% interval.
    pub ci975: Option<Band>,
}

/// The samples of one side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// The reported value (the median iteration's).
    pub value: f64,
    /// Every sample, the reported value's iteration among them.
    pub values: Vec<f64>,
    /// Where they come from.
    pub source: SampleSource,
    /// Iteration k ran in the same repetition as iteration k of every
    /// other point (an interleaved run): a quotient or difference is then
    /// taken pair by pair.
    #[serde(skip)]
    pub in_step: bool,
    /// For a percentile: its intervals over all samples, which the
    /// verdict then rests on instead of the iterations' spread.
    #[serde(skip)]
    pub order: Option<OrderStat>,
}

impl Samples {
    /// Samples with their source inferred from their count.
    pub fn new(value: f64, values: Vec<f64>, source: SampleSource) -> Samples {
        let source = if values.len() < 2 {
            SampleSource::Single
        } else {
            source
        };
        Samples {
            value,
            values,
            source,
            in_step: false,
            order: None,
        }
    }

    /// A percentile over all samples with its intervals.
    pub fn percentile(value: f64, order: OrderStat) -> Samples {
        Samples::over_all(value, order, SampleSource::OrderStatistics)
    }

    /// A statistic over all samples with its intervals, made as `source` says.
    pub fn over_all(value: f64, order: OrderStat, source: SampleSource) -> Samples {
        Samples {
            value,
            values: vec![value],
            source,
            in_step: false,
            order: Some(order),
        }
    }

    /// The 95% interval of a percentile (see [`OrderStat`]), or the
    /// smallest interval holding every sample and the value.
    pub fn band(&self) -> Band {
        if let Some(b) = self.order.as_ref().and_then(|o| o.ci95) {
            return b;
        }
        self.spread()
    }

    /// The smallest interval holding every sample and the value.
    fn spread(&self) -> Band {
        let all = self.values.iter().copied().chain([self.value]);
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        Band { lo, hi }
    }

    /// True when there is a spread to judge by (two samples or more).
    pub fn has_spread(&self) -> bool {
        self.source != SampleSource::Single
    }
}

/// A closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
}

/// What the rule decided.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The run agrees with the study beyond its spread.
    Reproduced,
    /// The run disagrees with the study beyond its spread.
    NotReproduced,
    /// The run cannot tell.
    Inconclusive,
}

impl Outcome {
    /// The word shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Reproduced => "reproduced",
            Outcome::NotReproduced => "not reproduced",
            Outcome::Inconclusive => "inconclusive",
        }
    }
}

/// Why the rule decided so (turned into a sentence by the caller, who
/// knows the names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reason {
    /// The whole band is on the expected side.
    Beyond,
    /// The whole band is on the other side.
    Opposite,
    /// The band straddles the threshold.
    Straddles,
    /// This side ("subject" or "against") has one sample.
    NoSpread(&'static str),
    /// A ratio's base band reaches zero.
    ZeroBase,
    /// This side's percentile has too few samples for a two-sided interval.
    TooFew(&'static str),
}

/// The decision with the numbers behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// The verdict.
    pub outcome: Outcome,
    /// Why.
    pub reason: Reason,
    /// The quantity from the reported values.
    pub value: f64,
    /// Its band, when it has one.
    pub band: Option<Band>,
}

/// A side's band for `q`: a percentile's interval (95% alone, 97.5% in a
/// comparison), or the spread of its samples.
fn side_band(s: &Samples, compared: bool, side: &'static str) -> Result<Band, Reason> {
    match &s.order {
        Some(o) => if compared { o.ci975 } else { o.ci95 }.ok_or(Reason::TooFew(side)),
        None => Ok(s.spread()),
    }
}

/// The quantity from the reported values, and its band.
fn combine(q: Quantity, s: &Samples, a: Option<&Samples>) -> Result<(f64, Band), Reason> {
    let compared = a.is_some() && q != Quantity::Value;
    let bs = side_band(s, compared, "subject")?;
    match (q, a) {
        (Quantity::Value, _) | (_, None) => Ok((s.value, bs)),
        (Quantity::Difference, Some(a)) => {
            let ba = side_band(a, true, "against")?;
            Ok((
                paired(s, a, |x, y| x - y).unwrap_or(s.value - a.value),
                Band {
                    lo: bs.lo - ba.hi,
                    hi: bs.hi - ba.lo,
                },
            ))
        }
        (Quantity::Ratio, Some(a)) => {
            let ba = side_band(a, true, "against")?;
            if ba.lo <= 0.0 || bs.lo < 0.0 {
                return Err(Reason::ZeroBase);
            }
            Ok((
                paired(s, a, |x, y| x / y).unwrap_or(s.value / a.value),
                Band {
                    lo: bs.lo / ba.hi,
                    hi: bs.hi / ba.lo,
                },
            ))
        }
    }
}

/// The median of `op` over the sides' iterations pair by pair, when they
/// ran in step (see [`Samples::in_step`]): whatever a repetition's host did
/// to both (which cores it gave the CPUs, its load) drops out of each
/// pair, as the anchor harness's paired ratios have it. None otherwise.
fn paired(s: &Samples, a: &Samples, op: impl Fn(f64, f64) -> f64) -> Option<f64> {
    let in_step = |x: &Samples| x.in_step && x.source == SampleSource::Iterations;
    if !in_step(s) || !in_step(a) || s.values.len() != a.values.len() {
        return None;
    }
    let mut v: Vec<f64> = s
        .values
        .iter()
        .zip(&a.values)
        .map(|(x, y)| op(*x, *y))
        .collect();
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    vnio_measure::stats::median(&mut v)
}

/// Judge `quantity` of `subject` (and `against`) against `than`.
pub fn decide(
    quantity: Quantity,
    expect: Expect,
    than: f64,
    subject: &Samples,
    against: Option<&Samples>,
) -> Decision {
    let inconclusive = |reason, value, band| Decision {
        outcome: Outcome::Inconclusive,
        reason,
        value,
        band,
    };
    let (value, band) = match combine(quantity, subject, against) {
        Ok(vb) => vb,
        Err(Reason::TooFew(side)) => {
            let value = match (quantity, against) {
                (Quantity::Difference, Some(a)) => subject.value - a.value,
                (Quantity::Ratio, Some(a)) => subject.value / a.value,
                _ => subject.value,
            };
            return inconclusive(Reason::TooFew(side), value, None);
        }
        Err(reason) => return inconclusive(reason, f64::NAN, None),
    };
    if !subject.has_spread() {
        return inconclusive(Reason::NoSpread("subject"), value, None);
    }
    if against.is_some_and(|a| !a.has_spread()) {
        return inconclusive(Reason::NoSpread("against"), value, None);
    }
    let (beyond, opposite) = match expect {
        Expect::Above => (band.lo > than, band.hi <= than),
        Expect::Below => (band.hi < than, band.lo >= than),
    };
    let (outcome, reason) = if beyond {
        (Outcome::Reproduced, Reason::Beyond)
    } else if opposite {
        (Outcome::NotReproduced, Reason::Opposite)
    } else {
        (Outcome::Inconclusive, Reason::Straddles)
    };
    Decision {
        outcome,
        reason,
        value,
        band: Some(band),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(values: &[f64]) -> Samples {
        Samples::new(
            values[values.len() / 2],
            values.to_vec(),
            SampleSource::Iterations,
        )
    }

    #[test]
    fn separated_spreads_in_the_claimed_direction_reproduce() {
        let d = decide(
            Quantity::Difference,
            Expect::Above,
            0.0,
            &s(&[60.0, 62.0, 66.0]),
            Some(&s(&[40.0, 43.0, 45.0])),
        );
        assert_eq!(d.outcome, Outcome::Reproduced);
        assert_eq!(d.value, 62.0 - 43.0);
        assert_eq!(d.band, Some(Band { lo: 15.0, hi: 26.0 }));
    }

    #[test]
    fn separated_spreads_the_other_way_do_not() {
        let d = decide(
            Quantity::Difference,
            Expect::Above,
            0.0,
            &s(&[40.0, 43.0, 45.0]),
            Some(&s(&[60.0, 62.0, 66.0])),
        );
        assert_eq!(d.outcome, Outcome::NotReproduced);
        assert_eq!(d.reason, Reason::Opposite);
    }

    #[test]
    fn overlapping_spreads_are_inconclusive_even_when_the_values_differ() {
        // The reported values differ by 5 in the claimed direction, but the
        // spreads overlap: one number against another is not a finding.
        let d = decide(
            Quantity::Difference,
            Expect::Above,
            0.0,
            &s(&[40.0, 50.0, 58.0]),
            Some(&s(&[42.0, 45.0, 55.0])),
        );
        assert_eq!(d.outcome, Outcome::Inconclusive);
        assert_eq!(d.reason, Reason::Straddles);
        assert!(d.value > 0.0);
    }

    #[test]
    fn a_single_sample_has_no_spread() {
        let one = Samples::new(100.0, vec![100.0], SampleSource::Iterations);
        assert_eq!(one.source, SampleSource::Single);
        let d = decide(
            Quantity::Difference,
            Expect::Above,
            0.0,
            &one,
            Some(&s(&[1.0, 2.0, 3.0])),
        );
        assert_eq!(d.outcome, Outcome::Inconclusive);
        assert_eq!(d.reason, Reason::NoSpread("subject"));
        let d = decide(Quantity::Value, Expect::Below, 2.0, &s(&[1.0, 1.1]), None);
        assert_eq!(d.outcome, Outcome::Reproduced);
        let d = decide(
            Quantity::Ratio,
            Expect::Below,
            1.0,
            &s(&[1.0, 1.1]),
            Some(&one),
        );
        assert_eq!(d.reason, Reason::NoSpread("against"));
    }

    #[test]
    fn bounds_on_a_value() {
        // p99/mean within 2x: all samples below, all above, straddling.
        let rule = |v: &[f64]| decide(Quantity::Value, Expect::Below, 2.0, &s(v), None).outcome;
        assert_eq!(rule(&[1.4, 1.5, 1.9]), Outcome::Reproduced);
        assert_eq!(rule(&[2.0, 2.5, 3.0]), Outcome::NotReproduced);
        assert_eq!(rule(&[1.5, 1.8, 2.4]), Outcome::Inconclusive);
        // Zero spikes in every iteration are below any positive bound.
        let zero = decide(
            Quantity::Value,
            Expect::Below,
            0.001,
            &s(&[0.0, 0.0, 0.0]),
            None,
        );
        assert_eq!(zero.outcome, Outcome::Reproduced);
    }

    #[test]
    fn a_bound_on_a_difference() {
        // "+100 us at most": 30-60 us more is within; 150-400 is beyond;
        // 50-180 cannot tell.
        let rule = |sub: &[f64], base: &[f64]| {
            decide(
                Quantity::Difference,
                Expect::Below,
                100.0,
                &s(sub),
                Some(&s(base)),
            )
            .outcome
        };
        assert_eq!(
            rule(&[80.0, 90.0, 100.0], &[40.0, 45.0, 50.0]),
            Outcome::Reproduced
        );
        assert_eq!(
            rule(&[200.0, 300.0, 450.0], &[40.0, 45.0, 50.0]),
            Outcome::NotReproduced
        );
        assert_eq!(
            rule(&[100.0, 150.0, 220.0], &[40.0, 45.0, 50.0]),
            Outcome::Inconclusive
        );
    }

    #[test]
    fn in_step_sides_give_the_median_of_paired_quotients() {
        // The host slowed both sides in the second repetition: the ratio of
        // the median iterations (40 / 45) mixes repetitions, the paired
        // quotients (0.8, 0.8, 0.8) do not.
        let step = |v: &[f64], value: f64| Samples {
            in_step: true,
            ..Samples::new(value, v.to_vec(), SampleSource::Iterations)
        };
        let (subject, against) = (
            step(&[40.0, 20.0, 44.0], 40.0),
            step(&[50.0, 25.0, 55.0], 50.0),
        );
        let d = decide(
            Quantity::Ratio,
            Expect::Below,
            1.0,
            &subject,
            Some(&against),
        );
        assert!((d.value - 0.8).abs() < 1e-12, "{}", d.value);
        // The band stays the sides' extremes.
        let b = d.band.unwrap();
        assert!((b.lo - 20.0 / 55.0).abs() < 1e-12 && (b.hi - 44.0 / 25.0).abs() < 1e-12);
        let d = decide(
            Quantity::Difference,
            Expect::Below,
            0.0,
            &subject,
            Some(&against),
        );
        assert!((d.value - -10.0).abs() < 1e-12, "{}", d.value);
        // Not in step, or of other lengths: the reported values' quotient.
        let loose = Samples::new(40.0, vec![40.0, 20.0, 44.0], SampleSource::Iterations);
        let d = decide(Quantity::Ratio, Expect::Below, 1.0, &loose, Some(&against));
        assert!((d.value - 40.0 / 50.0).abs() < 1e-12);
        let short = step(&[50.0, 25.0], 50.0);
        let d = decide(Quantity::Ratio, Expect::Below, 1.0, &subject, Some(&short));
        assert!((d.value - 40.0 / 50.0).abs() < 1e-12);
    }

    #[test]
    fn ratios_use_the_extreme_quotients() {
        let d = decide(
            Quantity::Ratio,
            Expect::Below,
            1.0,
            &s(&[30.0, 32.0, 35.0]),
            Some(&s(&[45.0, 47.0, 50.0])),
        );
        assert_eq!(d.outcome, Outcome::Reproduced);
        let b = d.band.unwrap();
        assert!((b.lo - 30.0 / 50.0).abs() < 1e-12 && (b.hi - 35.0 / 45.0).abs() < 1e-12);
        // The spreads overlap: the ratio's band straddles 1.
        let d = decide(
            Quantity::Ratio,
            Expect::Below,
            1.0,
            &s(&[30.0, 40.0, 48.0]),
            Some(&s(&[45.0, 47.0, 50.0])),
        );
        assert_eq!(d.outcome, Outcome::Inconclusive);
        // A base that reaches zero gives no ratio.
        let d = decide(
            Quantity::Ratio,
            Expect::Above,
            1.0,
            &s(&[3.0, 4.0]),
            Some(&s(&[0.0, 1.0])),
        );
        assert_eq!(d.reason, Reason::ZeroBase);
        assert_eq!(d.outcome, Outcome::Inconclusive);
    }

    fn pct(value: f64, ci95: Option<(f64, f64)>, ci975: Option<(f64, f64)>) -> Samples {
        let band = |b: Option<(f64, f64)>| b.map(|(lo, hi)| Band { lo, hi });
        Samples::percentile(
            value,
            OrderStat {
                count: 100_000,
                ci95: band(ci95),
                ci975: band(ci975),
            },
        )
    }

    #[test]
    fn percentiles_are_judged_on_their_intervals() {
        // One point: its 95% interval against the threshold.
        let p99 = pct(50.0, Some((48.0, 52.0)), Some((47.0, 53.0)));
        let d = decide(Quantity::Value, Expect::Below, 55.0, &p99, None);
        assert_eq!(
            (d.outcome, d.band),
            (Outcome::Reproduced, Some(Band { lo: 48.0, hi: 52.0 }))
        );
        let d = decide(Quantity::Value, Expect::Below, 51.0, &p99, None);
        assert_eq!(
            (d.outcome, d.reason),
            (Outcome::Inconclusive, Reason::Straddles)
        );
        // Two points: the 97.5% intervals combined.
        let base = pct(40.0, Some((39.0, 41.0)), Some((38.5, 41.5)));
        let d = decide(Quantity::Difference, Expect::Above, 0.0, &p99, Some(&base));
        assert_eq!(
            d.band,
            Some(Band {
                lo: 47.0 - 41.5,
                hi: 53.0 - 38.5
            })
        );
        assert_eq!((d.outcome, d.value), (Outcome::Reproduced, 10.0));
        let d = decide(Quantity::Difference, Expect::Above, 6.0, &p99, Some(&base));
        assert_eq!(d.outcome, Outcome::Inconclusive);
        let d = decide(Quantity::Ratio, Expect::Above, 1.0, &p99, Some(&base));
        assert_eq!(
            d.band,
            Some(Band {
                lo: 47.0 / 41.5,
                hi: 53.0 / 38.5
            })
        );
        // Too few samples for an interval: inconclusive, and says which side.
        let few = pct(40.0, None, None);
        let d = decide(Quantity::Difference, Expect::Above, 0.0, &p99, Some(&few));
        assert_eq!(
            (d.outcome, d.reason),
            (Outcome::Inconclusive, Reason::TooFew("against"))
        );
        assert_eq!(d.value, 10.0);
        let d = decide(Quantity::Value, Expect::Below, 1.0, &few, None);
        assert_eq!(d.reason, Reason::TooFew("subject"));
    }

    #[test]
    fn the_reported_value_widens_the_band() {
        // Per-second samples may not hold the whole iteration's value.
        let side = Samples::new(10.0, vec![4.0, 5.0], SampleSource::Seconds);
        assert_eq!(side.band(), Band { lo: 4.0, hi: 10.0 });
    }
}
