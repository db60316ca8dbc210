//! The `[[configuration]]` entries: unique names, the hosts they name,
//! which host kinds each wire can join, remote hosts and the uplink, and
//! the knobs as layered over the scenario's (with the DPDK endpoints'
//! and the virtqueue layout's own checks).

use std::collections::HashSet;

use super::endpoints::check_endpoints;
use super::hosts::Hosts;
use super::virtqueue::check_virtqueue;
use super::{kind_in, Check, NAME_MAX};
use crate::scenario::knobs::{self, Knobs, PortPolicy};
use crate::scenario::model::{Configuration, HostKind, Scenario, WireKind};
use crate::scenario::ScenarioError;

/// Checks the `[[configuration]]` entries.
pub(super) fn check_configurations(
    c: &Check,
    s: &Scenario,
    hosts: &Hosts,
) -> Result<(), ScenarioError> {
    if s.configurations.is_empty() {
        return c.fail(
            "configuration",
            "a scenario needs at least one configuration",
        );
    }
    let mut names = HashSet::new();
    for cfg in &s.configurations {
        c.name("configuration.name", &cfg.name, NAME_MAX, true)?;
        let at = format!("configuration `{}`", cfg.name);
        if !names.insert(cfg.name.as_str()) {
            return c.fail(&at, "name appears twice");
        }
        for host in cfg.hosts.keys() {
            hosts.known(c, format!("{at}: hosts"), host)?;
        }
        check_host_kinds(c, s, cfg, &at)?;
        let remote: Vec<&str> = s
            .hosts
            .iter()
            .filter(|h| h.remote)
            .map(|h| h.name.as_str())
            .collect();
        check_wire(c, s, cfg, &at, &remote)?;
        check_knobs(c, s, cfg, &at, &remote)?;
    }
    Ok(())
}

/// Which kinds of host the configuration's wire can join.
fn check_host_kinds(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    at: &str,
) -> Result<(), ScenarioError> {
    for h in &s.hosts {
        let kind = kind_in(s, cfg, &h.name);
        if kind == HostKind::PollMode && !cfg.wire.has_vhost_user() {
            return c.fail(
                format!("{at}: host `{}`", h.name),
                format!(
                    "a poll-mode endpoint needs wire = \"switch\", \"ovs-dpdk\" or \"testpmd\" (a vhost-user port), not {:?}",
                    cfg.wire.as_str()
                ),
            );
        }
        if cfg.wire.is_anchor() && (kind != HostKind::PollMode || h.remote) {
            return c.fail(
                format!("{at}: host `{}`", h.name),
                format!(
                    "wire = {:?} joins two poll-mode endpoints (kind = \"poll-mode\", not remote)",
                    cfg.wire.as_str()
                ),
            );
        }
        if kind == HostKind::Vm && cfg.wire == WireKind::Veth {
            return c.fail(
                format!("{at}: host `{}`", h.name),
                "a VM host needs wire = \"switch\" (a vhost-user port) or \"bridge\" (a tap on the Linux bridge)",
            );
        }
    }
    Ok(())
}

/// Remote hosts need an uplink; two-port wires need two hosts.
fn check_wire(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    at: &str,
    remote: &[&str],
) -> Result<(), ScenarioError> {
    if let Some(r) = remote.first() {
        if cfg.wire == WireKind::Veth {
            return c.fail(
                format!("{at}: wire"),
                format!("host `{r}` is remote: a veth wire has no uplink (use bridge or switch)"),
            );
        }
        for r in remote {
            if kind_in(s, cfg, r) != HostKind::Namespace {
                return c.fail(
                    format!("{at}: host `{r}`"),
                    "a remote host (behind the uplink) is a namespace",
                );
            }
        }
    }
    if cfg.wire.is_anchor() && s.hosts.len() != 2 {
        return c.fail(
            format!("{at}: wire"),
            format!(
                "{:?} has two ports: the scenario needs exactly two hosts, it has {}",
                cfg.wire.as_str(),
                s.hosts.len()
            ),
        );
    }
    if cfg.wire == WireKind::Veth && s.hosts.len() != 2 {
        return c.fail(
            format!("{at}: wire"),
            format!(
                "a veth joins exactly two hosts, this scenario has {} (use bridge or switch)",
                s.hosts.len()
            ),
        );
    }
    Ok(())
}

/// The knobs as layered for the configuration.
fn check_knobs(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    at: &str,
    remote: &[&str],
) -> Result<(), ScenarioError> {
    let knobs = s.knobs.layered(&cfg.knobs);
    let knob_at = format!("{at}: knobs");
    knobs::check(&knob_at, &knobs, cfg.wire)
        .and_then(|()| knobs::check_hosts(s, &knob_at, &knobs, |h| kind_in(s, cfg, h)))
        .and_then(|()| knobs::check_probe(&knob_at, &knobs))
        .or_else(|(field, message)| c.fail(field, message))?;
    check_endpoints(c, s, cfg, knobs.endpoints, knobs.instrument)?;
    check_virtqueue(c, s, cfg, knobs.virtqueue, knobs.endpoints)?;
    let has_vm = s
        .hosts
        .iter()
        .any(|h| kind_in(s, cfg, &h.name) == HostKind::Vm);
    if has_vm && (knobs.client_cpus.is_some() || knobs.agent_cpus.is_some()) {
        return c.fail(
            format!("{at}: knobs"),
            "client_cpus and agent_cpus pin threads to host CPUs; a guest has its own: leave them out with VM hosts",
        );
    }
    check_direct(c, s, cfg, at, remote, &knobs)
}

/// `port_policy = "direct"` binds vhost-user ports to uplink queues.
fn check_direct(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    at: &str,
    remote: &[&str],
    knobs: &Knobs,
) -> Result<(), ScenarioError> {
    if knobs.port_policy != Some(PortPolicy::Direct) {
        return Ok(());
    }
    if remote.is_empty() {
        return c.fail(
            format!("{at}: knobs.port_policy"),
            "\"direct\" binds the client's port to a queue of the switch's uplink: the scenario needs a remote host (remote = true)",
        );
    }
    for w in s
        .workloads
        .iter()
        .filter(|_| knobs.port_policy_hosts.is_none())
    {
        if kind_in(s, cfg, &w.from) == HostKind::Namespace {
            return c.fail(
                format!("{at}: knobs.port_policy"),
                format!(
                    "\"direct\" applies to vhost-user ports: client `{}` is a namespace on a tap port (make it poll-mode or vm)",
                    w.from
                ),
            );
        }
    }
    Ok(())
}
