//! The studies' findings, judged by the lab itself.
//!
//! A scenario declares the findings it tests (`[[finding]]`, see [`spec`]);
//! after a run, each is judged from the stored points alone by the rule in
//! [`rule`], on the run's own spread ([`samples`]). Findings are read from
//! what the run stored with each scenario ([`FindingsAsRun`]: the findings,
//! the sweep values they name, whether it interleaved), so a run is judged
//! by what it declared when it ran, without parsing its scenario again; a
//! run stored before the lab kept them is judged from its stored scenario
//! text, and old runs (whose scenarios declared none) simply have no
//! findings. A ratio whose points carry the
//! line probe's round trips is also given per placement ([`placement`]),
//! beside the verdict.

pub mod placement;
pub mod rule;
pub mod samples;
pub mod significance;
pub use crate::scenario::finding as spec;
mod words;

use serde::{Deserialize, Serialize};

pub use placement::PlacementRatio;
pub use rule::{Band, Outcome, SampleSource, Samples};
pub use spec::{Expect, FindingSpec, PointRef, Quantity, Statistic, SweepRef};
pub use words::{by_placement, measured, number, reference};

use crate::outcome::PointOutcome;
use crate::scenario::{sweep_value, FindingsAsRun, LabFile, ResolvedFinding, Scenario, SweepParam};
use crate::store::{StoredRun, StoredScenario};

/// One side of a comparison as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// "switch", or "switch @ 8 loads".
    pub point: String,
    /// Its configuration.
    pub configuration: String,
    /// Its sweep value.
    pub sweep: Option<u64>,
    /// The reported value (the median iteration's), in the statistic's
    /// unit; none when the point was not measured.
    pub value: Option<f64>,
    /// The spread of its samples.
    pub band: Option<Band>,
    /// How many samples.
    pub samples: usize,
    /// Where they come from.
    pub source: Option<SampleSource>,
    /// Why it has no value.
    pub missing: Option<String>,
}

/// The verdict on one finding of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Scenario name.
    pub scenario: String,
    /// Finding id.
    pub id: String,
    /// The study.
    pub study: String,
    /// Its claim in words.
    pub claim: String,
    /// Workload compared.
    pub workload: String,
    /// Statistic read.
    pub statistic: Statistic,
    /// Unit of the quantity.
    pub unit: String,
    /// How subject and against combine.
    pub quantity: Quantity,
    /// Side of `than` the study says.
    pub expect: Expect,
    /// The threshold.
    pub than: f64,
    /// The study's number(s), in the quantity's unit.
    pub reference: Vec<f64>,
    /// The point the claim is about.
    pub subject: Side,
    /// The point it is compared with.
    pub against: Option<Side>,
    /// This run's quantity (from the reported values).
    pub value: Option<f64>,
    /// Its band over the run's spread.
    pub band: Option<Band>,
    /// The verdict.
    pub outcome: Outcome,
    /// Why, in one sentence.
    pub why: String,
    /// Where the study's number falls on the subject's figure.
    pub mark: Option<Mark>,
    /// A ratio at each placement of the switch's and the client's CPUs,
    /// where the points carry the line probe's round trips (knob
    /// `placement_probe`); empty otherwise. Shown beside the verdict,
    /// which it does not change.
    #[serde(default)]
    pub by_placement: Vec<PlacementRatio>,
}

/// The study's number placed where this run's subject is drawn: the
/// reference itself for a value, the against point's value plus (or
/// times) the reference for a difference (or ratio).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Configuration of the subject.
    pub configuration: String,
    /// Its sweep value.
    pub sweep: Option<u64>,
    /// The statistic's values the study implies (one or two).
    pub values: Vec<f64>,
}

/// A scenario of the run whose findings could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreadable {
    /// Scenario name.
    pub scenario: String,
    /// Why (its stored text no longer parses).
    pub error: String,
}

