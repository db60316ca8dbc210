//! A scenario's `[[machine]]` entries and what a scenario placing hosts on
//! them may say.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::model::{Configuration, HostKind, Scenario, WireKind};

/// Longest machine name (it becomes part of directory names).
const NAME_MAX: usize = 12;

/// A machine hosts may be placed on, reached with the system's `ssh`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    /// Lower-case letters and digits, at most 12.
    pub name: String,
    /// The SSH destination (`[user@]host`, or a `Host` of the SSH
    /// configuration): the user's keys and `~/.ssh/config` apply.
    pub ssh: String,
    /// An SSH configuration file used instead of `~/.ssh/config` (`ssh -F`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_config: Option<String>,
    /// More SSH options, each `Key=Value` (`ssh -o`), e.g. `Port=2222`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_options: Vec<String>,
}

impl MachineSpec {
    /// How to reach the machine, its connection master's socket in
    /// `control_dir`.
    pub fn ssh(&self, control_dir: &std::path::Path) -> vnio_topo::ssh::Ssh {
        vnio_topo::ssh::Ssh::new(
            &self.ssh,
            self.ssh_config.clone(),
            self.ssh_options.clone(),
            control_dir,
        )
    }
}

/// `ssh -o` options a scenario may carry only when the run trusts it
/// (`vnio lab run --trust-scenario`), since `vnio lab run` runs as root:
/// - they run a command on this machine through the shell: ProxyCommand,
///   ProxyJump (OpenSSH turns it into a proxy command line),
///   LocalCommand/PermitLocalCommand, KnownHostsCommand, Match (`exec`),
///   Include (a file that may hold any of these);
/// - they load code into ssh: PKCS11Provider, SecurityKeyProvider;
/// - they replace the command run there: RemoteCommand;
/// - they open a path between the machines beyond the session, or hand the
///   machine this one's credentials: LocalForward, RemoteForward,
///   DynamicForward, Tunnel, TunnelDevice, ForwardAgent, ForwardX11,
///   ForwardX11Trusted.
pub const TRUSTED_ONLY: &[&str] = &[
    "ProxyCommand",
    "ProxyJump",
    "LocalCommand",
    "PermitLocalCommand",
    "KnownHostsCommand",
    "Match",
    "Include",
    "PKCS11Provider",
    "SecurityKeyProvider",
    "RemoteCommand",
    "LocalForward",
    "RemoteForward",
    "DynamicForward",
    "Tunnel",
    "TunnelDevice",
    "ForwardAgent",
    "ForwardX11",
    "ForwardX11Trusted",
];

/// The first of `s`'s machines' `ssh_options` that needs a trusted
/// scenario ([`TRUSTED_ONLY`], keys compared as OpenSSH does, ignoring
/// case): `(machine, option)`.
pub fn needs_trust(s: &Scenario) -> Option<(String, String)> {
    s.machines.iter().find_map(|m| {
        m.ssh_options.iter().find_map(|o| {
            let key = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
            TRUSTED_ONLY
                .iter()
                .any(|t| t.eq_ignore_ascii_case(key))
                .then(|| (m.name.clone(), o.clone()))
        })
    })
}

/// Refuses, in one line naming the option, a scenario whose machines'
/// `ssh_options` need trust when the run does not give it.
pub fn check_trust(name: &str, s: &Scenario, trusted: bool) -> Result<(), String> {
    match needs_trust(s) {
        Some((machine, option)) if !trusted => Err(format!(
            "{name}: machine `{machine}`: ssh_options {option:?} runs commands or opens paths as root on this machine; a scenario file is code: run it with --trust-scenario only if you trust its author (docs/lab.md, \"Scenario files are code\")"
        )),
        _ => Ok(()),
    }
}

/// A check's failure: `(field, message)`.
type Failed = Result<(), (String, String)>;

fn fail(field: &str, message: String) -> Failed {
    Err((field.to_owned(), message))
}

/// Check the machines and the hosts placed on them; `(field, message)`.
pub fn check(s: &Scenario, kind_in: impl Fn(&Configuration, &str) -> HostKind) -> Failed {
    let names = check_entries(s)?;
    let placed = check_placed(s, &names)?;
    if placed.is_empty() {
        return Ok(());
    }
    if s.hosts.iter().all(|h| h.machine.is_some()) {
        return fail(
            "host",
            "every host is on another machine: at least one must be on this one (the runner measures from here)".into(),
        );
    }
    for w in &s.workloads {
        if placed.iter().any(|(h, _)| *h == w.from) {
            return fail(
                &format!("workload `{}`: from", w.name),
                format!(
                    "client `{}` is on another machine: clients run on this one",
                    w.from
                ),
            );
        }
    }
    if s.contention.loads.is_some() || s.contention.flood.is_some() {
        return fail(
            "contention",
            "contention is not available with hosts on other machines yet".into(),
        );
    }
    for cfg in &s.configurations {
        check_configuration(s, cfg, &placed, &kind_in)?;
    }
    Ok(())
}

