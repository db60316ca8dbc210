//! Ratios per placement: where the points of a ratio carry the line
//! probe's round trips (knob `placement_probe`), the ratio at each
//! placement the host gave the switch's and the client's CPUs, beside the
//! verdict (which stays the rule's, over every iteration).
//!
//! Each whole second of either point is classified near or far by the
//! probe's median round trip in that second
//! ([`vnio_measure::placement::Placement::of`]); seconds without one are
//! left out. At each placement the ratio is the median of the subject's
//! seconds over the median of the against point's seconds, with how many
//! seconds each side had: two runs that saw different mixes of placements
//! can then be compared at one. A side without a second at a placement
//! gives no ratio there ("no seconds"), never a number from the other.

use serde::{Deserialize, Serialize};
use vnio_measure::placement::Placement;
use vnio_measure::stats::median;

use super::samples::{of_second, whole_seconds};
use super::spec::Statistic;
use crate::outcome::PointOutcome;

/// The ratio at one placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementRatio {
    /// Near or far.
    pub placement: Placement,
    /// The subject's median second over the against point's; none when a
    /// side has no second at this placement (or the base is 0).
    pub ratio: Option<f64>,
    /// The subject's median second at this placement, in the statistic's
    /// unit.
    pub subject_median: Option<f64>,
    /// The against point's.
    pub against_median: Option<f64>,
    /// The subject's seconds at this placement.
    pub subject_seconds: usize,
    /// The against point's.
    pub against_seconds: usize,
}

/// Where a placement's seconds go in a pair of lists.
fn slot(p: Placement) -> usize {
    match p {
        Placement::Near => 0,
        Placement::Far => 1,
    }
}

/// The statistic of every whole second of point `o` that the probe
/// placed, near first; none when no iteration of it carries the probe or
/// the statistic has no per-second value.
fn seconds_by_placement(o: &PointOutcome, stat: Statistic) -> Option<[Vec<f64>; 2]> {
    let doc = o.document.as_ref()?;
    let mut by = [Vec::new(), Vec::new()];
    let mut probed = false;
    for it in &doc.iterations {
        let Some(line) = &it.line_round_trip else {
            continue;
        };
        probed = true;
        for p in whole_seconds(it) {
            let (Some(v), Some(at)) = (of_second(stat, p), line.placement_at(p.t_s as usize))
            else {
                continue;
            };
            by[slot(at)].push(v);
        }
    }
    probed.then_some(by)
}

/// How many whole seconds of point `o` the probe placed, near then far;
/// none when no iteration of it carries the probe.
pub fn seconds_placed(o: &PointOutcome) -> Option<[usize; 2]> {
    seconds_by_placement(o, Statistic::Rate).map(|by| by.map(|v| v.len()))
}

/// The ratio of `stat` at each placement, subject over against; empty when
/// neither point carries the probe's round trips.
pub fn ratios(
    stat: Statistic,
    subject: &PointOutcome,
    against: &PointOutcome,
) -> Vec<PlacementRatio> {
    let s = seconds_by_placement(subject, stat);
    let a = seconds_by_placement(against, stat);
    if s.is_none() && a.is_none() {
        return Vec::new();
    }
    let [mut s, mut a] = [s.unwrap_or_default(), a.unwrap_or_default()];
    Placement::ALL
        .iter()
        .map(|&at| {
            let (sv, av) = (&mut s[slot(at)], &mut a[slot(at)]);
            let (sm, am) = (median(sv), median(av));
            PlacementRatio {
                placement: at,
                ratio: sm.zip(am).filter(|(_, a)| *a > 0.0).map(|(s, a)| s / a),
                subject_median: sm,
                against_median: am,
                subject_seconds: sv.len(),
                against_seconds: av.len(),
            }
        })
        .collect()
}
