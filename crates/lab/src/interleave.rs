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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use vnio_measure::result::Document;

use crate::runner::{self, Observer, PointOutcome, RunError, RunSummary, RunnerOptions, Status};
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
    for _ in 0..plan.run.iterations {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let summary = runner::run(scenario, &once, opts, stop, observer, &mut |o| {
            by_point.entry(o.point.seq).or_default().push(o.clone());
            Ok(())
        })?;
        if testbeds.is_empty() {
            testbeds = summary.testbeds;
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

/// Documents of one point's repetitions as one: every iteration
/// (renumbered), every error, the median chosen again. None when empty.
pub fn merge_documents(docs: Vec<Document>) -> Option<Document> {
    let mut docs = docs.into_iter();
    let mut doc = docs.next()?;
    for d in docs {
        doc.iterations.extend(d.iterations);
        doc.errors.extend(d.errors);
        doc.interrupted |= d.interrupted;
    }
    for (i, it) in doc.iterations.iter_mut().enumerate() {
        it.index = i;
    }
    doc.conclude();
    Some(doc)
}
