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
//!
//! Beside each side's seconds at a placement, the median busy share of
//! vnio's switch in them, where the pair read its workers' counters
//! (`switch_seconds`): near 1, the switch's own time per frame set that
//! side's rate; well below, its endpoints did.

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
    /// The median busy share of vnio's switch over the subject's seconds
    /// at this placement that have one; none on other switches, and
    /// where its counters were not read.
    #[serde(default)]
    pub subject_busy: Option<f64>,
    /// The against point's.
    #[serde(default)]
    pub against_busy: Option<f64>,
}

/// One side's seconds at one placement: the statistic's values, and the
/// switch's busy shares of those that have one.
#[derive(Default)]
struct Placed {
    values: Vec<f64>,
    busy: Vec<f64>,
}

/// Where a placement's seconds go in a pair of lists.
fn slot(p: Placement) -> usize {
    match p {
        Placement::Near => 0,
        Placement::Far => 1,
    }
}

/// The statistic of every whole second of point `o` that the probe
/// placed (with the switch's busy share in it, where read), near first;
/// none when no iteration of it carries the probe or the statistic has no
/// per-second value.
fn seconds_by_placement(o: &PointOutcome, stat: Statistic) -> Option<[Placed; 2]> {
    let doc = o.document.as_ref()?;
    let mut by = [Placed::default(), Placed::default()];
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
            let at = &mut by[slot(at)];
            at.values.push(v);
            let busy = it
                .switch_seconds
                .as_ref()
                .and_then(|s| s.get(p.t_s as usize));
            if let Some(Some(second)) = busy {
                at.busy.push(second.busy);
            }
        }
    }
    probed.then_some(by)
}

/// How many whole seconds of point `o` the probe placed, near then far;
/// none when no iteration of it carries the probe.
pub fn seconds_placed(o: &PointOutcome) -> Option<[usize; 2]> {
    seconds_by_placement(o, Statistic::Rate).map(|by| by.map(|p| p.values.len()))
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
            let (sp, ap) = (&mut s[slot(at)], &mut a[slot(at)]);
            let (sm, am) = (median(&mut sp.values), median(&mut ap.values));
            PlacementRatio {
                placement: at,
                ratio: sm.zip(am).filter(|(_, a)| *a > 0.0).map(|(s, a)| s / a),
                subject_median: sm,
                against_median: am,
                subject_seconds: sp.values.len(),
                against_seconds: ap.values.len(),
                subject_busy: median(&mut sp.busy),
                against_busy: median(&mut ap.busy),
            }
        })
        .collect()
}
