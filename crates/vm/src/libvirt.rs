//! The libvirt domain XML equivalent of a plan, so the same guest and
//! latency settings can be brought to a libvirt stack: `<cputune>` for
//! pinning, `<memoryBacking>` for shared, preallocated, locked and huge
//! memory, interface types for each NIC kind, and `<qemu:commandline>`
//! for what libvirt has no element for (cpu-pm).

use std::fmt::Write;
use std::path::Path;

use crate::accel::Accel;
use crate::exec::PORT_NAME;
use crate::host::format_cpu_list;
use crate::plan::{NicPlan, Plan, Status};
use crate::spec::{Backend, Latency, Model, VmSpec};
use crate::state::VmDir;

/// libvirt's `<address>` of PCI address `a` (`0000:03:00.0`).
fn pci_address(a: &str) -> String {
    let (dom, rest) = a.split_at(4);
    let (bus, rest) = rest[1..].split_at(2);
    let (slot, func) = rest[1..].split_at(2);
    format!(
        "domain='0x{dom}' bus='0x{bus}' slot='0x{slot}' function='0x{}'",
        &func[1..]
    )
}

/// A passthrough NIC: a VFIO `<hostdev>`, or an SR-IOV VF from a libvirt
/// hostdev network over its PF (libvirt picks and binds the VF). False
/// for other NICs.
fn passthrough_xml(w: &mut String, n: &NicPlan) -> bool {
    match &n.backend {
        Backend::Vfio { addr } => {
            let _ = writeln!(w, "    <hostdev mode='subsystem' type='pci' managed='yes'>");
            let _ = writeln!(w, "      <source>");
            let _ = writeln!(w, "        <address {}/>", pci_address(addr));
            let _ = writeln!(w, "      </source>");
            let _ = writeln!(w, "      <alias name='ua-{}'/>", n.id);
            let _ = writeln!(w, "    </hostdev>");
            true
        }
        Backend::Sriov { pf, vf } => {
            let net = format!("vnio-sriov-{}", escape(pf));
            let _ = writeln!(
                w,
                "    <!-- VF {vf} of {}: define network {net} as <network><name>{net}</name><forward mode='hostdev' managed='yes'><pf dev='{}'/></forward></network> -->",
                escape(pf),
                escape(pf)
            );
            let _ = writeln!(w, "    <interface type='network'>");
            let _ = writeln!(w, "      <mac address='{}'/>", n.mac);
            let _ = writeln!(w, "      <source network='{net}'/>");
            let _ = writeln!(w, "      <alias name='ua-{}'/>", n.id);
            let _ = writeln!(w, "    </interface>");
            true
        }
        _ => false,
    }
}

/// Escapes text for XML attributes and content.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn p(path: &Path) -> String {
    escape(&path.display().to_string())
}

/// The domain XML for `spec` as planned.
pub fn domain_xml(
    spec: &VmSpec,
    plan: &Plan,
    accel: Accel,
    kernel: &Path,
    initrd: &Path,
    dir: &VmDir,
) -> String {
    let kvm = accel == Accel::Kvm;
    let mut x = String::new();
    let w = &mut x;
    let _ = writeln!(
        w,
        "<domain type='{}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>",
        if kvm { "kvm" } else { "qemu" }
    );
    let _ = writeln!(w, "  <name>{}</name>", escape(&spec.name));
    let _ = writeln!(w, "  <memory unit='MiB'>{}</memory>", spec.mem_mib);
    let _ = writeln!(w, "  <vcpu placement='static'>{}</vcpu>", spec.vcpus);
    cputune_xml(w, plan);
    memory_backing_xml(w, plan, spec.latency == Latency::High);
    os_xml(w, plan, kernel, initrd);
    features_xml(w, plan, kvm);
    let _ = writeln!(w, "  <devices>");
    let overrides = devices_xml(w, plan, dir);
    let _ = writeln!(w, "  </devices>");
    qemu_xml(w, plan, overrides);
    for s in &plan.settings {
        if s.status != Status::Honoured {
            let _ = writeln!(
                w,
                "  <!-- not honoured here: {}: {} -->",
                escape(&s.name),
                escape(&s.detail).replace("--", "- -")
            );
        }
    }
    let _ = writeln!(w, "</domain>");
    x
}

/// Whether an argument of the plan's QEMU command line contains `a`.
fn argv_has(plan: &Plan, a: &str) -> bool {
    plan.argv.iter().any(|x| x.contains(a))
}

