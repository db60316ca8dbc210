//! The virtqueue layout (knob `virtqueue`): where "packed" can take effect.
//! Only the DPDK endpoints can offer packed rings (`packed_vq=1,in_order=1`
//! on their `net_virtio_user` devices); the lab's own endpoints
//! (`vnio_switch::endpoint`) drive split rings only, and a guest's NIC is
//! QEMU's. A configuration where "packed" would reach none of the rings,
//! or only some of them, is refused when the scenario is loaded: a run
//! that says "packed" must have measured packed rings.

use super::{kind_in, Check};
use crate::scenario::knobs::{Endpoints, Virtqueue};
use crate::scenario::model::{Configuration, HostKind, Scenario};
use crate::scenario::ScenarioError;

/// Checks configuration `cfg` of `s`, whose knobs layer to `virtqueue`
/// and `endpoints`. Called after the endpoints' own check, so every host
/// a workload names is a poll-mode host the DPDK program drives.
pub(super) fn check_virtqueue(
    c: &Check,
    s: &Scenario,
    cfg: &Configuration,
    virtqueue: Option<Virtqueue>,
    endpoints: Option<Endpoints>,
) -> Result<(), ScenarioError> {
    if virtqueue != Some(Virtqueue::Packed) {
        return Ok(());
    }
    let at = format!("configuration `{}`: knobs.virtqueue", cfg.name);
    if endpoints != Some(Endpoints::Dpdk) {
        // Unset means the lab's own endpoints (the default).
        return c.fail(
            at,
            "\"packed\" needs endpoints = \"dpdk\": the lab's own endpoints (vnio_switch::endpoint) drive split rings only",
        );
    }
    // Hosts with a virtqueue the program does not drive would keep split
    // rings beside the packed ones.
    let driven = |h: &str| {
        s.workloads
            .iter()
            .any(|w| w.from == h || w.to.iter().any(|t| t == h))
    };
    for h in &s.hosts {
        let why = match kind_in(s, cfg, &h.name) {
            HostKind::Vm => "a VM: its NIC is QEMU's, which the knob does not set",
            HostKind::PollMode if !driven(&h.name) => {
                "in no workload: it answers as the lab's own endpoint, whose rings are split"
            }
            _ => continue,
        };
        return c.fail(
            at,
            format!(
                "\"packed\" sets the DPDK endpoints' rings only: host `{}` is {why}",
                h.name
            ),
        );
    }
    Ok(())
}
