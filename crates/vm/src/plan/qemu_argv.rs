//! The QEMU command line for a plan: machine, memory backing, serial
//! console and exec channel, one chardev/netdev/device per NIC, kernel and
//! monitor. Separate from the planner's decisions because it only renders
//! them: every argument follows from the request and the settings already
//! decided, and the quoting for printing lives here too.

use std::path::Path;

use super::{NicPlan, PlanInput, Setting, Status};
use crate::accel::Accel;
use crate::cmdline::GuestConfig;
use crate::spec::{Backend, Latency, Model};
use crate::state::VmDir;

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The command line being built.
struct Argv(Vec<String>);

impl Argv {
    fn push(&mut self, args: &[&str]) {
        self.0.extend(args.iter().map(|s| s.to_string()));
    }
}

/// The command line: QEMU and its arguments.
pub(super) fn qemu_argv(
    input: &PlanInput<'_>,
    nics: &[NicPlan],
    settings: &[Setting],
    hugepage_backend: Option<&Path>,
    guest: &GuestConfig,
) -> Vec<String> {
    let high = input.spec.latency == Latency::High;
    let kvm = input.accel.accel == Accel::Kvm;
    let mut a = Argv(vec![input.qemu.to_string()]);
    machine(&mut a, input, kvm);
    memory(&mut a, input, settings, hugepage_backend, kvm);
    channels(&mut a, input.dir);
    let vhost = if high && input.host.vhost_net {
        ",vhost=on"
    } else {
        ""
    };
    for n in nics {
        nic(&mut a, n, vhost, kvm);
    }
    let dir = input.dir;
    a.push(&[
        "-kernel",
        &path(input.kernel),
        "-initrd",
        &path(input.initrd),
    ]);
    a.push(&["-append", &guest.kernel_cmdline()]);
    a.push(&[
        "-qmp",
        &format!("unix:{},server=on,wait=off", path(&dir.qmp())),
    ]);
    a.push(&["-pidfile", &path(&dir.pidfile())]);
    a.0
}

/// Name, machine, CPU model and count.
fn machine(a: &mut Argv, input: &PlanInput<'_>, kvm: bool) {
    let spec = input.spec;
    a.push(&["-name", &format!("{},debug-threads=on", spec.name)]);
    a.push(&[
        "-machine",
        &format!(
            "q35,accel={},memory-backend=mem0",
            if kvm { "kvm" } else { "tcg" }
        ),
    ]);
    a.push(&["-cpu", if kvm { "host" } else { "max" }]);
    a.push(&["-smp", &spec.vcpus.to_string()]);
}

/// The guest's memory: its size and backend (huge pages or a memfd,
/// shared, preallocated for `high` latency), locked and with the CPUs'
/// power management passed through when `high` allows.
fn memory(
    a: &mut Argv,
    input: &PlanInput<'_>,
    settings: &[Setting],
    hugepage_backend: Option<&Path>,
    kvm: bool,
) {
    let high = input.spec.latency == Latency::High;
    let mem = input.spec.mem_mib;
    a.push(&["-m", &format!("{mem}M")]);
    let prealloc = if high { ",prealloc=on" } else { "" };
    let backend = match &hugepage_backend {
        Some(mount) => format!(
            "memory-backend-file,id=mem0,size={mem}M,mem-path={},share=on{prealloc}",
            mount.display()
        ),
        // Shared: a vhost-user backend maps guest memory through the memfd.
        None => format!("memory-backend-memfd,id=mem0,size={mem}M,share=on{prealloc}"),
    };
    a.push(&["-object", &backend]);
    if high {
        if !settings
            .iter()
            .any(|s| s.mechanism == "-overcommit mem-lock=on" && s.status == Status::NotHonoured)
        {
            a.push(&["-overcommit", "mem-lock=on"]);
        }
        if kvm {
            a.push(&["-overcommit", "cpu-pm=on"]);
        }
    }
}

/// No default devices, no display; the serial console and the exec
/// channel on sockets in the VM's directory.
fn channels(a: &mut Argv, dir: &VmDir) {
    a.push(&[
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ]);
    a.push(&[
        "-chardev",
        &format!(
            "socket,id=console,path={},server=on,wait=off,logfile={}",
            path(&dir.console()),
            path(&dir.serial_log())
        ),
    ]);
    a.push(&["-serial", "chardev:console"]);
    a.push(&["-device", "virtio-serial-pci,id=vser0"]);
    a.push(&[
        "-chardev",
        &format!(
            "socket,id=exec,path={},server=on,wait=off",
            path(&dir.exec())
        ),
    ]);
    a.push(&[
        "-device",
        &format!(
            "virtserialport,bus=vser0.0,chardev=exec,name={}",
            crate::exec::PORT_NAME
        ),
    ]);
}

/// One NIC: a passthrough device, or its backend (chardev and netdev) and
/// its device. `vhost` is `,vhost=on` when taps get vhost-net.
fn nic(a: &mut Argv, n: &NicPlan, vhost: &str, kvm: bool) {
    if let Some(dev) = crate::passthrough::qemu_device_for(&n.id, &n.backend) {
        a.push(&["-device", &dev]);
        return;
    }
    nic_backend(a, n, vhost);
    a.push(&["-device", &nic_device(n, kvm)]);
}

/// The NIC's `-chardev` (vhost-user) and `-netdev`.
fn nic_backend(a: &mut Argv, n: &NicPlan, vhost: &str) {
    let id = &n.id;
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
            a.push(&[
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
            a.push(&[
                "-netdev",
                &format!("vhost-user,id={id},chardev={id}c{queues}"),
            ]);
        }
        Backend::Tap { .. } => {
            a.push(&[
                "-netdev",
                &format!(
                    "tap,id={id},ifname={},script=no,downscript=no{vhost}",
                    n.host_ifname.as_deref().unwrap_or_default()
                ),
            ]);
        }
        Backend::Macvtap { .. } => {
            a.push(&[
                "-netdev",
                &format!("tap,id={id},fd={}{vhost}", n.fd.unwrap_or_default()),
            ]);
        }
    }
}

/// The NIC's `-device`: the model with its offloads, ring layout, queues
/// and interrupt vectors.
fn nic_device(n: &NicPlan, kvm: bool) -> String {
    let id = &n.id;
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
    match n.model {
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