/// The `[[machine]]` entries themselves; their names.
fn check_entries(s: &Scenario) -> Result<HashSet<&str>, (String, String)> {
    let mut names = HashSet::new();
    for m in &s.machines {
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        if m.name.is_empty() || m.name.len() > NAME_MAX || !m.name.chars().all(ok) {
            return Err((
                "machine.name".into(),
                format!(
                    "{:?} must be 1 to {NAME_MAX} lower-case letters and digits",
                    m.name
                ),
            ));
        }
        if !names.insert(m.name.as_str()) {
            return Err(("machine.name".into(), format!("{:?} appears twice", m.name)));
        }
        let at = format!("machine `{}`", m.name);
        if m.ssh.trim().is_empty() || m.ssh.starts_with('-') || m.ssh.contains(char::is_whitespace)
        {
            return Err((
                format!("{at}: ssh"),
                format!("{:?} is not an SSH destination ([user@]host)", m.ssh),
            ));
        }
        for o in &m.ssh_options {
            let key = o.split_once('=').map(|(k, _)| k.trim());
            if !matches!(key, Some(k) if !k.is_empty() && !k.contains(char::is_whitespace)) {
                return Err((
                    format!("{at}: ssh_options"),
                    format!("{o:?} is not Key=Value (an `ssh -o` option)"),
                ));
            }
        }
    }
    Ok(names)
}

/// The hosts placed on machines, `(host, machine)`: known machines, and
/// not remote as well.
fn check_placed<'a>(
    s: &'a Scenario,
    names: &HashSet<&str>,
) -> Result<Vec<(&'a str, &'a str)>, (String, String)> {
    let list = s
        .machines
        .iter()
        .map(|m| m.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let placed: Vec<(&str, &str)> = s
        .hosts
        .iter()
        .filter_map(|h| h.machine.as_deref().map(|m| (h.name.as_str(), m)))
        .collect();
    for (host, machine) in &placed {
        let at = format!("host `{host}`: machine");
        if !names.contains(machine) {
            fail(
                &at,
                format!("no machine named {machine:?} (machines: {list})"),
            )?;
        }
        if s.hosts.iter().any(|h| h.name == *host && h.remote) {
            fail(
                &at,
                "a host is either remote (behind the local uplink) or on a machine, not both"
                    .into(),
            )?;
        }
    }
    Ok(placed)
}

/// Configuration `cfg` with hosts on other machines: its wire, and the
/// kinds of the hosts on either side of it.
fn check_configuration(
    s: &Scenario,
    cfg: &Configuration,
    placed: &[(&str, &str)],
    kind_in: &impl Fn(&Configuration, &str) -> HostKind,
) -> Failed {
    let at = format!("configuration `{}`", cfg.name);
    match cfg.wire {
        WireKind::Veth | WireKind::Switch => {}
        other => {
            return fail(
                &format!("{at}: wire"),
                format!(
                    "hosts on other machines need wire = \"veth\" (a plain wire) or \"switch\" (the VXLAN overlay), not {:?}",
                    other.as_str()
                ),
            )
        }
    }
    for (host, _) in placed {
        let kind = kind_in(cfg, host);
        let ok = match cfg.wire {
            WireKind::Veth => kind == HostKind::Namespace,
            _ => matches!(kind, HostKind::Namespace | HostKind::PollMode),
        };
        if !ok {
            return fail(
                &format!("{at}: host `{host}`"),
                format!(
                    "on another machine a host is a namespace{} (not {})",
                    if cfg.wire == WireKind::Switch {
                        " or poll-mode"
                    } else {
                        ""
                    },
                    kind.as_str()
                ),
            );
        }
    }
    for h in &s.hosts {
        if h.machine.is_none()
            && cfg.wire == WireKind::Veth
            && kind_in(cfg, &h.name) != HostKind::Namespace
        {
            return fail(
                &format!("{at}: host `{}`", h.name),
                "a plain wire across machines joins namespace hosts".into(),
            );
        }
    }
    let knobs = s.knobs.layered(&cfg.knobs);
    if knobs.port_policy.is_some() {
        return fail(
            &format!("{at}: knobs.port_policy"),
            "port policies are not available across machines yet".into(),
        );
    }
    Ok(())
}
