//! Scenario files: parsing, validation, the shipped library, and the plan
//! of points a run measures.
//!
//! A scenario is TOML (see `docs/lab.md`). Errors are one line naming the
//! file, and the line and column or the field:
//!
//! ```text
//! my.toml:14:1: unknown field `sesions`, expected one of `name`, `kind`, ...
//! my.toml: workload `rr`: from: no host named `clint` (hosts: client, server)
//! ```

pub mod capabilities;
pub mod finding;
mod instrument;
mod judging;
mod knob_override;
mod knobs;
mod library;
pub mod machines;
mod model;
mod pairs;
mod plan;
mod statistic;
mod validate;

pub use capabilities::Capabilities;
pub use instrument::Instrument;
pub use judging::{FindingsAsRun, ResolvedFinding};
pub use knob_override::{knob_names, with_knobs, KnobOverride, KnobOverrideError};
pub use knobs::{Attach, Endpoints, Knobs, PortPolicy, Virtqueue};
pub use library::{shipped, Shipped, SHIPPED};
pub use model::{
    humantime, sweep_value, Configuration, Contention, Flood, HostKind, HostSpec, Loads, Protocol,
    RunSpec, Scenario, SetFile, SetSpec, Sweep, SweepParam, WireKind, WorkloadKind, WorkloadSpec,
};
pub use pairs::MAX_PAYLOAD;
pub use plan::{Overrides, Plan, Point, Resolved, ResolvedContention};
pub use validate::kind_in;

use std::path::Path;

/// Why a scenario cannot be used. Every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse, or a field is unknown or of the wrong type.
    #[error("{origin}:{line}:{column}: {message}")]
    Syntax {
        /// The file (or shipped scenario) name.
        origin: String,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file parses but says something impossible.
    #[error("{origin}: {field}: {message}")]
    Invalid {
        /// The file (or shipped scenario) name.
        origin: String,
        /// Where, e.g. "workload `rr`: from".
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A name that is neither a shipped scenario nor a file.
    #[error("no scenario named {name:?} (shipped: {known}; or give a .toml file)")]
    Unknown {
        /// The name given.
        name: String,
        /// Shipped names.
        known: String,
    },
}

/// A parsed file: one scenario, or a set of shipped scenarios.
#[derive(Debug, Clone, PartialEq)]
pub enum LabFile {
    /// One scenario.
    Scenario(Box<Scenario>),
    /// Several shipped scenarios run together.
    Set(SetSpec),
}

/// A scenario (or set) with where it came from and its text, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// The scenario's name: the shipped name or the file's stem.
    pub name: String,
    /// Where it came from, for messages ("shipped:quick" or a path).
    pub origin: String,
    /// The TOML text, stored with every run.
    pub text: String,
    /// What it says.
    pub file: LabFile,
}

/// Parse and validate a scenario or set file's text.
pub fn parse(origin: &str, text: &str) -> Result<LabFile, ScenarioError> {
    // Sets are recognised by their [set] table; anything else must be a
    // scenario, so a misspelt scenario gets the scenario's field errors.
    let is_set = toml::from_str::<toml::Table>(text)
        .map(|t| t.contains_key("set"))
        .unwrap_or(false);
    if is_set {
        let set: SetFile = toml::from_str(text).map_err(|e| syntax(origin, text, &e))?;
        validate::set(origin, &set.set)?;
        return Ok(LabFile::Set(set.set));
    }
    let scenario: Scenario = toml::from_str(text).map_err(|e| syntax(origin, text, &e))?;
    validate::scenario(origin, &scenario)?;
    Ok(LabFile::Scenario(Box::new(scenario)))
}

/// Find a scenario by shipped name or path.
pub fn load(name_or_path: &str) -> Result<Source, ScenarioError> {
    if let Some(s) = shipped(name_or_path) {
        let origin = format!("shipped:{}", s.name);
        let file = parse(&origin, s.text)?;
        return Ok(Source {
            name: s.name.to_owned(),
            origin,
            text: s.text.to_owned(),
            file,
        });
    }
    let path = Path::new(name_or_path);
    if !path.exists() && !name_or_path.contains('/') && !name_or_path.ends_with(".toml") {
        return Err(ScenarioError::Unknown {
            name: name_or_path.to_owned(),
            known: SHIPPED
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: name_or_path.to_owned(),
        source,
    })?;
    let file = parse(name_or_path, &text)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name_or_path.to_owned());
    Ok(Source {
        name,
        origin: name_or_path.to_owned(),
        text,
        file,
    })
}

/// A toml error as one line with the position of the offending text.
fn syntax(origin: &str, text: &str, e: &toml::de::Error) -> ScenarioError {
    let (line, column) = match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            (line, column)
        }
        None => (1, 1),
    };
    ScenarioError::Syntax {
        origin: origin.to_owned(),
        line,
        column,
        message: e.message().trim().replace('\n', " "),
    }
}