/// `<cputune>`: the vCPUs' and the emulator's cores, when pinned.
fn cputune_xml(w: &mut String, plan: &Plan) {
    if let Some(pin) = &plan.pinning {
        let _ = writeln!(w, "  <cputune>");
        for (i, c) in pin.vcpus.iter().enumerate() {
            let _ = writeln!(w, "    <vcpupin vcpu='{i}' cpuset='{c}'/>");
        }
        let _ = writeln!(
            w,
            "    <emulatorpin cpuset='{}'/>",
            format_cpu_list(&pin.housekeeping)
        );
        let _ = writeln!(w, "  </cputune>");
    }
}

/// `<memoryBacking>`: huge or memfd pages, shared, preallocated (`high`
/// latency), locked.
fn memory_backing_xml(w: &mut String, plan: &Plan, high: bool) {
    let _ = writeln!(w, "  <memoryBacking>");
    if argv_has(plan, "memory-backend-file") {
        let _ = writeln!(w, "    <hugepages/>");
    } else {
        let _ = writeln!(w, "    <source type='memfd'/>");
    }
    // Shared: a vhost-user backend maps guest memory.
    let _ = writeln!(w, "    <access mode='shared'/>");
    if high {
        let _ = writeln!(w, "    <allocation mode='immediate'/>");
    }
    if argv_has(plan, "mem-lock=on") {
        let _ = writeln!(w, "    <locked/>");
    }
    let _ = writeln!(w, "  </memoryBacking>");
}

/// `<os>`: direct kernel boot with the guest's command line.
fn os_xml(w: &mut String, plan: &Plan, kernel: &Path, initrd: &Path) {
    let _ = writeln!(w, "  <os>");
    let _ = writeln!(w, "    <type arch='x86_64' machine='q35'>hvm</type>");
    let _ = writeln!(w, "    <kernel>{}</kernel>", p(kernel));
    let _ = writeln!(w, "    <initrd>{}</initrd>", p(initrd));
    let _ = writeln!(
        w,
        "    <cmdline>{}</cmdline>",
        escape(&plan.guest.kernel_cmdline())
    );
    let _ = writeln!(w, "  </os>");
}

/// `<features>`, the CPU model and what ends the domain.
fn features_xml(w: &mut String, plan: &Plan, kvm: bool) {
    let _ = writeln!(w, "  <features>");
    let _ = writeln!(w, "    <acpi/>");
    if kvm && plan.pinning.is_some() {
        // Tells the guest its vCPUs are not shared (no paravirt spinlock yielding).
        let _ = writeln!(w, "    <kvm>");
        let _ = writeln!(w, "      <hint-dedicated state='on'/>");
        let _ = writeln!(w, "    </kvm>");
    }
    let _ = writeln!(w, "  </features>");
    let _ = writeln!(
        w,
        "  <cpu mode='{}'/>",
        if kvm { "host-passthrough" } else { "maximum" }
    );
    let _ = writeln!(w, "  <on_poweroff>destroy</on_poweroff>");
    let _ = writeln!(w, "  <on_reboot>destroy</on_reboot>");
    let _ = writeln!(w, "  <on_crash>destroy</on_crash>");
}

/// The `<devices>` inside: QEMU, the serial console, the command channel,
/// the NICs and no balloon. Returns the ids of the NICs whose device needs
/// `vectors=0` through `<qemu:override>`.
fn devices_xml(w: &mut String, plan: &Plan, dir: &VmDir) -> Vec<String> {
    let _ = writeln!(
        w,
        "    <emulator>/usr/bin/{}</emulator>",
        crate::accel::QEMU
    );
    let _ = writeln!(w, "    <serial type='unix'>");
    let _ = writeln!(
        w,
        "      <source mode='bind' path='{}'/>",
        p(&dir.console())
    );
    let _ = writeln!(w, "      <log file='{}'/>", p(&dir.serial_log()));
    let _ = writeln!(w, "      <target port='0'/>");
    let _ = writeln!(w, "    </serial>");
    let _ = writeln!(w, "    <channel type='unix'>");
    let _ = writeln!(w, "      <source mode='bind' path='{}'/>", p(&dir.exec()));
    let _ = writeln!(w, "      <target type='virtio' name='{PORT_NAME}'/>");
    let _ = writeln!(w, "    </channel>");
    let mut overrides = Vec::new();
    for n in &plan.nics {
        if passthrough_xml(w, n) {
            continue;
        }
        interface_xml(w, plan, n);
        if plan
            .argv
            .iter()
            .any(|a| a.contains(&format!("netdev={},", n.id)) && a.contains("vectors=0"))
        {
            overrides.push(n.id.clone());
        }
    }
    let _ = writeln!(w, "    <memballoon model='none'/>");
    overrides
}

