//! The `[contention]` section: the background loads and the neighbour
//! flood, their hosts, ranges and CPUs, and that their generators run in
//! namespace hosts in every configuration.

use super::hosts::Hosts;
use super::{check_cpus, kind_in, Check};
use crate::scenario::model::{Flood, HostKind, Loads, Scenario};
use crate::scenario::ScenarioError;

/// Checks `[contention]`.
pub(super) fn check_contention(
    c: &Check,
    s: &Scenario,
    hosts: &Hosts,
) -> Result<(), ScenarioError> {
    if let Some(l) = &s.contention.loads {
        check_loads(c, l, hosts)?;
    }
    if let Some(f) = &s.contention.flood {
        check_flood(c, f, hosts)?;
    }
    for (field, cpus) in [
        (
            "contention.loads.cpus",
            s.contention.loads.as_ref().map(|l| &l.cpus),
        ),
        (
            "contention.flood.cpus",
            s.contention.flood.as_ref().map(|f| &f.cpus),
        ),
    ] {
        if let Some(cpus) = cpus {
            check_cpus(c, field, cpus)?;
        }
    }
    check_generator_hosts(c, s)
}

fn check_loads(c: &Check, l: &Loads, hosts: &Hosts) -> Result<(), ScenarioError> {
    hosts.known(c, "contention.loads.on".into(), &l.on)?;
    hosts.known(c, "contention.loads.from".into(), &l.from)?;
    if l.on == l.from {
        return c.fail(
            "contention.loads.from",
            "requests must cross the wire: use a host other than `on`",
        );
    }
    if l.count > 64 {
        return c.fail("contention.loads.count", "at most 64 loads");
    }
    if l.count > 0 && l.rate == 0 {
        return c.fail("contention.loads.rate", "must be more than 0");
    }
    if l.rate > 1_000_000 {
        return c.fail(
            "contention.loads.rate",
            "at most 1000000 requests/s per load",
        );
    }
    if l.work_us > 100_000 {
        return c.fail("contention.loads.work_us", "at most 100000 us per request");
    }
    Ok(())
}

fn check_flood(c: &Check, f: &Flood, hosts: &Hosts) -> Result<(), ScenarioError> {
    hosts.known(c, "contention.flood.from".into(), &f.from)?;
    hosts.known(c, "contention.flood.to".into(), &f.to)?;
    if f.from == f.to {
        return c.fail("contention.flood.to", "the flood must cross the wire");
    }
    if !(16..=1472).contains(&f.size) {
        return c.fail("contention.flood.size", "must be 16 to 1472 bytes");
    }
    if f.burst == 0 {
        return c.fail("contention.flood.burst", "must be at least 1");
    }
    if f.rate > 5_000_000 {
        return c.fail("contention.flood.rate", "at most 5000000 packets/s");
    }
    Ok(())
}

/// Generators are processes in namespaces.
fn check_generator_hosts(c: &Check, s: &Scenario) -> Result<(), ScenarioError> {
    let mut generator_hosts: Vec<(&str, &str)> = Vec::new();
    if let Some(l) = &s.contention.loads {
        generator_hosts.extend([
            ("contention.loads.on", l.on.as_str()),
            ("contention.loads.from", l.from.as_str()),
        ]);
    }
    if let Some(f) = &s.contention.flood {
        generator_hosts.extend([
            ("contention.flood.from", f.from.as_str()),
            ("contention.flood.to", f.to.as_str()),
        ]);
    }
    for cfg in &s.configurations {
        for (field, host) in &generator_hosts {
            let kind = kind_in(s, cfg, host);
            if kind != HostKind::Namespace {
                return c.fail(
                    *field,
                    format!(
                        "host `{host}` is a {} in configuration `{}`: contention generators run in namespace hosts",
                        kind.as_str(),
                        cfg.name
                    ),
                );
            }
        }
    }
    Ok(())
}
