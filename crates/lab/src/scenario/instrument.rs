//! The instrument a configuration measures with (knob `instrument`) and
//! which workloads each can measure: data the scenario's plan decides
//! skips with. Whether a tool's program is installed is probed by
//! [`crate::probe`] and handed in through [`super::Capabilities`]; the
//! tools themselves run in [`crate::tools`].

use serde::{Deserialize, Serialize};

use super::model::{HostKind, Protocol, WorkloadKind, WorkloadSpec};

/// The instrument a configuration measures with.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Instrument {
    /// vnio's own (`vnio rr`, `ping`, `stream`).
    #[default]
    Vnio,
    /// sockperf ping-pong (request-response, UDP or TCP).
    Sockperf,
    /// iperf3 (TCP streams).
    Iperf3,
    /// The least a request-response loop can do on a socket (the floor).
    RawEcho,
}

impl Instrument {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Instrument::Vnio => "vnio",
            Instrument::Sockperf => "sockperf",
            Instrument::Iperf3 => "iperf3",
            Instrument::RawEcho => "raw-echo",
        }
    }

    /// The program it runs, when it is not vnio's own.
    pub fn program(self) -> Option<&'static str> {
        match self {
            Instrument::Sockperf => Some("sockperf"),
            Instrument::Iperf3 => Some("iperf3"),
            _ => None,
        }
    }
}

/// What to install for `tool`, as one line (its program is missing).
pub fn not_installed(prog: &str) -> String {
    format!("{prog} is not installed: apt-get install {prog} (or scripts/setup --bench)")
}

/// Why workload `kind` over `protocol` cannot be measured with `tool`
/// (None: it can), `installed` saying whether its program is here.
pub fn skip_reason(
    tool: Instrument,
    kind: WorkloadKind,
    protocol: Protocol,
    installed: bool,
) -> Option<String> {
    let fits = match tool {
        Instrument::Vnio => true,
        Instrument::Sockperf | Instrument::RawEcho => kind == WorkloadKind::Rr,
        Instrument::Iperf3 => kind == WorkloadKind::Stream && protocol == Protocol::Tcp,
    };
    if !fits {
        let does = match tool {
            Instrument::Iperf3 => "TCP streams",
            _ => "request-response",
        };
        return Some(format!(
            "the {} configuration measures {does} only, not {} over {}",
            tool.as_str(),
            kind.as_str(),
            if protocol == Protocol::Udp {
                "UDP"
            } else {
                "TCP"
            }
        ));
    }
    match tool.program() {
        Some(prog) if !installed => Some(not_installed(prog)),
        _ => None,
    }
}

/// Why workload `w` cannot run in a configuration measuring with `tool`,
/// its hosts' kinds given by `kind_of`, `installed` saying whether its
/// program is here (None: it can).
pub fn plan_skip(
    tool: Instrument,
    w: &WorkloadSpec,
    kind_of: impl Fn(&str) -> HostKind,
    installed: bool,
) -> Option<String> {
    if tool == Instrument::Vnio {
        return None;
    }
    let hosts = std::iter::once(&w.from).chain(&w.to);
    if let Some(h) = hosts.clone().find(|h| kind_of(h) != HostKind::Namespace) {
        return Some(format!(
            "the {} configuration runs between namespace hosts: `{h}` is not one",
            tool.as_str()
        ));
    }
    let _ = hosts;
    if w.to.len() != 1
        || w.sessions.unwrap_or(1) != 1
        || w.burst.unwrap_or(1) != 1
        || w.rate.is_some()
        || w.reverse == Some(true)
        || w.response_size.is_some_and(|r| Some(r) != w.size)
    {
        return Some(format!(
            "the {} configuration runs one closed-loop session to one target, same size both ways",
            tool.as_str()
        ));
    }
    skip_reason(tool, w.kind, w.protocol.unwrap_or_default(), installed)
}
