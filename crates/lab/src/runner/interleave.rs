//! Interleaved repetitions (`[run] interleave = true`): the whole plan runs
//! once per iteration, every configuration in turn, instead of each
//! configuration running all its iterations back to back. On a host whose
//! speed moves between plateaus from one minute to the next, side-by-side
//! configurations then share its moods (the anchor harness's "rep
//! outermost" order); each point's iterations are merged into one document
//! and its median chosen as usual.
//!
//! Testbeds are built once per repetition. Outcomes reach the caller's sink
//! once every repetition ran (or the run was stopped), merged.
//!
//! With `placement_seconds` the run goes on past its iterations, a whole
//! repetition at a time, until every point that carries the line probe has
//! that many seconds at each placement any of them reached (or the cap):
//! the host may give the far placement a few seconds in a run, and a
//! ratio from three seconds on one side says little.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use vnio_measure::placement::Placement;

use crate::findings::placement::seconds_placed;
use crate::outcome::merge_documents;
use crate::runner::{
    self, Event, Observer, PointOutcome, RunError, RunSummary, RunnerOptions, Status,
};
use crate::scenario::{Plan, Scenario};

/// Run `plan` with its iterations interleaved across configurations.
pub fn run(
    scenario: &Scenario,
    plan: &Plan,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
    observer: &dyn Observer,
    sink: &mut dyn FnMut(&PointOutcome) -> Result<(), String>,
) -> Result<RunSummary, RunError> {
    let mut once = plan.clone();
    once.run.iterations = 1;
    once.run.interleave = false;
    let mut by_point: BTreeMap<usize, Vec<PointOutcome>> = BTreeMap::new();
    let mut testbeds = Vec::new();
    let cap = plan.run.repetition_cap();
    let want = plan.run.placement_seconds as usize;
    for done in 0..cap {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if done >= plan.run.iterations {
            let Some(short) = shortfall(plan, &by_point, want) else {
                break;
            };
            observer.event(Event::Repeating {
                repetition: done + 1,
                cap,
                points: plan.points.len(),
                why: &short,
            });
        }
        let summary = runner::run(scenario, &once, opts, stop, observer, &mut |o| {
            by_point.entry(o.point.seq).or_default().push(o.clone());
            Ok(())
        })?;
        if testbeds.is_empty() {
            testbeds = summary.testbeds;
        }
    }
    if cap > plan.run.iterations && !stop.load(Ordering::Relaxed) {
        if let Some(short) = shortfall(plan, &by_point, want) {
            observer.event(Event::Note(&format!(
                "stopped at the cap of {cap} repetitions, short of placement seconds: {short}"
            )));
        }
    }
    let mut summary = RunSummary {
        testbeds,
        stopped: stop.load(Ordering::Relaxed),
        ..Default::default()
    };
    for outcomes in by_point.into_values() {
        let o = merge(outcomes);
        match o.status {
            Status::Ok => summary.ok += 1,
            Status::Interrupted => summary.interrupted += 1,
            Status::Failed => summary.failed += 1,
            Status::Skipped => summary.skipped += 1,
        }
        sink(&o).map_err(RunError::Sink)?;
    }
    Ok(summary)
}

/// What keeps the run going, in words ("far: vnio rate-64 has 3 of 10
/// seconds"), or None when every probed point has `want` seconds at each
/// placement reached.
fn shortfall(
    plan: &Plan,
    by_point: &BTreeMap<usize, Vec<PointOutcome>>,
    want: usize,
) -> Option<String> {
    let placed: Vec<(usize, [usize; 2])> = by_point
        .iter()
        .filter_map(|(&seq, outcomes)| {
            let counts = outcomes.iter().filter_map(seconds_placed);
            let sum = counts.reduce(|a, b| [a[0] + b[0], a[1] + b[1]])?;
            Some((seq, sum))
        })
        .collect();
    let counts: Vec<[usize; 2]> = placed.iter().map(|&(_, c)| c).collect();
    let (k, at, has) = first_short(&counts, want)?;
    let p = plan.points.iter().find(|p| p.seq == placed[k].0)?;
    Some(format!(
        "{}: {} {} has {has} of {want} seconds",
        at.as_str(),
        p.configuration,
        p.workload.name
    ))
}

/// The first of `placed` (seconds near, far per point) with fewer than
/// `want` at a placement some point reached: its index, the placement and
/// its seconds there. A placement no point reached asks for nothing: the
/// host may never give it.
fn first_short(placed: &[[usize; 2]], want: usize) -> Option<(usize, Placement, usize)> {
    Placement::ALL
        .iter()
        .enumerate()
        .filter(|&(i, _)| placed.iter().any(|c| c[i] > 0))
        .find_map(|(i, &at)| {
            let k = placed.iter().position(|c| c[i] < want)?;
            Some((k, at, placed[k][i]))
        })
}

/// One point's repetitions as one outcome: every measured iteration in one
/// document (renumbered, the median chosen again), the errors of all.
pub fn merge(outcomes: Vec<PointOutcome>) -> PointOutcome {
    let errors: Vec<String> = outcomes.iter().filter_map(|o| o.error.clone()).collect();
    let docs = outcomes.iter().filter_map(|o| o.document.clone()).collect();
    let Some(doc) = merge_documents(docs) else {
        // Nothing measured: the first outcome says why.
        return outcomes
            .into_iter()
            .next()
            .expect("one outcome per repetition");
    };
    let first = &outcomes[0];
    let status = if doc.interrupted {
        Status::Interrupted
    } else if doc.iterations.is_empty() {
        Status::Failed
    } else {
        Status::Ok
    };
    let mut error = errors;
    error.dedup();
    PointOutcome {
        point: first.point.clone(),
        status,
        error: (!error.is_empty()).then(|| error.join("; ")),
        document: Some(doc),
        contention: outcomes.iter().find_map(|o| o.contention.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_short_anywhere_asks_for_more() {
        // Near is full everywhere; far was reached by the second point only.
        let placed = [[12, 0], [11, 3], [10, 0]];
        assert_eq!(first_short(&placed, 10), Some((0, Placement::Far, 0)));
        // Every point has enough at both.
        assert_eq!(first_short(&[[10, 10], [14, 12]], 10), None);
        // Near short on the last point comes first.
        assert_eq!(
            first_short(&[[10, 1], [9, 20]], 10),
            Some((1, Placement::Near, 9))
        );
    }

    #[test]
    fn a_placement_no_point_reached_asks_for_nothing() {
        assert_eq!(first_short(&[[10, 0], [12, 0]], 10), None);
        assert_eq!(first_short(&[], 10), None);
        // Nothing wanted: never short.
        assert_eq!(first_short(&[[0, 1], [3, 0]], 0), None);
    }
}
