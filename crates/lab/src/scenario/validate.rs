//! What a scenario may say: one check per section, in the order their
//! errors are reported (`[run]`, `[[host]]`, `[[configuration]]` with
//! their knobs, `[knobs]`, `[[machine]]`, `[[workload]]`, `[contention]`,
//! `[sweep]`, `[[finding]]`), each in its file under `validate/`; the
//! parameters that apply to each workload kind are `validate/workload.rs`.
//! What this build of vnio can run is in `capabilities.rs`.

use super::model::*;
use super::ScenarioError;

mod configurations;
mod contention;
mod endpoints;
mod hosts;
mod run;
mod sweep;
mod virtqueue;
mod workload;
mod workloads;

use self::configurations::check_configurations;
use self::contention::check_contention;
use self::hosts::check_hosts;
use self::run::check_run;
use self::sweep::check_sweep;
use self::workloads::check_workloads;

/// Longest host name: it becomes part of namespace names.
const HOST_NAME_MAX: usize = 12;
/// Longest configuration or workload name.
const NAME_MAX: usize = 24;
/// Sessions per target the agent accepts by default.
const SESSIONS_MAX: u32 = 64;

struct Check<'a> {
    origin: &'a str,
}

impl Check<'_> {
    fn fail<T>(
        &self,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Result<T, ScenarioError> {
        Err(ScenarioError::Invalid {
            origin: self.origin.to_owned(),
            field: field.into(),
            message: message.into(),
        })
    }

    fn name(&self, field: &str, name: &str, max: usize, dash: bool) -> Result<(), ScenarioError> {
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || (dash && c == '-');
        if name.is_empty() || name.len() > max || !name.chars().all(ok_char) {
            let allowed = if dash {
                "lower-case letters, digits and '-'"
            } else {
                "lower-case letters and digits"
            };
            return self.fail(field, format!("{name:?} must be 1 to {max} {allowed}"));
        }
        Ok(())
    }
}

/// Validate a set file: known scenarios, sane overrides.
pub(super) fn set(origin: &str, s: &SetSpec) -> Result<(), ScenarioError> {
    let c = Check { origin };
    if s.scenarios.is_empty() {
        return c.fail("set.scenarios", "names no scenario");
    }
    for name in &s.scenarios {
        match super::shipped(name) {
            None => {
                return c.fail(
                    "set.scenarios",
                    format!("{name:?} is not a shipped scenario"),
                )
            }
            Some(sh) if sh.is_set() => {
                return c.fail("set.scenarios", format!("{name:?} is itself a set"))
            }
            Some(_) => {}
        }
    }
    if s.iterations == Some(0) {
        return c.fail("set.iterations", "must be at least 1");
    }
    if s.duration.is_some_and(|d| d.is_zero()) {
        return c.fail("set.duration", "must be more than 0");
    }
    Ok(())
}

/// Validate a scenario completely (everything but what this build can run),
/// section by section in the order the errors are reported.
pub(super) fn scenario(origin: &str, s: &Scenario) -> Result<(), ScenarioError> {
    let c = Check { origin };
    if s.title.trim().is_empty() {
        return c.fail("title", "is empty");
    }
    check_run(&c, &s.run)?;
    let hosts = check_hosts(&c, s)?;
    check_configurations(&c, s, &hosts)?;
    super::knobs::check("knobs", &s.knobs, WireKind::Switch)
        .or_else(|(field, message)| c.fail(field, message))?;
    if let Err((field, message)) = super::machines::check(s, |cfg, name| kind_in(s, cfg, name)) {
        return c.fail(field, message);
    }
    check_workloads(&c, s, &hosts)?;
    check_contention(&c, s, &hosts)?;
    if let Some(sw) = &s.sweep {
        check_sweep(&c, s, sw)?;
    }
    // Findings: they name configurations, workloads and sweep values.
    if let Err((field, message)) = super::finding::check(s) {
        return c.fail(field, message);
    }
    Ok(())
}

/// The kind host `name` has in `cfg`.
pub fn kind_in(s: &Scenario, cfg: &Configuration, name: &str) -> HostKind {
    cfg.hosts.get(name).copied().unwrap_or_else(|| {
        s.hosts
            .iter()
            .find(|h| h.name == name)
            .map_or(HostKind::Namespace, |h| h.kind)
    })
}

fn check_cpus(c: &Check, field: &str, cpus: &[usize]) -> Result<(), ScenarioError> {
    super::knobs::cpus_ok(cpus).or_else(|m| c.fail(field, m))
}
