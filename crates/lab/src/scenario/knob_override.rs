//! Knobs set for one run from the command line (`vnio lab run NAME --knob
//! KEY=VALUE`, repeatable), so a variant of a scenario needs no copy of its
//! file.
//!
//! - **The value is TOML**, as it would be written in `[knobs]`:
//!   `switch_cpus=[0]`, `placement_probe=false`, `port_offloads={a=false}`.
//!   A value that is not TOML but is one bare word (letters, digits and
//!   `-_.:/+@`, no quotes, brackets or spaces) is taken as a string, so
//!   `endpoints=vnio` and `coalesce=static:32:50` need no shell quoting; a
//!   word that is TOML stays what TOML says (`instrument=true` is a
//!   boolean, and refused as one).
//! - **The override wins everywhere the run measures**: in every
//!   configuration the run builds (all, or those `--configuration` names)
//!   it replaces the scenario's `[knobs]` value and the configuration's
//!   own, as if the file said it in each of their `knobs`. Configurations
//!   left out keep the file's knobs and are not checked against it, so
//!   `-c vnio --knob switch_busy_poll=false` sets on vnio's switch a knob
//!   the anchor wires refuse. What it replaced is read back from the
//!   scenario text stored with the run ([`KnobOverride::replaces`]).
//! - **Checked as the file's knobs are**: the name and the type when the
//!   flag is read (serde's own messages, the nearest knob's name for a
//!   misspelt one), the ranges and combinations when the scenario with its
//!   overrides is checked as a whole ([`with_knobs`]), the origin in the
//!   message naming the flags.
//! - **Recorded**: the overrides are part of the run's
//!   [`Overrides`](super::Overrides), stored with the run; the scenario's
//!   text is stored as written, so a run never passes for the scenario as
//!   shipped.

use serde::{Deserialize, Serialize};

use super::knobs::Knobs;
use super::model::Scenario;
use super::plan::Overrides;
use super::ScenarioError;

/// One knob set for a run: `--knob KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobOverride {
    /// The knob's name, as in `[knobs]`.
    pub key: String,
    /// Its value, of the knob's type (stored as JSON, shown as TOML).
    pub value: toml::Value,
}

/// Why a `--knob` flag cannot be used. One line each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KnobOverrideError {
    /// No `=` between the name and the value.
    #[error("--knob {0}: expected KEY=VALUE, e.g. --knob endpoints=vnio")]
    NoValue(String),
    /// The name is not a knob's.
    #[error("--knob {arg}: no knob named {key:?} ({hint})")]
    Unknown {
        /// The flag as given.
        arg: String,
        /// The name given.
        key: String,
        /// The nearest knob's name, or every knob's.
        hint: String,
    },
    /// The value is neither TOML nor a bare word.
    #[error(
        "--knob {arg}: the value is not TOML ({message}); quote a string, e.g. '{key}=\"...\"'"
    )]
    NotToml {
        /// The flag as given.
        arg: String,
        /// The knob's name.
        key: String,
        /// TOML's complaint.
        message: String,
    },
    /// The value is not of the knob's type (or not one of its choices).
    #[error("--knob {arg}: {message}")]
    Type {
        /// The flag as given.
        arg: String,
        /// serde's complaint, as a file's would read.
        message: String,
    },
    /// The same knob twice.
    #[error("--knob {key} is given twice ({first}, then {second}): give it once")]
    Twice {
        /// The knob's name.
        key: String,
        /// The first value, as TOML.
        first: String,
        /// The second.
        second: String,
    },
}

