//! The planner: from what the user asked ([`VmSpec`]), the host's facts
//! ([`HostFacts`]) and the accelerator decision, the exact QEMU command
//! line, the host-side actions (pinning, interfaces, switch policy) and,
//! for every latency setting, how it is realised and whether this host
//! honours it. Pure: no I/O, so every plan is unit-testable.
//!
//! Here: the plan's types and the order of the decisions; `plan/nics.rs`:
//! the NIC decisions; `plan/resources.rs`: cores and memory for latency
//! high; `plan/qemu_argv.rs`: the command line.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::accel::{Accel, AccelDecision};
use crate::addr::Mac;
use crate::cmdline::GuestConfig;
use crate::host::HostFacts;
use crate::spec::{Backend, Latency, Model, VmSpec};
use crate::state::VmDir;

mod nics;
mod qemu_argv;
mod resources;

pub use self::qemu_argv::shell_line;
pub use self::resources::dedicate_cores;

/// Whether a latency setting took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// In effect.
    Honoured,
    /// In effect with a weaker guarantee (the detail says which).
    Partial,
    /// Not in effect on this host (the detail says why).
    NotHonoured,
}

/// One latency setting: what, through which mechanism, honoured or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The setting, in the studies' terms.
    pub name: String,
    /// The QEMU or host mechanism.
    pub mechanism: String,
    /// Whether it is in effect.
    pub status: Status,
    /// Where, or why not.
    pub detail: String,
}

/// Which host CPUs run what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinning {
    /// The CPU of each vCPU (index = vCPU).
    pub vcpus: Vec<usize>,
    /// Where QEMU's other threads (main loop, I/O, RCU) run.
    pub housekeeping: Vec<usize>,
}

/// A NIC as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicPlan {
    /// QEMU's id (`nic0`...).
    pub id: String,
    /// Host side.
    pub backend: Backend,
    /// Device model.
    pub model: Model,
    /// MAC.
    pub mac: Mac,
    /// Host interface (tap or macvtap).
    pub host_ifname: Option<String>,
    /// For macvtap: the fd number QEMU finds the opened /dev/tapN on.
    pub fd: Option<i32>,
    /// virtio-net receive offloads offered to the guest.
    pub guest_offloads: bool,
    /// virtio-net on packed virtqueues.
    #[serde(default)]
    pub packed: bool,
    /// vhost-user queue pairs (1: single queue).
    #[serde(default = "one")]
    pub queues: u16,
    /// Switch port latency-high requested (vhost-user with a control socket,
    /// on a switch build that has the policy).
    pub switch_latency_high: bool,
}

fn one() -> u16 {
    1
}

/// The plan for one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// What the guest's init configures.
    pub guest: GuestConfig,
    /// NICs.
    pub nics: Vec<NicPlan>,
    /// vCPU pinning, when cores can be dedicated.
    pub pinning: Option<Pinning>,
    /// The latency settings (empty for `normal`).
    pub settings: Vec<Setting>,
    /// Accommodations worth knowing (not latency settings).
    pub notes: Vec<String>,
}

impl Plan {
    /// Settings not (fully) in effect.
    pub fn not_honoured(&self) -> impl Iterator<Item = &Setting> {
        self.settings
            .iter()
            .filter(|s| s.status != Status::Honoured)
    }

    /// Why `--strict` refuses this plan (`None`: every setting honoured).
    pub fn strict_refusal(&self) -> Option<String> {
        let refused: Vec<String> = self
            .not_honoured()
            .map(|s| format!("{}: {}", s.name, s.detail))
            .collect();
        (!refused.is_empty())
            .then(|| format!("--strict: this host cannot honour {}", refused.join("; ")))
    }
}

/// Everything the planner reads.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// The request.
    pub spec: &'a VmSpec,
    /// Kernel image.
    pub kernel: &'a Path,
    /// Initramfs.
    pub initrd: &'a Path,
    /// KVM or TCG, and why.
    pub accel: &'a AccelDecision,
    /// The host.
    pub host: &'a HostFacts,
    /// The VM's state directory.
    pub dir: &'a VmDir,
    /// The QEMU program.
    pub qemu: &'a str,
    /// What the switch answered to latency-high requests, by NIC index
    /// (empty, or `None` for a NIC: not asked yet, as when only printing).
    pub switch_answers: &'a [Option<SwitchAnswer>],
}

/// The switch's answer to "make the port serving this NIC latency-high".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SwitchAnswer {
    /// Done: the port has a dedicated busy-poll worker (on `core`).
    Dedicated {
        /// The port.
        port: String,
        /// The worker's core.
        core: Option<usize>,
    },
    /// Refused, with the switch's reason.
    Refused {
        /// The port.
        port: String,
        /// Why.
        why: String,
    },
}

/// The first fd number macvtap devices are handed to QEMU on (fixed, so
/// the command line is known before launch).
pub const MACVTAP_FD_BASE: i32 = 100;

fn setting(name: &str, mechanism: &str, status: Status, detail: impl Into<String>) -> Setting {
    Setting {
        name: name.into(),
        mechanism: mechanism.into(),
        status,
        detail: detail.into(),
    }
}

/// Plans the VM.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let spec = input.spec;
    let host = input.host;
    let high = spec.latency == Latency::High;
    let kvm = input.accel.accel == Accel::Kvm;
    let switch_ports = nics::switch_ports_to_reserve(input);
    let has_vhost_user = spec
        .nics
        .iter()
        .any(|n| matches!(n.backend, Backend::VhostUser { .. }));
    let mut settings = Vec::new();
    let mut notes = Vec::new();

    // vCPUs on dedicated cores.
    let pinning = if high {
        resources::vcpu_pinning(spec.vcpus as usize, switch_ports, host, &mut settings)
    } else {
        None
    };

    // Memory: shared (vhost-user maps it), preallocated and locked when high.
    let hugepage_backend = if high {
        resources::memory_and_idle(spec.mem_mib, kvm, host, &mut settings)
    } else {
        None
    };

    let nics = nics::nic_plans(input, &mut settings, &mut notes);
    let guest = guest_config(spec);
    let argv = qemu_argv::qemu_argv(input, &nics, &settings, hugepage_backend.as_deref(), &guest);

    if !kvm && has_vhost_user {
        notes.push(
            "vhost-user NICs use vectors=0 (INTx) under TCG: QEMU 7.2 crashes on MSI-X there"
                .into(),
        );
    }

    Plan {
        argv,
        guest,
        nics,
        pinning,
        settings,
        notes,
    }
}

/// Guest settings on the kernel command line.
fn guest_config(spec: &VmSpec) -> GuestConfig {
    GuestConfig {
        hostname: spec.name.clone(),
        addrs: spec
            .nics
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.ip.map(|ip| (spec.mac(i), ip)))
            .collect(),
        gateway: spec.gateway,
        routes: spec.routes.clone(),
        agent_port: spec.agent_port,
        agent_token: spec.agent_token.clone(),
        channels: spec
            .nics
            .iter()
            .enumerate()
            .filter(|(_, n)| n.queues > 1)
            .map(|(i, n)| (spec.mac(i), n.queues))
            .collect(),
    }
}

/// A state directory for planning outside the runtime root (printing).
pub fn placeholder_dir(name: &str) -> VmDir {
    VmDir::at(PathBuf::from("/run/vnio/vm").join(name))
}