/// Every verdict of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFindings {
    /// Run id.
    pub run: i64,
    /// Run (scenario or set) name.
    pub name: String,
    /// Verdicts, scenario by scenario in run order.
    pub verdicts: Vec<Verdict>,
    /// Scenarios of the run that declare no finding.
    pub without: Vec<String>,
    /// Scenarios whose stored text does not parse any more.
    pub unreadable: Vec<Unreadable>,
    /// Knobs set for the run (`--knob`): the verdicts are on the scenario
    /// with them, not as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knob_overrides: Vec<crate::scenario::KnobOverride>,
}

/// Judge every finding of a stored run.
pub fn judge_run(run: &StoredRun) -> RunFindings {
    let mut out = RunFindings {
        run: run.row.id,
        name: run.row.name.clone(),
        verdicts: Vec::new(),
        without: Vec::new(),
        unreadable: Vec::new(),
        knob_overrides: run.overrides.knobs.clone(),
    };
    for s in &run.scenarios {
        match as_run(s) {
            Ok(judged) if judged.findings.is_empty() => out.without.push(s.name.clone()),
            Ok(judged) => out.verdicts.extend(judge_as_run(&judged, s)),
            Err(error) => out.unreadable.push(Unreadable {
                scenario: s.name.clone(),
                error,
            }),
        }
    }
    out
}

