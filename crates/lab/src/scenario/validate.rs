//! What a scenario may say: names, references between hosts, configurations
//! and workloads, and (in `validate/workload.rs`) the parameters that apply
//! to each workload kind. What this build of vnio can run is in
//! `capabilities.rs`.

use std::collections::HashSet;

use super::model::*;
use super::ScenarioError;

mod endpoints;
mod virtqueue;
mod workload;

use self::endpoints::check_endpoints;
use self::virtqueue::check_virtqueue;
use self::workload::check_workload;

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

/// Validate a scenario completely (everything but what this build can run).
pub(super) fn scenario(origin: &str, s: &Scenario) -> Result<(), ScenarioError> {
    let c = Check { origin };
    if s.title.trim().is_empty() {
        return c.fail("title", "is empty");
    }
    if s.run.duration.is_zero() {
        return c.fail("run.duration", "must be more than 0");
    }
    if s.run.iterations == 0 || s.run.iterations > 100 {
        return c.fail("run.iterations", "must be 1 to 100");
    }
    if s.run.placement_seconds > 0 && !s.run.interleave {
        return c.fail(
            "run.placement_seconds",
            "needs interleave = true: the repetitions added must reach every configuration alike",
        );
    }
    if let Some(m) = s.run.max_iterations {
        if m < s.run.iterations || m > 100 {
            return c.fail("run.max_iterations", "must be from run.iterations to 100");
        }
    }

    // Hosts.
    if s.hosts.len() < 2 {
        return c.fail("host", "a scenario needs at least two hosts");
    }
    if s.hosts.iter().all(|h| h.remote) {
        return c.fail(
            "host",
            "every host is remote: at least one must be on the wire",
        );
    }
    let mut hosts = HashSet::new();
    for h in &s.hosts {
        c.name("host.name", &h.name, HOST_NAME_MAX, false)?;
        if !hosts.insert(h.name.as_str()) {
            return c.fail("host.name", format!("{:?} appears twice", h.name));
        }
    }
    let host_list = s
        .hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let known_host = |field: String, name: &str| -> Result<(), ScenarioError> {
        if hosts.contains(name) {
            Ok(())
        } else {
            c.fail(
                field,
                format!("no host named {name:?} (hosts: {host_list})"),
            )
        }
    };

    // Configurations.
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
            known_host(format!("{at}: hosts"), host)?;
        }
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
        let has_vm = s
            .hosts
            .iter()
            .any(|h| kind_in(s, cfg, &h.name) == HostKind::Vm);
        let remote: Vec<&str> = s
            .hosts
            .iter()
            .filter(|h| h.remote)
            .map(|h| h.name.as_str())
            .collect();
        if let Some(r) = remote.first() {
            if cfg.wire == WireKind::Veth {
                return c.fail(
                    format!("{at}: wire"),
                    format!(
                        "host `{r}` is remote: a veth wire has no uplink (use bridge or switch)"
                    ),
                );
            }
            for r in &remote {
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
        let knobs = s.knobs.layered(&cfg.knobs);
        let knob_at = format!("{at}: knobs");
        super::knobs::check(&knob_at, &knobs, cfg.wire)
            .and_then(|()| super::knobs::check_hosts(s, &knob_at, &knobs, |h| kind_in(s, cfg, h)))
            .and_then(|()| super::knobs::check_probe(&knob_at, &knobs))
            .or_else(|(field, message)| c.fail(field, message))?;
        check_endpoints(&c, s, cfg, knobs.endpoints, knobs.instrument)?;
        check_virtqueue(&c, s, cfg, knobs.virtqueue, knobs.endpoints)?;
        if has_vm && (knobs.client_cpus.is_some() || knobs.agent_cpus.is_some()) {
            return c.fail(
                format!("{at}: knobs"),
                "client_cpus and agent_cpus pin threads to host CPUs; a guest has its own: leave them out with VM hosts",
            );
        }
        if knobs.port_policy == Some(PortPolicy::Direct) {
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
        }
    }
    super::knobs::check("knobs", &s.knobs, WireKind::Switch)
        .or_else(|(field, message)| c.fail(field, message))?;
    if let Err((field, message)) = super::machines::check(s, |cfg, name| kind_in(s, cfg, name)) {
        return c.fail(field, message);
    }

    // Workloads.
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
        known_host(format!("{at}: from"), &w.from)?;
        if w.to.is_empty() {
            return c.fail(format!("{at}: to"), "names no host");
        }
        for t in &w.to {
            known_host(format!("{at}: to"), t)?;
            if *t == w.from {
                return c.fail(format!("{at}: to"), format!("{t:?} is also the client"));
            }
        }
        check_workload(&c, &at, w, None)?;
    }

    // Contention.
    if let Some(l) = &s.contention.loads {
        known_host("contention.loads.on".into(), &l.on)?;
        known_host("contention.loads.from".into(), &l.from)?;
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
    }
    if let Some(f) = &s.contention.flood {
        known_host("contention.flood.from".into(), &f.from)?;
        known_host("contention.flood.to".into(), &f.to)?;
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
            check_cpus(&c, field, cpus)?;
        }
    }

    // Generators are processes in namespaces.
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

    // Sweep.
    if let Some(sw) = &s.sweep {
        let at = format!("sweep ({})", sw.parameter.as_str());
        if sw.values.is_empty() {
            return c.fail(format!("{at}: values"), "is empty");
        }
        match sw.parameter {
            SweepParam::FloodRate if s.contention.flood.is_none() => {
                return c.fail(&at, "needs a [contention.flood] to vary")
            }
            SweepParam::Loads if s.contention.loads.is_none() => {
                return c.fail(&at, "needs a [contention.loads] to vary")
            }
            _ => {}
        }
        for &v in &sw.values {
            for w in &s.workloads {
                check_workload(
                    &c,
                    &format!("{at}: value {v}: workload `{}`", w.name),
                    w,
                    Some((sw.parameter, v)),
                )?;
            }
            match sw.parameter {
                SweepParam::Loads if v > 64 => return c.fail(&at, "at most 64 loads"),
                SweepParam::FloodRate if v > 5_000_000 => {
                    return c.fail(&at, "at most 5000000 packets/s")
                }
                _ => {}
            }
        }
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