impl KnobOverride {
    /// Reads one `KEY=VALUE` flag: a knob's name and a value of its type.
    pub fn parse(arg: &str) -> Result<KnobOverride, KnobOverrideError> {
        // Messages show the flag with control characters escaped: one line.
        let shown = || printable(arg);
        let Some((key, raw)) = arg.split_once('=') else {
            return Err(KnobOverrideError::NoValue(shown()));
        };
        let (key, raw) = (key.trim(), raw.trim());
        let names = knob_names();
        if !names.iter().any(|n| n == key) {
            let hint = match nearest(key, &names) {
                Some(n) => format!("did you mean `{n}`?"),
                None => format!("knobs: {}", names.join(", ")),
            };
            return Err(KnobOverrideError::Unknown {
                arg: shown(),
                key: key.to_owned(),
                hint,
            });
        }
        let value = toml_value(raw).map_err(|message| KnobOverrideError::NotToml {
            arg: shown(),
            key: key.to_owned(),
            message,
        })?;
        let knob = KnobOverride {
            key: key.to_owned(),
            value,
        };
        // The knob's type, as a file's [knobs] would be read.
        knob.as_knobs().map_err(|message| KnobOverrideError::Type {
            arg: shown(),
            message,
        })?;
        Ok(knob)
    }

    /// Reads every flag, in order; a knob given twice is refused (which of
    /// the two was meant is not for the lab to guess).
    pub fn parse_all<S: AsRef<str>>(args: &[S]) -> Result<Vec<KnobOverride>, KnobOverrideError> {
        let mut out: Vec<KnobOverride> = Vec::new();
        for arg in args {
            let knob = KnobOverride::parse(arg.as_ref())?;
            if let Some(first) = out.iter().find(|k| k.key == knob.key) {
                return Err(KnobOverrideError::Twice {
                    key: knob.key.clone(),
                    first: first.value.to_string(),
                    second: knob.value.to_string(),
                });
            }
            out.push(knob);
        }
        Ok(out)
    }

    /// The knob alone as [`Knobs`], or serde's complaint about its type.
    fn as_knobs(&self) -> Result<Knobs, String> {
        // Read from text as a file is, so the complaint is the file's.
        toml::from_str::<Knobs>(&self.to_string()).map_err(|e| one_line(e.message()))
    }

    /// The flag that sets it again, e.g. `--knob endpoints="vnio"`.
    pub fn flag(&self) -> String {
        format!("--knob {}={}", self.key, self.value)
    }

    /// What `s` says of this knob where a run with overrides `o` measures
    /// it, which the override replaces: the `[knobs]` value and the
    /// measured configurations' own, e.g. `["\"dpdk\" in [knobs]", "true
    /// in configuration `vnio`"]`; empty when the scenario leaves it unset.
    pub fn replaces(&self, s: &Scenario, o: &Overrides) -> Vec<String> {
        let mut said = Vec::new();
        if let Some(v) = value_of(&s.knobs, &self.key) {
            said.push(format!("{v} in [knobs]"));
        }
        for c in s.configurations.iter().filter(|c| o.measures(&c.name)) {
            if let Some(v) = value_of(&c.knobs, &self.key) {
                said.push(format!("{v} in configuration `{}`", c.name));
            }
        }
        said
    }

    /// One line for what a run shows: the knob as set and what the file
    /// `s` said where the run with overrides `o` measures, e.g.
    /// `endpoints = "vnio" (--knob, over "dpdk" in [knobs])`.
    pub fn describe(&self, s: &Scenario, o: &Overrides) -> String {
        let replaced = self.replaces(s, o);
        if replaced.is_empty() {
            format!("{self} (--knob; unset in the file)")
        } else {
            format!("{self} (--knob, over {})", replaced.join(", "))
        }
    }
}

impl std::fmt::Display for KnobOverride {
    /// As in `[knobs]`: `endpoints = "vnio"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} = {}", self.key, self.value)
    }
}

