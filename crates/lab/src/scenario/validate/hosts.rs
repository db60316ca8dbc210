//! The `[[host]]` entries: at least two, one on the wire, unique names
//! that fit namespace names; and the host names the other sections refer
//! to ([`Hosts::known`]).

use std::collections::HashSet;

use super::{Check, HOST_NAME_MAX};
use crate::scenario::model::Scenario;
use crate::scenario::ScenarioError;

/// The scenario's host names, for the sections that name hosts.
pub(super) struct Hosts<'a> {
    names: HashSet<&'a str>,
    list: String,
}

impl Hosts<'_> {
    /// `name` is a host, or the error at `field` lists the hosts.
    pub(super) fn known(&self, c: &Check, field: String, name: &str) -> Result<(), ScenarioError> {
        if self.names.contains(name) {
            Ok(())
        } else {
            c.fail(
                field,
                format!("no host named {name:?} (hosts: {})", self.list),
            )
        }
    }
}

/// Checks the `[[host]]` entries and returns their names.
pub(super) fn check_hosts<'a>(c: &Check, s: &'a Scenario) -> Result<Hosts<'a>, ScenarioError> {
    if s.hosts.len() < 2 {
        return c.fail("host", "a scenario needs at least two hosts");
    }
    if s.hosts.iter().all(|h| h.remote) {
        return c.fail(
            "host",
            "every host is remote: at least one must be on the wire",
        );
    }
    let mut names = HashSet::new();
    for h in &s.hosts {
        c.name("host.name", &h.name, HOST_NAME_MAX, false)?;
        if !names.insert(h.name.as_str()) {
            return c.fail("host.name", format!("{:?} appears twice", h.name));
        }
    }
    let list = s
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Hosts { names, list })
}
