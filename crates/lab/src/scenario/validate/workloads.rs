//! The `[[workload]]` entries: at least one, unique names, a client and
//! targets that are hosts (not the client itself), and each workload's
//! own fields (`workload.rs`).

use std::collections::HashSet;

use super::hosts::Hosts;
use super::workload::check_workload;
use super::{Check, NAME_MAX};
use crate::scenario::model::Scenario;
use crate::scenario::ScenarioError;

/// Checks the `[[workload]]` entries.
pub(super) fn check_workloads(c: &Check, s: &Scenario, hosts: &Hosts) -> Result<(), ScenarioError> {
    if s.workloads.is_empty() {
        return c.fail("workload", "a scenario needs at least one workload");
    }
    let mut names = HashSet::new();
    for w in &s.workloads {
        c.name("workload.name", &w.name, NAME_MAX, true)?;
        let at = format!("workload `{}`", w.name);
        if !names.insert(w.name.as_str()) {
            return c.fail(&at, "name appears twice");
        }
        hosts.known(c, format!("{at}: from"), &w.from)?;
        if w.kind.is_pod_op() {
            if !w.to.is_empty() {
                return c.fail(
                    format!("{at}: to"),
                    format!("does not apply to {} workloads", w.kind.as_str()),
                );
            }
        } else if w.to.is_empty() {
            return c.fail(format!("{at}: to"), "names no host");
        }
        for t in &w.to {
            hosts.known(c, format!("{at}: to"), t)?;
            if *t == w.from {
                return c.fail(format!("{at}: to"), format!("{t:?} is also the client"));
            }
        }
        check_workload(c, &at, w, None)?;
    }
    Ok(())
}
