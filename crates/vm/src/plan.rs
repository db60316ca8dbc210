//! The planner: from what the user asked ([`VmSpec`]), the host's facts
//! ([`HostFacts`]) and the accelerator decision, the exact QEMU command
//! line, the host-side actions (pinning, interfaces, switch policy) and,
//! for every latency setting, how it is realised and whether this host
//! honours it. Pure: no I/O, so every plan is unit-testable.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::accel::{Accel, AccelDecision};
use crate::addr::Mac;
use crate::cmdline::GuestConfig;
use crate::host::{format_cpu_list, HostFacts};
use crate::spec::{Backend, Latency, Model, VmSpec};
use crate::state::VmDir;

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

/// Dedicated cores for `vcpus` vCPUs: the highest free CPUs, isolated ones
/// first; CPU 0 (the lowest online) stays for the host, and one more free
/// CPU is left per switch port for its latency-high busy-poll worker (the
/// switch places that worker itself).
pub fn dedicate_cores(
    vcpus: usize,
    switch_pollers: usize,
    host: &HostFacts,
) -> Result<Pinning, String> {
    let online = &host.cpus_online;
    let held: Vec<usize> = host
        .cpus_held
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .collect();
    let housekeeping_cpu = online.first().copied().unwrap_or(0);
    let mut pool: Vec<usize> = online
        .iter()
        .copied()
        .filter(|c| *c != housekeeping_cpu && !held.contains(c))
        .collect();
    let need = vcpus + switch_pollers + 1;
    if pool.len() < vcpus + switch_pollers {
        let pollers = match switch_pollers {
            0 => String::new(),
            1 => "1 switch poller + ".to_string(),
            n => format!("{n} switch pollers + "),
        };
        let mut why = format!(
            "{vcpus} vCPU{} + {pollers}1 housekeeping core need {need} cores; this host has {} online ({})",
            if vcpus == 1 { "" } else { "s" },
            online.len(),
            format_cpu_list(online),
        );
        for (holder, cpus) in &host.cpus_held {
            why.push_str(&format!(", {} held by {holder}", format_cpu_list(cpus)));
        }
        return Err(why);
    }
    // Isolated first, then highest numbers first.
    pool.sort_by_key(|c| (!host.cpus_isolated.contains(c), std::cmp::Reverse(*c)));
    let vcpu_cores: Vec<usize> = pool[..vcpus].to_vec();
    let housekeeping = online
        .iter()
        .copied()
        .filter(|c| !vcpu_cores.contains(c) && !held.contains(c))
        .collect();
    Ok(Pinning {
        vcpus: vcpu_cores,
        housekeeping,
    })
}

