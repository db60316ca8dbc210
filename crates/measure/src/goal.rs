//! Runs that last until a percentile is known (`--ci PCT:WIDTH`): the
//! measurement is repeated in rounds of the run's duration, and after each
//! round the percentile's confidence interval over every round so far (the
//! histograms merged) is compared with the goal: the interval must lie
//! within WIDTH of the estimate on both sides. The run stops when it does,
//! or when another round would take the measured time past
//! `--max-duration`; the result says which.
//!
//! Rounds rather than one stretched window keep the sessions' hot loop
//! untouched: the check reads the histograms after each round.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::interval::{Ci, DEFAULT_CONFIDENCE};
use crate::result::Document;

/// What `--ci` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CiGoal {
    /// The percentile, e.g. 99.0 or 99.9.
    pub percentile: f64,
    /// Largest half-width relative to the estimate, e.g. 0.05 for ±5%.
    pub width: f64,
    /// Measured time after which the run ends whether or not the goal is met.
    #[serde(with = "secs")]
    pub max_duration: Duration,
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs_f64(f64::deserialize(d)?))
    }
}

/// How a run with a goal ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalOutcome {
    pub percentile: f64,
    pub width: f64,
    /// Whether the interval came within the width.
    pub met: bool,
    /// "met", "not met at max duration", "interrupted" or "failed".
    pub verdict: String,
    /// Rounds measured and their measured seconds in all.
    pub rounds: usize,
    pub seconds: f64,
    /// The percentile over all rounds and its interval.
    pub estimate_ns: u64,
    pub ci: Ci,
    /// The interval's half-width relative to the estimate (none: too few
    /// samples for an interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_half_width: Option<f64>,
}

impl CiGoal {
    /// Parses "99:5%" (percentile 99, within ±5%) or "99.9:0.02".
    pub fn parse(s: &str, max_duration: Duration) -> Result<CiGoal, String> {
        let bad = || format!("--ci {s:?}: expected PERCENTILE:WIDTH, e.g. 99:5% (p99 within ±5%)");
        let (p, w) = s.split_once(':').ok_or_else(bad)?;
        let percentile: f64 = p
            .trim()
            .trim_start_matches('p')
            .parse()
            .map_err(|_| bad())?;
        let w = w.trim();
        let width = match w.strip_suffix('%') {
            Some(pct) => pct.trim().parse::<f64>().map_err(|_| bad())? / 100.0,
            None => w.parse::<f64>().map_err(|_| bad())?,
        };
        if !(percentile > 0.0 && percentile < 100.0) {
            return Err(format!(
                "--ci {s:?}: the percentile must be between 0 and 100"
            ));
        }
        if !(width > 0.0 && width < 1.0) {
            return Err(format!("--ci {s:?}: the width must be between 0% and 100%"));
        }
        if max_duration.is_zero() {
            return Err("--max-duration must be more than 0".into());
        }
        Ok(CiGoal {
            percentile,
            width,
            max_duration,
        })
    }

    /// The goal judged over every iteration (round) of `doc`.
    pub fn judge(&self, doc: &Document) -> GoalOutcome {
        let q = self.percentile / 100.0;
        let seconds: f64 = doc.iterations.iter().map(|i| i.seconds).sum();
        let all = doc.merged_latency().unwrap_or_default();
        let estimate_ns = if all.count() > 0 { all.quantile(q) } else { 0 };
        let ci = all.interval(q, DEFAULT_CONFIDENCE);
        let relative_half_width = ci.relative_half_width(estimate_ns);
        let met = relative_half_width.is_some_and(|w| w <= self.width);
        GoalOutcome {
            percentile: self.percentile,
            width: self.width,
            met,
            verdict: if met {
                "met"
            } else {
                "not met at max duration"
            }
            .into(),
            rounds: doc.iterations.len(),
            seconds,
            estimate_ns,
            ci,
            relative_half_width,
        }
    }

    /// Whether to measure another round of `round` after `doc`'s: the goal
    /// is not met and the round fits in what is left of the max duration.
    pub fn another_round(&self, doc: &Document, round: Duration) -> bool {
        let o = self.judge(doc);
        !o.met && o.seconds + round.as_secs_f64() <= self.max_duration.as_secs_f64() + 1e-9
    }

    /// The outcome to record once the run ended.
    pub fn conclude(&self, doc: &mut Document) {
        let mut o = self.judge(doc);
        if !o.met && doc.interrupted {
            o.verdict = "interrupted".into();
        } else if !o.met && !doc.errors.is_empty() {
            o.verdict = "failed".into();
        }
        doc.ci_goal = Some(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{Iteration, Measured};
    use crate::stats::Latency;

    #[test]
    fn parses_percent_and_fraction() {
        let d = Duration::from_secs(60);
        let g = CiGoal::parse("99:5%", d).unwrap();
        assert_eq!((g.percentile, g.width), (99.0, 0.05));
        let g = CiGoal::parse("p99.9:0.02", d).unwrap();
        assert_eq!((g.percentile, g.width), (99.9, 0.02));
        for bad in ["99", "x:5%", "99:x", "100:5%", "99:0%", "99:150%"] {
            assert!(CiGoal::parse(bad, d).is_err(), "{bad}");
        }
        assert!(CiGoal::parse("99:5%", Duration::ZERO).is_err());
    }

    fn round(seed: u64, n: u64) -> Iteration {
        let mut l = Latency::new();
        for i in 0..n {
            // 10-20 us, a spread that needs a few thousand samples for p99.
            l.record(10_000 + (i * 7919 + seed * 104_729) % 10_000);
        }
        let mut m = Measured::default();
        m.finish(Some(&l), 1.0);
        Iteration {
            seconds: 1.0,
            merged: m,
            ..Default::default()
        }
    }

    #[test]
    fn rounds_continue_until_the_interval_is_narrow_or_time_is_up() {
        let goal = CiGoal::parse("99:0.5%", Duration::from_secs(5)).unwrap();
        let mut doc = Document::default();
        doc.iterations.push(round(1, 500));
        let first = goal.judge(&doc);
        assert!(!first.met && first.relative_half_width.unwrap() > 0.005);
        assert!(goal.another_round(&doc, Duration::from_secs(1)));
        // Rounds add samples: the interval narrows until it is within 0.5%.
        let mut n = 1;
        while goal.another_round(&doc, Duration::from_secs(1)) {
            n += 1;
            doc.iterations.push(round(n, 20_000));
        }
        goal.conclude(&mut doc);
        let o = doc.ci_goal.clone().unwrap();
        assert!(o.met, "{o:?}");
        assert_eq!(o.verdict, "met");
        assert!(o.rounds < 5);
        let (lo, hi) = o.ci.bounds().unwrap();
        assert!(lo <= o.estimate_ns && o.estimate_ns <= hi);
        // An unreachable goal ends at the max duration and says so.
        let goal = CiGoal::parse("99:0.001%", Duration::from_secs(3)).unwrap();
        let mut doc = Document::default();
        while goal.another_round(&doc, Duration::from_secs(1)) {
            doc.iterations
                .push(round(doc.iterations.len() as u64, 1000));
        }
        goal.conclude(&mut doc);
        let o = doc.ci_goal.unwrap();
        assert_eq!(
            (o.met, o.rounds, o.verdict.as_str()),
            (false, 3, "not met at max duration")
        );
    }
}
