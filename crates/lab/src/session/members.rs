//! What a name given to `vnio lab` stands for: one scenario, or a set's
//! scenarios each with the overrides it runs with; their plans on this
//! build; the shipped catalogue with what each costs.

use std::time::Duration;

use super::LabError;
use crate::scenario::{self, Capabilities, LabFile, Overrides, Plan, Scenario, Source};

/// One scenario to run, where it came from, and its overrides (the command
/// line's over the set's).
#[derive(Debug, Clone)]
pub struct Member {
    /// The scenario's file.
    pub source: Source,
    /// The scenario as it runs: the file's, with the overrides' knobs set.
    pub scenario: Scenario,
    /// The overrides it runs with.
    pub overrides: Overrides,
}

impl Member {
    /// Its plan on a machine with `caps`.
    pub fn plan(&self, caps: &Capabilities) -> Result<Plan, LabError> {
        Plan::new(&self.scenario, &self.overrides, caps).map_err(LabError::Plan)
    }

    /// One line per knob the overrides set, with what the file said there
    /// ([`scenario::KnobOverride::describe`]).
    pub fn knob_notes(&self) -> Vec<String> {
        let LabFile::Scenario(file) = &self.source.file else {
            return Vec::new();
        };
        self.overrides
            .knobs
            .iter()
            .map(|k| k.describe(file, &self.overrides))
            .collect()
    }
}

/// `source`'s scenario `s` as a member run with `overrides`.
fn member(source: Source, s: &Scenario, overrides: Overrides) -> Result<Member, LabError> {
    let scenario = scenario::with_knobs(&source.origin, s, &overrides)?;
    Ok(Member {
        source,
        scenario,
        overrides,
    })
}

/// A name expanded: the file it names and its scenarios.
#[derive(Debug, Clone)]
pub struct Expanded {
    /// The scenario or set file.
    pub source: Source,
    /// Its scenarios (one for a scenario file).
    pub members: Vec<Member>,
}

impl Expanded {
    /// The scenario's or set's title.
    pub fn title(&self) -> String {
        title_of(&self.source)
    }

    /// True when the name is a set.
    pub fn is_set(&self) -> bool {
        matches!(self.source.file, LabFile::Set(_))
    }
}

/// The title of a scenario or set file.
pub fn title_of(source: &Source) -> String {
    match &source.file {
        LabFile::Scenario(s) => s.title.clone(),
        LabFile::Set(s) => s.title.clone(),
    }
}

/// The scenarios `name` (shipped name or file) stands for, with the
/// overrides each runs with: the command line's `cli`, then the set's.
pub fn expand(name: &str, cli: &Overrides) -> Result<Expanded, LabError> {
    let source = scenario::load(name)?;
    let mut members = Vec::new();
    match &source.file {
        LabFile::Scenario(s) => members.push(member(source.clone(), s, cli.clone())?),
        LabFile::Set(set) => {
            let from_set = Overrides {
                duration: set.duration,
                warmup: set.warmup,
                iterations: set.iterations,
                ..Default::default()
            };
            for name_in_set in &set.scenarios {
                let src = scenario::load(name_in_set)?;
                let LabFile::Scenario(s) = &src.file else {
                    return Err(LabError::Plan(format!(
                        "set {name}: {name_in_set} is not a scenario"
                    )));
                };
                let s = (**s).clone();
                members.push(member(src, &s, cli.or(&from_set))?);
            }
        }
    }
    Ok(Expanded { source, members })
}

/// A shipped scenario or set as `vnio lab list` shows it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Shipped name.
    pub name: String,
    /// Title.
    pub title: String,
    /// True when this build can run every configuration.
    pub runnable: bool,
    /// Points measured (not skipped).
    pub points: usize,
    /// Estimated time.
    pub time: Duration,
}

/// Every shipped scenario and set with what it measures and costs here.
pub fn catalogue() -> Result<Vec<Listed>, LabError> {
    let caps = Capabilities::current();
    let mut out = Vec::new();
    for sh in scenario::SHIPPED {
        let expanded = expand(sh.name, &Overrides::default())?;
        let mut listed = Listed {
            name: sh.name.to_owned(),
            title: expanded.title(),
            runnable: true,
            points: 0,
            time: Duration::ZERO,
        };
        for m in &expanded.members {
            let plan = m.plan(&caps)?;
            listed.points += plan.points.iter().filter(|p| p.skip.is_none()).count();
            listed.time += plan.estimate();
            listed.runnable &= plan.missing.is_empty();
        }
        out.push(listed);
    }
    Ok(out)
}

/// A run made ready: each scenario with its plan on this build.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The name run (scenario or set).
    pub source: Source,
    /// The command line's overrides (stored with the run).
    pub overrides: Overrides,
    /// The scenarios with their plans, in run order.
    pub runs: Vec<(Source, Scenario, Plan)>,
    /// One line each: the knobs set for the run and what they replace, what
    /// a set leaves out because this build cannot run it.
    pub notes: Vec<String>,
}

impl Prepared {
    /// Points in all plans.
    pub fn points(&self) -> usize {
        // An interleaved run finishes every point once per repetition.
        self.runs
            .iter()
            .map(|(_, _, p)| {
                let reps = if p.run.interleave {
                    p.run.iterations
                } else {
                    1
                };
                p.points.len() * reps as usize
            })
            .sum()
    }
}

/// Plans `name` for this build. A scenario with a configuration this build
/// cannot run is an error (naming it); a set runs what it can of each
/// scenario and says what not in [`Prepared::notes`].
pub fn prepare(name: &str, cli: &Overrides) -> Result<Prepared, LabError> {
    let expanded = expand(name, cli)?;
    let caps = Capabilities::current();
    let is_set = expanded.is_set();
    let mut runs = Vec::new();
    let mut notes = Vec::new();
    for m in expanded.members {
        for knob in m.knob_notes() {
            notes.push(format!("vnio lab: {}: knob {knob}", m.source.name));
        }
        let named = |e: String| LabError::Plan(format!("{}: {e}", m.source.name));
        let mut plan = Plan::new(&m.scenario, &m.overrides, &caps).map_err(named)?;
        if !plan.missing.is_empty() {
            let why: Vec<String> = plan
                .missing
                .iter()
                .map(|(c, w)| format!("configuration {c}: {}", w.join("; ")))
                .collect();
            if !is_set {
                return Err(LabError::Plan(format!(
                    "{} cannot run in this build: {} (run the others with --configuration NAME)",
                    m.source.name,
                    why.join(", ")
                )));
            }
            let runnable: Vec<String> = plan
                .configurations
                .iter()
                .map(|c| c.name.clone())
                .filter(|c| !plan.missing.iter().any(|(miss, _)| miss == c))
                .collect();
            notes.push(format!(
                "vnio lab: {}: leaving out {} (this build cannot run it)",
                m.source.name,
                why.join(", ")
            ));
            if runnable.is_empty() {
                continue;
            }
            let only = Overrides {
                configurations: runnable,
                ..m.overrides.clone()
            };
            plan = Plan::new(&m.scenario, &only, &caps).map_err(named)?;
        }
        runs.push((m.source, m.scenario, plan));
    }
    Ok(Prepared {
        source: expanded.source,
        overrides: cli.clone(),
        runs,
        notes,
    })
}