fn setting(name: &str, mechanism: &str, status: Status, detail: impl Into<String>) -> Setting {
    Setting {
        name: name.into(),
        mechanism: mechanism.into(),
        status,
        detail: detail.into(),
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Plans the VM.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let spec = input.spec;
    let host = input.host;
    let high = spec.latency == Latency::High;
    let kvm = input.accel.accel == Accel::Kvm;
    // A switch port asked to go latency-high gets a dedicated worker core:
    // reserved here until the switch has answered (then it is held).
    let answer = |i: usize| input.switch_answers.get(i).cloned().flatten();
    let switch_ports = spec
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
            ) && answer(*i).is_none()
        })
        .count();
    let has_vhost_user = spec
        .nics
        .iter()
        .any(|n| matches!(n.backend, Backend::VhostUser { .. }));
    let mut settings = Vec::new();
    let mut notes = Vec::new();

    // vCPUs on dedicated cores.
    let pinning = if high {
        match dedicate_cores(spec.vcpus as usize, switch_ports, host) {
            Ok(p) => {
                let not_isolated: Vec<usize> = p
                    .vcpus
                    .iter()
                    .copied()
                    .filter(|c| !host.cpus_isolated.contains(c))
                    .collect();
                let (status, detail) = if not_isolated.is_empty() {
                    (
                        Status::Honoured,
                        format!("vCPUs on isolated CPUs {}", format_cpu_list(&p.vcpus)),
                    )
                } else {
                    (
                        Status::Partial,
                        format!(
                            "vCPUs on CPUs {}; {} not isolated (isolcpus/nohz_full), so host tasks may still run there",
                            format_cpu_list(&p.vcpus),
                            format_cpu_list(&not_isolated)
                        ),
                    )
                };
                settings.push(setting(
                    "dedicated vCPU cores",
                    "QMP query-cpus-fast thread ids + sched_setaffinity",
                    status,
                    detail,
                ));
                settings.push(setting(
                    "emulator threads off the vCPU cores",
                    "sched_setaffinity of QEMU's other threads",
                    Status::Honoured,
                    format!("on CPUs {}", format_cpu_list(&p.housekeeping)),
                ));
                Some(p)
            }
            Err(why) => {
                settings.push(setting(
                    "dedicated vCPU cores",
                    "QMP query-cpus-fast thread ids + sched_setaffinity",
                    Status::NotHonoured,
                    format!("{why}: vCPUs not pinned"),
                ));
                None
            }
        }
    } else {
        None
    };

    // Memory: shared (vhost-user maps it), preallocated and locked when high.
    let mem = spec.mem_mib;
    let mut hugepage_backend = None;
    if high {
        settings.push(setting(
            "preallocated memory",
            "memory backend prealloc=on",
            Status::Honoured,
            format!("{mem} MiB touched at start"),
        ));
        match host.memlock_limit {
            Some(limit) if limit < mem * 1024 * 1024 => settings.push(setting(
                "locked memory",
                "-overcommit mem-lock=on",
                Status::NotHonoured,
                format!(
                    "RLIMIT_MEMLOCK is {} KiB, the guest needs {mem} MiB (run as root or raise the limit)",
                    limit / 1024
                ),
            )),
            _ => settings.push(setting(
                "locked memory",
                "-overcommit mem-lock=on",
                Status::Honoured,
                "QEMU's memory mlock()ed",
            )),
        }
        match &host.hugepages {
            Some(h) if h.free * h.page_kib >= mem * 1024 => {
                hugepage_backend = Some(h.mount.clone());
                settings.push(setting(
                    "hugepages",
                    "memory-backend-file on hugetlbfs",
                    Status::Honoured,
                    format!("{} KiB pages from {}", h.page_kib, h.mount.display()),
                ));
            }
            Some(h) => settings.push(setting(
                "hugepages",
                "memory-backend-file on hugetlbfs",
                Status::NotHonoured,
                format!(
                    "{} free {} KiB pages on {}, the guest needs {mem} MiB: memfd with 4 KiB pages instead",
                    h.free,
                    h.page_kib,
                    h.mount.display()
                ),
            )),
            None => settings.push(setting(
                "hugepages",
                "memory-backend-file on hugetlbfs",
                Status::NotHonoured,
                if host.hugepages_free_unmounted > 0 {
                    "no hugetlbfs mounted: memfd with 4 KiB pages instead".to_string()
                } else {
                    "no hugepages reserved (vm.nr_hugepages) and no hugetlbfs mounted: memfd with 4 KiB pages instead".to_string()
                },
            )),
        }
        if kvm {
            settings.push(setting(
                "guest idles without exits",
                "-overcommit cpu-pm=on",
                Status::Honoured,
                "HLT/MWAIT/PAUSE run in the guest on its dedicated core",
            ));
        } else {
            settings.push(setting(
                "guest idles without exits",
                "-overcommit cpu-pm=on",
                Status::NotHonoured,
                "cpu-pm needs KVM; this VM runs under TCG (see accel)",
            ));
        }
    }

    // NICs.
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
                    let (status, detail) = match (control, answer(i)) {
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
                    settings.push(setting(
                        &format!("switch port latency-high ({})", plan.id),
                        "switch control port_set latency=high (busy-poll worker, coalescing and LRO off)",
                        status,
                        detail,
                    ));
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
                    settings.push(setting(
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
                            "no /dev/vhost-net on this host: QEMU's main loop serves the tap"
                                .to_string()
                        },
                    ));
                }
            }
        }
        nics.push(plan);
    }

    // Guest settings on the kernel command line.
    let guest = GuestConfig {
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
    };

    // The command line.
    let dir = input.dir;
    let mut a: Vec<String> = vec![input.qemu.to_string()];
    let mut push = |args: &[&str]| a.extend(args.iter().map(|s| s.to_string()));
    push(&["-name", &format!("{},debug-threads=on", spec.name)]);
    push(&[
        "-machine",
        &format!(
            "q35,accel={},memory-backend=mem0",
            if kvm { "kvm" } else { "tcg" }
        ),
    ]);
    push(&["-cpu", if kvm { "host" } else { "max" }]);
    push(&["-smp", &spec.vcpus.to_string()]);
    push(&["-m", &format!("{mem}M")]);
    let prealloc = if high { ",prealloc=on" } else { "" };
    let backend = match &hugepage_backend {
        Some(mount) => format!(
            "memory-backend-file,id=mem0,size={mem}M,mem-path={},share=on{prealloc}",
            mount.display()
        ),
        // Shared: a vhost-user backend maps guest memory through the memfd.
        None => format!("memory-backend-memfd,id=mem0,size={mem}M,share=on{prealloc}"),
    };
    push(&["-object", &backend]);
    if high {
        if !settings
            .iter()
            .any(|s| s.mechanism == "-overcommit mem-lock=on" && s.status == Status::NotHonoured)
        {
            push(&["-overcommit", "mem-lock=on"]);
        }
        if kvm {
            push(&["-overcommit", "cpu-pm=on"]);
        }
    }
    push(&[
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ]);
    push(&[
        "-chardev",
        &format!(
            "socket,id=console,path={},server=on,wait=off,logfile={}",
            path(&dir.console()),
            path(&dir.serial_log())
        ),
    ]);
    push(&["-serial", "chardev:console"]);
    push(&["-device", "virtio-serial-pci,id=vser0"]);
    push(&[
        "-chardev",
        &format!(
            "socket,id=exec,path={},server=on,wait=off",
            path(&dir.exec())
        ),
    ]);
    push(&[
        "-device",
        &format!(
            "virtserialport,bus=vser0.0,chardev=exec,name={}",
            crate::exec::PORT_NAME
        ),
    ]);
    for n in &nics {
        let id = &n.id;
        let vhost = if high && host.vhost_net {
            ",vhost=on"
        } else {
            ""
        };
        if let Some(dev) = crate::passthrough::qemu_device_for(id, &n.backend) {
            push(&["-device", &dev]);
            continue;
        }
        match &n.backend {
            Backend::Vfio { .. } | Backend::Sriov { .. } => {}
            Backend::VhostUser { socket, server, .. } => {
                // As the client, QEMU redials a restarted switch every
                // second and the guest keeps its vNIC (no reboot); as the
                // server it waits for the switch to redial.
                let mode = if *server {
                    ",server=on"
                } else {
                    ",reconnect=1"
                };
                push(&[
                    "-chardev",
                    &format!("socket,id={id}c,path={}{mode}", path(socket)),
                ]);
                // Multiqueue: QEMU asks the switch for its queue count
                // (GET_QUEUE_NUM) and refuses to start with fewer.
                let queues = if n.queues > 1 {
                    format!(",queues={}", n.queues)
                } else {
                    String::new()
                };
                push(&[
                    "-netdev",
                    &format!("vhost-user,id={id},chardev={id}c{queues}"),
                ]);
            }
            Backend::Tap { .. } => {
                push(&[
                    "-netdev",
                    &format!(
                        "tap,id={id},ifname={},script=no,downscript=no{vhost}",
                        n.host_ifname.as_deref().unwrap_or_default()
                    ),
                ]);
            }
            Backend::Macvtap { .. } => {
                push(&[
                    "-netdev",
                    &format!("tap,id={id},fd={}{vhost}", n.fd.unwrap_or_default()),
                ]);
            }
        }
        // The guest's receive offloads off: the host side segments and
        // checksums in software.
        let mut offloads = if n.guest_offloads {
            ""
        } else {
            ",guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off"
        }
        .to_string();
        if n.packed {
            offloads.push_str(",packed=on");
        }
        let tcg_vhost_user = !kvm && matches!(n.backend, Backend::VhostUser { .. });
        if n.queues > 1 {
            offloads.push_str(",mq=on");
            if !tcg_vhost_user {
                // One vector per queue, one for the control queue, one
                // for configuration changes.
                offloads.push_str(&format!(",vectors={}", 2 * n.queues + 2));
            }
        }
        let device = match n.model {
            // QEMU 7.2 under TCG crashes on MSI-X with a vhost-user NIC:
            // vectors=0 makes virtio-net use INTx (every queue shares it).
            Model::Virtio if tcg_vhost_user => {
                format!(
                    "virtio-net-pci,netdev={id},mac={},vectors=0{offloads}",
                    n.mac
                )
            }
            Model::Virtio => format!("virtio-net-pci,netdev={id},mac={}{offloads}", n.mac),
            Model::E1000 => format!("e1000,netdev={id},mac={}", n.mac),
        };
        push(&["-device", &device]);
    }
    push(&[
        "-kernel",
        &path(input.kernel),
        "-initrd",
        &path(input.initrd),
    ]);
    push(&["-append", &guest.kernel_cmdline()]);
    push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", path(&dir.qmp())),
    ]);
    push(&["-pidfile", &path(&dir.pidfile())]);

    if !kvm && has_vhost_user {
        notes.push(
            "vhost-user NICs use vectors=0 (INTx) under TCG: QEMU 7.2 crashes on MSI-X there"
                .into(),
        );
    }

    Plan {
        argv: a,
        guest,
        nics,
        pinning,
        settings,
        notes,
    }
}

/// The argv as one shell-quoted line.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A state directory for planning outside the runtime root (printing).
pub fn placeholder_dir(name: &str) -> VmDir {
    VmDir::at(PathBuf::from("/run/vnio/vm").join(name))
}
