//! Whether a percentile changed between two runs' points, at 95%: the
//! ratio B / A of the percentile over all of each point's round trips,
//! with the band from each side's 97.5% order-statistic interval (the
//! rule of [`super::rule`]: together at least 95%, by Bonferroni). A
//! band wholly above 1 is a significant slowdown, wholly below a
//! significant speed-up; a band that holds 1 is no significant change.

use super::rule::{self, Band, Outcome, Reason};
use super::samples;
use super::spec::{Expect, Quantity, Statistic};
use crate::outcome::PointOutcome;

/// The verdict on one percentile of one pair of points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// B is slower than A beyond the interval.
    Slower,
    /// B is faster than A beyond the interval.
    Faster,
    /// The interval of B / A holds 1.
    NoChange,
    /// A side had too few round trips for an interval.
    TooFew,
}

/// B against A at one percentile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// B / A of the percentiles over all round trips.
    pub ratio: f64,
    /// Its 95% band (none: too few samples).
    pub band: Option<Band>,
    /// What that says.
    pub verdict: Verdict,
}

impl Change {
    /// "+12% [+8% to +16%] slower, significant at 95%".
    pub fn words(&self) -> String {
        let pct = |r: f64| format!("{:+.1}%", 100.0 * (r - 1.0));
        let band = self
            .band
            .map(|b| format!(" [{} to {}]", pct(b.lo), pct(b.hi)))
            .unwrap_or_default();
        let what = match self.verdict {
            Verdict::Slower => "slower, significant at 95%",
            Verdict::Faster => "faster, significant at 95%",
            Verdict::NoChange => "no significant change",
            Verdict::TooFew => "too few samples to tell",
        };
        format!("{}{band} {what}", pct(self.ratio))
    }
}

/// B against A at percentile `stat` (p50 to p99.99); none when either
/// point has no latency histogram.
pub fn of_points(a: &PointOutcome, b: &PointOutcome, stat: Statistic) -> Option<Change> {
    let sa = samples::of_point(a, stat)
        .ok()
        .filter(|s| s.order.is_some())?;
    let sb = samples::of_point(b, stat)
        .ok()
        .filter(|s| s.order.is_some())?;
    let d = rule::decide(Quantity::Ratio, Expect::Above, 1.0, &sb, Some(&sa));
    let verdict = match (d.outcome, d.reason) {
        (Outcome::Reproduced, _) => Verdict::Slower,
        (Outcome::NotReproduced, _) if d.band.is_some_and(|b| b.hi < 1.0) => Verdict::Faster,
        (_, Reason::TooFew(_)) => Verdict::TooFew,
        _ => Verdict::NoChange,
    };
    Some(Change {
        ratio: d.value,
        band: d.band,
        verdict,
    })
}
