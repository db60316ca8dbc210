//! What judging a run needs of its scenario, stored with the run
//! (`scenarios.findings`), so a stored run is judged from what it stored
//! rather than by parsing and validating its scenario text again: the
//! findings as declared, the sweep values their points name (`first`,
//! `last` resolved against the run's sweep), and whether the run
//! interleaved its configurations (their iterations then ran in step).

use serde::{Deserialize, Serialize};

use super::finding::{FindingSpec, PointRef};
use super::model::{Scenario, SweepParam};

/// A scenario's findings as its run judges them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingsAsRun {
    /// Each finding, in the scenario's order.
    pub findings: Vec<ResolvedFinding>,
    /// The run interleaved its configurations (`run.interleave`).
    pub interleave: bool,
}

/// One finding with the sweep values its points name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolvedFinding {
    /// The finding as declared.
    pub spec: FindingSpec,
    /// The subject's sweep parameter and value (none without a sweep).
    pub subject_sweep: Option<(SweepParam, u64)>,
    /// The against point's (none without one or without a sweep).
    pub against_sweep: Option<(SweepParam, u64)>,
}

impl FindingsAsRun {
    /// Those of scenario `s`.
    pub fn of(s: &Scenario) -> FindingsAsRun {
        let sweep_of = |p: &PointRef| {
            s.sweep.as_ref().and_then(|sw| {
                p.sweep
                    .and_then(|r| r.resolve(&sw.values))
                    .map(|v| (sw.parameter, v))
            })
        };
        FindingsAsRun {
            findings: s
                .findings
                .iter()
                .map(|f| ResolvedFinding {
                    spec: f.clone(),
                    subject_sweep: sweep_of(&f.subject),
                    against_sweep: f.against.as_ref().and_then(sweep_of),
                })
                .collect(),
            interleave: s.run.interleave,
        }
    }
}