/// `scenario` from `origin` as run with overrides `o`: `o.knobs` set in
/// every configuration the run measures (all, or those `o.configurations`
/// names), over the scenario's `[knobs]` and the configuration's own.
/// Checked as a whole as a file is: a knob that does not fit a measured
/// configuration's wire, its hosts or the other knobs gives the file's
/// one-line message, the origin naming the flags. Configurations left out
/// keep the file's knobs (they are not built, so not checked against it).
pub fn with_knobs(
    origin: &str,
    scenario: &Scenario,
    o: &Overrides,
) -> Result<Scenario, ScenarioError> {
    if o.knobs.is_empty() {
        return Ok(scenario.clone());
    }
    let mut over = Knobs::default();
    for k in &o.knobs {
        // Checked when the flag was read; a value stored by another vnio
        // that no longer reads as its knob is refused here.
        let one = k.as_knobs().map_err(|message| ScenarioError::Invalid {
            origin: origin.to_owned(),
            field: k.flag(),
            message,
        })?;
        over = over.layered(&one);
    }
    let mut s = scenario.clone();
    for c in s.configurations.iter_mut().filter(|c| o.measures(&c.name)) {
        c.knobs = c.knobs.layered(&over);
    }
    let flags: Vec<String> = o.knobs.iter().map(KnobOverride::flag).collect();
    super::validate::scenario(&format!("{origin} with {}", flags.join(" ")), &s)?;
    Ok(s)
}

/// Every knob's name, alphabetically.
pub fn knob_names() -> Vec<String> {
    // Every field of the default serialises (as null), so the list cannot
    // drift from the struct.
    match serde_json::to_value(Knobs::default()) {
        Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `raw` as a TOML value, or as a string when it is one bare word.
fn toml_value(raw: &str) -> Result<toml::Value, String> {
    // Parsed as the value of a one-key document, which must stay one key
    // (a value cannot smuggle in a second knob with a newline).
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(t) if t.len() == 1 => return Ok(t["v"].clone()),
        Ok(_) => return Err("one value, not several".into()),
        Err(e) if !is_bare_word(raw) => return Err(one_line(e.message())),
        Err(_) => {}
    }
    Ok(toml::Value::String(raw.to_owned()))
}

/// `arg` with control characters escaped (`\n`), so a message about it
/// stays one line.
fn printable(arg: &str) -> String {
    arg.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn is_bare_word(raw: &str) -> bool {
    !raw.is_empty()
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/+@".contains(c))
}

fn one_line(message: &str) -> String {
    message.trim().replace('\n', " ")
}

/// The value `knobs` gives `key`, as TOML, if any.
fn value_of(knobs: &Knobs, key: &str) -> Option<toml::Value> {
    // Unset knobs (None) are left out of the table.
    toml::Value::try_from(knobs).ok()?.get(key).cloned()
}

/// The name in `names` closest to `key` when it is close enough to be a
/// slip (at most a third of its letters off, and at most 3).
fn nearest<'a>(key: &str, names: &'a [String]) -> Option<&'a str> {
    let most = (key.chars().count() / 3).clamp(1, 3);
    names
        .iter()
        .map(|n| (edit_distance(key, n), n.as_str()))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Levenshtein distance: insertions, deletions and substitutions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("endpoint", "endpoints"), 1);
        assert_eq!(edit_distance("swtich_cpus", "switch_cpus"), 2);
        assert_eq!(edit_distance("", "lro"), 3);
        assert_eq!(edit_distance("lro", "lro"), 0);
    }

    #[test]
    fn bare_words_are_strings_and_toml_stays_toml() {
        assert_eq!(toml_value("vnio"), Ok(toml::Value::String("vnio".into())));
        assert_eq!(
            toml_value("static:32:50"),
            Ok(toml::Value::String("static:32:50".into()))
        );
        assert_eq!(toml_value("true"), Ok(toml::Value::Boolean(true)));
        assert_eq!(toml_value("64"), Ok(toml::Value::Integer(64)));
        assert_eq!(toml_value("\"64\""), Ok(toml::Value::String("64".into())));
        assert!(toml_value("[0").is_err());
        assert!(toml_value("two words").is_err());
        assert!(toml_value("1\nlro = true").is_err());
    }
}
