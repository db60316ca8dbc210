//! The NIC decisions: each NIC's id, MAC, host interface and macvtap fd,
//! and for latency high whether its backend is served in the kernel
//! (vhost-net) or by a switch port with its own busy-poll worker, from
//! the switch's answer when there is one.

use std::path::{Path, PathBuf};

use super::{setting, NicPlan, PlanInput, Setting, Status, SwitchAnswer, MACVTAP_FD_BASE};
use crate::host::HostFacts;
use crate::spec::{Backend, Latency};

/// The switch's answer for NIC `i`, if it has answered.
fn answer(input: &PlanInput<'_>, i: usize) -> Option<SwitchAnswer> {
    input.switch_answers.get(i).cloned().flatten()
}

/// The switch ports to leave a free core for: a switch port asked to go
/// latency-high gets a dedicated worker core, reserved here until the
/// switch has answered (then it is held).
pub(super) fn switch_ports_to_reserve(input: &PlanInput<'_>) -> usize {
    input
        .spec
        .nics
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            matches!(
                n.backend,
                Backend::VhostUser {
                    control: Some(_),
                    ..
                }
            ) && answer(input, *i).is_none()
        })
        .count()
}

/// Every NIC's plan; their latency settings go to `settings`, what is
/// worth knowing about passthrough NICs to `notes`.
pub(super) fn nic_plans(
    input: &PlanInput<'_>,
    settings: &mut Vec<Setting>,
    notes: &mut Vec<String>,
) -> Vec<NicPlan> {
    let spec = input.spec;
    let high = spec.latency == Latency::High;
    let mut nics = Vec::new();
    let mut macvtap_fd = MACVTAP_FD_BASE;
    for (i, nic) in spec.nics.iter().enumerate() {
        let mut plan = NicPlan {
            id: format!("nic{i}"),
            backend: nic.backend.clone(),
            model: nic.model,
            mac: spec.mac(i),
            host_ifname: spec.host_ifname(i),
            fd: None,
            guest_offloads: nic.guest_offloads,
            packed: nic.packed,
            queues: nic.queues,
            switch_latency_high: false,
        };
        match &nic.backend {
            Backend::VhostUser {
                control, socket, ..
            } => {
                if high {
                    let answer = answer(input, i);
                    settings.push(switch_port_setting(&mut plan, control, socket, answer));
                }
            }
            Backend::Vfio { .. } | Backend::Sriov { .. } => {
                notes.push(crate::passthrough::note(&plan.id));
            }
            Backend::Tap { .. } | Backend::Macvtap { .. } => {
                if matches!(nic.backend, Backend::Macvtap { .. }) {
                    plan.fd = Some(macvtap_fd);
                    macvtap_fd += 1;
                }
                if high {
                    settings.push(vhost_net_setting(&plan, input.host));
                }
            }
        }
        nics.push(plan);
    }
    nics
}

/// Latency high for a vhost-user NIC: its switch port with its own
/// busy-poll worker, asked at launch (no `answer` yet) or as the switch
/// answered, for the NIC on `socket` whose switch listens on `control`.
/// Marks `plan` for the request when it is to be made or was made.
fn switch_port_setting(
    plan: &mut NicPlan,
    control: &Option<PathBuf>,
    socket: &Path,
    answer: Option<SwitchAnswer>,
) -> Setting {
    let (status, detail) = match (control, answer) {
        (None, _) => (
            Status::NotHonoured,
            format!(
                "no switch control socket for {} (add control=PATH to the NIC)",
                socket.display()
            ),
        ),
        (Some(c), None) => {
            plan.switch_latency_high = true;
            (
                Status::Honoured,
                format!(
                    "requested at launch from the switch at {} for the port of {}",
                    c.display(),
                    socket.display()
                ),
            )
        }
        (Some(_), Some(SwitchAnswer::Dedicated { port, core })) => {
            plan.switch_latency_high = true;
            (
                Status::Honoured,
                match core {
                    Some(c) => {
                        format!("port {port}: its own busy-poll worker on CPU {c}")
                    }
                    None => format!("port {port}: its own busy-poll worker"),
                },
            )
        }
        (Some(_), Some(SwitchAnswer::Refused { port, why })) => (
            Status::NotHonoured,
            format!("the switch refused for port {port}: {why}"),
        ),
    };
    setting(
        &format!("switch port latency-high ({})", plan.id),
        "switch control port_set latency=high (busy-poll worker, coalescing and LRO off)",
        status,
        detail,
    )
}

/// Latency high for a tap or macvtap NIC: served by the host kernel's
/// vhost-net where the host has it.
fn vhost_net_setting(plan: &NicPlan, host: &HostFacts) -> Setting {
    setting(
        &format!("in-kernel NIC backend ({})", plan.id),
        "-netdev tap,vhost=on (vhost-net)",
        if host.vhost_net {
            Status::Honoured
        } else {
            Status::NotHonoured
        },
        if host.vhost_net {
            "virtio-net served by the host kernel's vhost-net".to_string()
        } else {
            "no /dev/vhost-net on this host: QEMU's main loop serves the tap".to_string()
        },
    )
}