/// The `<interface>` of a NIC on a vhost-user socket, a tap or a macvtap.
fn interface_xml(w: &mut String, plan: &Plan, n: &NicPlan) {
    let model = match n.model {
        Model::Virtio => "virtio",
        Model::E1000 => "e1000",
    };
    let vhost_net = plan
        .argv
        .iter()
        .any(|a| a.contains(&format!("id={},", n.id)) && a.contains("vhost=on"));
    interface_source_xml(w, &n.backend);
    let _ = writeln!(w, "      <mac address='{}'/>", n.mac);
    if let (Backend::Tap { .. }, Some(dev)) = (&n.backend, &n.host_ifname) {
        let _ = writeln!(w, "      <target dev='{}' managed='yes'/>", escape(dev));
    }
    let _ = writeln!(w, "      <model type='{model}'/>");
    let mut driver = String::new();
    if vhost_net {
        driver.push_str(" name='vhost'");
    }
    if n.packed {
        driver.push_str(" packed='on'");
    }
    if n.queues > 1 {
        // libvirt turns mq=on (and the netdev's queues) on from this.
        driver.push_str(&format!(" queues='{}'", n.queues));
    }
    if !n.guest_offloads {
        let _ = writeln!(w, "      <driver{driver}>");
        let _ = writeln!(
            w,
            "        <guest csum='off' tso4='off' tso6='off' ecn='off'/>"
        );
        let _ = writeln!(w, "      </driver>");
    } else if !driver.is_empty() {
        let _ = writeln!(w, "      <driver{driver}/>");
    }
    let _ = writeln!(w, "      <alias name='ua-{}'/>", n.id);
    let _ = writeln!(w, "    </interface>");
}

/// The opening `<interface>` of `backend` and its `<source>`.
fn interface_source_xml(w: &mut String, backend: &Backend) {
    match backend {
        Backend::Vfio { .. } | Backend::Sriov { .. } => {}
        Backend::VhostUser { socket, server, .. } => {
            let _ = writeln!(w, "    <interface type='vhostuser'>");
            if *server {
                let _ = writeln!(
                    w,
                    "      <source type='unix' path='{}' mode='server'/>",
                    p(socket)
                );
            } else {
                // QEMU's reconnect=1: the guest survives a switch restart.
                let _ = writeln!(
                    w,
                    "      <source type='unix' path='{}' mode='client'>",
                    p(socket)
                );
                let _ = writeln!(w, "        <reconnect enabled='yes' timeout='1'/>");
                let _ = writeln!(w, "      </source>");
            }
        }
        Backend::Tap {
            bridge: Some(b), ..
        } => {
            let _ = writeln!(w, "    <interface type='bridge'>");
            let _ = writeln!(w, "      <source bridge='{}'/>", escape(b));
        }
        Backend::Tap { bridge: None, .. } => {
            let _ = writeln!(w, "    <interface type='ethernet'>");
        }
        Backend::Macvtap { parent, mode } => {
            let _ = writeln!(w, "    <interface type='direct'>");
            let _ = writeln!(w, "      <source dev='{}' mode='{mode}'/>", escape(parent));
        }
    }
}

/// What libvirt has no element for: `-overcommit cpu-pm=on` as
/// `<qemu:commandline>`, `vectors=0` on the `overrides` NICs as
/// `<qemu:override>`.
fn qemu_xml(w: &mut String, plan: &Plan, overrides: Vec<String>) {
    if argv_has(plan, "cpu-pm=on") {
        // libvirt has no element for it.
        let _ = writeln!(w, "  <qemu:commandline>");
        let _ = writeln!(w, "    <qemu:arg value='-overcommit'/>");
        let _ = writeln!(w, "    <qemu:arg value='cpu-pm=on'/>");
        let _ = writeln!(w, "  </qemu:commandline>");
    }
    if !overrides.is_empty() {
        // QEMU 7.2 + TCG + vhost-user: INTx instead of MSI-X (libvirt >= 8.2).
        let _ = writeln!(w, "  <qemu:override>");
        for id in overrides {
            let _ = writeln!(w, "    <qemu:device alias='ua-{id}'>");
            let _ = writeln!(w, "      <qemu:frontend>");
            let _ = writeln!(
                w,
                "        <qemu:property name='vectors' type='unsigned' value='0'/>"
            );
            let _ = writeln!(w, "      </qemu:frontend>");
            let _ = writeln!(w, "    </qemu:device>");
        }
        let _ = writeln!(w, "  </qemu:override>");
    }
}
