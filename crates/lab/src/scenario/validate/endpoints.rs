//! The DPDK endpoints (knob `endpoints = "dpdk"`): what they can drive.
//! The program owns the two poll-mode hosts' ports and sends UDP frames
//! one way (stream) or one at a time there and back (rr); a workload
//! asking for anything else is an error when the scenario is loaded, not
//! a point skipped at run time: no machine could run it.

use super::{kind_in, Check};
use crate::scenario::knobs::Endpoints;
use crate::scenario::model::{
    Configuration, HostKind, Protocol, Scenario, WorkloadKind, WorkloadSpec,
};
use crate::scenario::ScenarioError;

/// Checks configuration `cfg` of `s`, whose knobs layer to `endpoints`.
pub(super) fn check_endpoints(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    endpoints: Option<Endpoints>,
    instrument: Option<crate::scenario::Instrument>,
) -> Result<(), ScenarioError> {
    if endpoints != Some(Endpoints::Dpdk) {
        return Ok(());
    }
    let at = format!("configuration `{}`: knobs.endpoints", cfg.name);
    if instrument.is_some_and(|i| i != crate::scenario::Instrument::Vnio) {
        return c.fail(
            at,
            "\"dpdk\" is itself the instrument: leave `instrument` out",
        );
    }
    for w in &s.workloads {
        check_workload(c, &at, s, cfg, w)?;
    }
    Ok(())
}

/// Workload `w` is one the DPDK endpoints drive, between poll-mode hosts.
fn check_workload(
    c: &Check,
    at: &str,
    s: &Scenario,
    cfg: &Configuration,
    w: &WorkloadSpec,
) -> Result<(), ScenarioError> {
    let udp = w.protocol == Some(Protocol::Udp);
    if !udp || !matches!(w.kind, WorkloadKind::Stream | WorkloadKind::Rr) {
        let what = match (w.kind, w.protocol) {
            (WorkloadKind::Ping, _) => "ping".to_owned(),
            (k, p) => format!(
                "{} over {}",
                k.as_str(),
                if p == Some(Protocol::Udp) {
                    "UDP"
                } else {
                    "TCP"
                }
            ),
        };
        return c.fail(
            at,
            format!(
                "\"dpdk\" drives UDP streams and UDP rr only (protocol = \"udp\"): workload `{}` is {what}",
                w.name
            ),
        );
    }
    for h in std::iter::once(&w.from).chain(&w.to) {
        let kind = kind_in(s, cfg, h);
        if kind != HostKind::PollMode {
            return c.fail(
                at,
                format!(
                    "\"dpdk\" drives a pair of poll-mode hosts: workload `{}` involves `{h}`, a {}",
                    w.name,
                    kind.as_str()
                ),
            );
        }
    }
    if w.size.is_some_and(|n| n > crate::scenario::MAX_PAYLOAD) {
        return c.fail(
            at,
            format!(
                "\"dpdk\" sends frames up to 1518 B: workload `{}` has size {} (at most {} B of UDP payload)",
                w.name,
                w.size.unwrap_or_default(),
                crate::scenario::MAX_PAYLOAD
            ),
        );
    }
    Ok(())
}