/// What judging `s` needs: as the run stored it, or for a run stored
/// before the lab kept it, read from its scenario text.
fn as_run(s: &StoredScenario) -> Result<FindingsAsRun, String> {
    if let Some(judged) = &s.findings {
        return Ok(judged.clone());
    }
    match crate::scenario::parse(&s.origin, &s.text) {
        Ok(LabFile::Scenario(sc)) => Ok(FindingsAsRun::of(&sc)),
        Ok(LabFile::Set(_)) => Err("stored as a set, not a scenario".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Judge the findings `sc` declares on its stored points.
pub fn judge(sc: &Scenario, stored: &StoredScenario) -> Vec<Verdict> {
    judge_as_run(&FindingsAsRun::of(sc), stored)
}

/// Judge findings as a run stored them on its stored points.
pub fn judge_as_run(judged: &FindingsAsRun, stored: &StoredScenario) -> Vec<Verdict> {
    (judged.findings.iter())
        .map(|f| verdict(judged.interleave, stored, f))
        .collect()
}

fn verdict(in_step: bool, stored: &StoredScenario, rf: &ResolvedFinding) -> Verdict {
    let f = &rf.spec;
    let quantity = f.quantity();
    let than = f.threshold();
    let stat = f.statistic;
    let subject = read(in_step, stored, f, &f.subject, rf.subject_sweep);
    let against = (f.against.as_ref()).map(|a| read(in_step, stored, f, a, rf.against_sweep));
    let mut v = Verdict {
        scenario: stored.name.clone(),
        id: f.id.clone(),
        study: f.study.clone(),
        claim: f.claim.clone(),
        workload: f.workload.clone(),
        statistic: stat,
        unit: match quantity {
            Quantity::Ratio => "x".into(),
            _ => stat.unit().into(),
        },
        quantity,
        expect: f.expect,
        than,
        reference: f.reference.clone(),
        subject: subject.0.clone(),
        against: against.as_ref().map(|a| a.0.clone()),
        value: None,
        band: None,
        outcome: Outcome::Inconclusive,
        why: String::new(),
        mark: None,
        by_placement: Vec::new(),
    };
    // A side that was not measured leaves nothing to judge.
    let unmeasured = |mut v: Verdict, side: &Side| {
        v.why = format!(
            "{} was not measured: {}",
            side.point,
            side.missing.as_deref().unwrap_or("not in this run")
        );
        v
    };
    let s = match &subject {
        (_, Some(s)) => s,
        (side, None) => return unmeasured(v, side),
    };
    let a = match &against {
        None => None,
        Some((_, Some(a))) => Some(a),
        Some((side, None)) => return unmeasured(v, side),
    };
    if let (Quantity::Ratio, Some(ap)) = (quantity, &f.against) {
        let point =
            |p, sweep| find(stored, f, p, sweep).filter(|o| crate::store::measured(o.status));
        if let (Some(so), Some(ao)) = (
            point(&f.subject, rf.subject_sweep),
            point(ap, rf.against_sweep),
        ) {
            v.by_placement = placement::ratios(stat, so, ao);
        }
    }
    let d = rule::decide(quantity, f.expect, than, s, a);
    v.outcome = d.outcome;
    v.value = d.value.is_finite().then_some(d.value);
    v.band = d.band;
    v.mark = mark(f, quantity, &v.subject, v.against.as_ref());
    v.why = words::because(&v, d.reason);
    v
}

/// The stored point `p` names for finding `f`, at `sweep` (the sweep
/// value `p` names, with its parameter).
fn find<'a>(
    stored: &'a StoredScenario,
    f: &FindingSpec,
    p: &PointRef,
    sweep: Option<(SweepParam, u64)>,
) -> Option<&'a PointOutcome> {
    stored.points.iter().find(|o| {
        o.point.configuration == p.configuration
            && o.point.workload.name == f.workload
            && o.point.sweep.map(|x| x.1) == sweep.map(|x| x.1)
    })
}

/// One side's description and samples (`None`: not measured); `in_step`:
/// the run interleaved its configurations.
fn read(
    in_step: bool,
    stored: &StoredScenario,
    f: &FindingSpec,
    p: &PointRef,
    sweep: Option<(SweepParam, u64)>,
) -> (Side, Option<Samples>) {
    let mut side = Side {
        point: label(&p.configuration, sweep),
        configuration: p.configuration.clone(),
        sweep: sweep.map(|x| x.1),
        value: None,
        band: None,
        samples: 0,
        source: None,
        missing: None,
    };
    let Some(o) = find(stored, f, p, sweep) else {
        side.missing = Some("not in this run (left out by --configuration or --quick?)".into());
        return (side, None);
    };
    match samples::of_point(o, f.statistic) {
        Ok(mut s) => {
            s.in_step = in_step;
            side.value = Some(s.value);
            side.band = Some(s.band());
            // A percentile's samples are its round trips.
            side.samples = s
                .order
                .as_ref()
                .map_or(s.values.len(), |o| o.count as usize);
            side.source = Some(s.source);
            (side, Some(s))
        }
        Err(why) => {
            side.missing = Some(why);
            (side, None)
        }
    }
}

fn label(cfg: &str, sweep: Option<(SweepParam, u64)>) -> String {
    match sweep {
        None => cfg.to_owned(),
        Some((p, v)) => format!("{cfg} @ {}", sweep_value(p, v)),
    }
}

fn mark(f: &FindingSpec, q: Quantity, subject: &Side, against: Option<&Side>) -> Option<Mark> {
    if f.reference.is_empty() {
        return None;
    }
    let base = against.and_then(|a| a.value);
    let values: Vec<f64> = f
        .reference
        .iter()
        .filter_map(|r| match q {
            Quantity::Value => Some(*r),
            Quantity::Difference => base.map(|b| b + r),
            Quantity::Ratio => base.map(|b| b * r),
        })
        .collect();
    (!values.is_empty()).then(|| Mark {
        configuration: subject.configuration.clone(),
        sweep: subject.sweep,
        values,
    })
}

/// A finding whose verdict differs between two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// Scenario name.
    pub scenario: String,
    /// Finding id.
    pub id: String,
    /// The claim.
    pub claim: String,
    /// The verdict in the first run.
    pub a: Verdict,
    /// The verdict in the second run.
    pub b: Verdict,
}

/// The findings judged in both runs whose verdict differs, in A's order.
pub fn changes(a: &RunFindings, b: &RunFindings) -> Vec<Change> {
    a.verdicts
        .iter()
        .filter_map(|va| {
            let vb = b
                .verdicts
                .iter()
                .find(|vb| vb.scenario == va.scenario && vb.id == va.id)?;
            (vb.outcome != va.outcome).then(|| Change {
                scenario: va.scenario.clone(),
                id: va.id.clone(),
                claim: va.claim.clone(),
                a: va.clone(),
                b: vb.clone(),
            })
        })
        .collect()
}
