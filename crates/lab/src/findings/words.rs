//! Verdicts in words: numbers with their units, the study's and this
//! run's numbers, and the one sentence that says why.

use super::rule::{Reason, SampleSource};
use super::{Expect, Quantity, Verdict};

/// A number in the verdict's unit.
pub fn number(v: f64, unit: &str, signed: bool) -> String {
    let sign = if signed && v > 0.0 { "+" } else { "" };
    match unit {
        "x" => format!("{v:.2}x"),
        "%" => format!("{sign}{v:.3} %"),
        "/s" => format!("{sign}{v:.0}/s"),
        "Gbit/s" => format!("{sign}{v:.2} Gbit/s"),
        u if v.abs() >= 100.0 => format!("{sign}{v:.0} {u}"),
        u => format!("{sign}{v:.1} {u}"),
    }
}

/// The study's number(s) in words.
pub fn reference(v: &Verdict) -> String {
    let signed = v.quantity == Quantity::Difference;
    match v.reference.as_slice() {
        [] => "—".into(),
        [x] => number(*x, &v.unit, signed),
        [a, b, ..] => format!(
            "{} to {}",
            number(*a, &v.unit, signed),
            number(*b, &v.unit, signed)
        ),
    }
}

/// This run's quantity with its band, in words.
pub fn measured(v: &Verdict) -> String {
    let signed = v.quantity == Quantity::Difference;
    match (v.value, v.band) {
        (Some(x), Some(b)) => format!(
            "{} [{} to {}]",
            number(x, &v.unit, signed),
            number(b.lo, &v.unit, signed),
            number(b.hi, &v.unit, signed)
        ),
        (Some(x), None) if v.subject.source.is_some_and(SampleSource::is_interval) => {
            format!(
                "{} (too few samples for an interval)",
                number(x, &v.unit, signed)
            )
        }
        (Some(x), None) => format!("{} (no spread)", number(x, &v.unit, signed)),
        _ => "—".into(),
    }
}

/// The ratio at each placement, when the points carry the line probe's
/// round trips, with vnio's switch's busy share on a side that has it:
/// "near 0.93x (vnio 12 s busy 0.97, ovs-dpdk 14 s); far no seconds
/// (vnio 0 s, ovs-dpdk 3 s)".
pub fn by_placement(v: &Verdict) -> Option<String> {
    if v.by_placement.is_empty() {
        return None;
    }
    let against = v.against.as_ref().map_or("against", |a| a.point.as_str());
    let parts: Vec<String> = v
        .by_placement
        .iter()
        .map(|r| {
            let ratio = match r.ratio {
                Some(x) => number(x, "x", false),
                None if r.subject_seconds == 0 || r.against_seconds == 0 => "no seconds".into(),
                None => "no ratio (its base is 0)".into(),
            };
            let busy = |b: Option<f64>| b.map_or(String::new(), |b| format!(" busy {b:.2}"));
            format!(
                "{} {ratio} ({} {} s{}, {against} {} s{})",
                r.placement.as_str(),
                v.subject.point,
                r.subject_seconds,
                busy(r.subject_busy),
                r.against_seconds,
                busy(r.against_busy)
            )
        })
        .collect();
    Some(parts.join("; "))
}

/// What the quantity is: "switch − native p50".
fn what(v: &Verdict) -> String {
    let stat = v.statistic.as_str();
    match (&v.quantity, &v.against) {
        (Quantity::Difference, Some(a)) => format!("{} − {} {stat}", v.subject.point, a.point),
        (Quantity::Ratio, Some(a)) => format!("{} / {} {stat}", v.subject.point, a.point),
        _ => format!("{} {stat}", v.subject.point),
    }
}

pub(super) fn because(v: &Verdict, reason: Reason) -> String {
    let than = number(v.than, &v.unit, false);
    // What the band is: a percentile's confidence interval, or the spread
    // of the iterations (or seconds).
    let basis = match (v.subject.source, v.quantity, &v.against) {
        (Some(src), Quantity::Value, _) | (Some(src), _, None) if src.is_interval() => format!(
            "its 95% confidence interval ({} of {} samples)",
            src.method(),
            v.subject.samples
        ),
        (Some(src), _, Some(_)) if src.is_interval() => format!(
            "its 95% confidence interval (each side's 97.5% interval, {})",
            src.method()
        ),
        _ => "its spread".to_owned(),
    };
    let side = |s: &str| {
        if s == "subject" {
            v.subject.point.clone()
        } else {
            v.against
                .as_ref()
                .map(|a| a.point.clone())
                .unwrap_or_default()
        }
    };
    match reason {
        Reason::Beyond => format!(
            "{} is {}: all of {basis} is {} {than}, as the study says",
            what(v),
            measured(v),
            v.expect.as_str()
        ),
        Reason::Opposite => format!(
            "{} is {}: all of {basis} is {} {than}, against the study",
            what(v),
            measured(v),
            match v.expect {
                Expect::Above => "at or below",
                Expect::Below => "at or above",
            }
        ),
        Reason::Straddles => format!(
            "{} is {}: {basis} straddles {than}, the run cannot tell",
            what(v),
            measured(v)
        ),
        Reason::NoSpread(s) => format!(
            "{} has a single sample (one iteration, under 2 s of per-second data): no spread to judge by; run with --iterations 3",
            side(s)
        ),
        Reason::ZeroBase => format!(
            "{} reaches 0: no ratio to judge",
            side("against")
        ),
        Reason::TooFew(s) => format!(
            "{} has too few round trips for a two-sided confidence interval at {}: run longer, or with --ci",
            side(s),
            v.statistic.as_str()
        ),
    }
}
