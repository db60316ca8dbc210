//! The generated QEMU command lines and libvirt XML for normal and high
//! latency, on hosts described by injected facts (nothing here reads the
//! real host): a roomy 8-CPU KVM host with hugepages and isolated CPUs,
//! and a 2-CPU TCG host that cannot dedicate cores.

use std::path::{Path, PathBuf};

use vnio_vm::accel::{Accel, AccelDecision};
use vnio_vm::host::{HostFacts, Hugepages};
use vnio_vm::libvirt::domain_xml;
use vnio_vm::plan::{dedicate_cores, plan, Plan, PlanInput, Status, SwitchAnswer};
use vnio_vm::spec::{Latency, VmSpec};
use vnio_vm::state::VmDir;

fn small_tcg_host() -> HostFacts {
    HostFacts {
        cpus_online: vec![0, 1],
        cpus_isolated: vec![],
        cpus_held: vec![],
        hugepages: None,
        hugepages_free_unmounted: 0,
        memlock_limit: None,
        vhost_net: false,
    }
}

fn big_kvm_host() -> HostFacts {
    HostFacts {
        cpus_online: (0..8).collect(),
        cpus_isolated: vec![4, 5, 6, 7],
        cpus_held: vec![],
        hugepages: Some(Hugepages {
            mount: PathBuf::from("/dev/hugepages"),
            page_kib: 2048,
            free: 1024,
        }),
        hugepages_free_unmounted: 0,
        memlock_limit: None,
        vhost_net: true,
    }
}

fn tcg() -> AccelDecision {
    AccelDecision {
        accel: Accel::Tcg,
        why: "/dev/kvm cannot run a stock guest: test".into(),
    }
}

fn kvm() -> AccelDecision {
    AccelDecision {
        accel: Accel::Kvm,
        why: "KVM booted a stock guest kernel to init: test".into(),
    }
}

fn spec(latency: Latency, vcpus: u32, nics: &[&str]) -> VmSpec {
    let mut s = VmSpec::new("g1");
    s.vcpus = vcpus;
    s.latency = latency;
    s.nics = nics.iter().map(|n| n.parse().unwrap()).collect();
    s.validate().unwrap();
    s
}

fn make(
    spec: &VmSpec,
    host: &HostFacts,
    accel: &AccelDecision,
    answers: &[Option<SwitchAnswer>],
) -> Plan {
    let dir = VmDir::new(Path::new("/run/vnio/vm"), &spec.name);
    plan(&PlanInput {
        spec,
        kernel: Path::new("/cache/img/vmlinuz"),
        initrd: Path::new("/cache/img/initrd.img"),
        accel,
        host,
        dir: &dir,
        qemu: "qemu-system-x86_64",
        switch_answers: answers,
    })
}

/// The value following `flag`, for each occurrence.
fn values<'a>(argv: &'a [String], flag: &str) -> Vec<&'a str> {
    argv.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].as_str())
        .collect()
}

fn setting<'a>(p: &'a Plan, name: &str) -> &'a vnio_vm::plan::Setting {
    p.settings
        .iter()
        .find(|s| s.name.starts_with(name))
        .unwrap_or_else(|| panic!("no setting {name} in {:#?}", p.settings))
}

#[test]
fn normal_latency_under_tcg_on_a_switch_port() {
    let s = spec(
        Latency::Normal,
        1,
        &["vhost-user:/run/vnio/p1.sock,ip=10.0.0.11/24"],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let a = &p.argv;
    assert_eq!(a[0], "qemu-system-x86_64");
    assert_eq!(values(a, "-machine"), ["q35,accel=tcg,memory-backend=mem0"]);
    assert_eq!(values(a, "-cpu"), ["max"]);
    assert_eq!(values(a, "-smp"), ["1"]);
    assert_eq!(values(a, "-m"), ["256M"]);
    // Shared (vhost-user maps it), not preallocated.
    assert_eq!(
        values(a, "-object"),
        ["memory-backend-memfd,id=mem0,size=256M,share=on"]
    );
    assert!(values(a, "-overcommit").is_empty());
    assert!(values(a, "-chardev").contains(&"socket,id=nic0c,path=/run/vnio/p1.sock,reconnect=1"));
    assert!(values(a, "-netdev").contains(&"vhost-user,id=nic0,chardev=nic0c"));
    let mac = s.mac(0);
    // QEMU 7.2 + TCG + vhost-user: INTx.
    assert!(values(a, "-device")
        .contains(&format!("virtio-net-pci,netdev=nic0,mac={mac},vectors=0").as_str()));
    assert!(values(a, "-qmp").contains(&"unix:/run/vnio/vm/g1/qmp.sock,server=on,wait=off"));
    assert!(values(a, "-chardev")
        .iter()
        .any(|c| c.contains("logfile=/run/vnio/vm/g1/serial.log")));
    assert!(values(a, "-device")
        .iter()
        .any(|d| d.contains("name=org.vnio.exec")));
    let append = values(a, "-append")[0];
    assert!(append.starts_with("console=ttyS0 "), "{append}");
    assert!(
        append.contains(&format!("vnio.ip={mac},10.0.0.11/24")),
        "{append}"
    );
    assert!(append.contains("vnio.agent=7700"));
    assert!(p.settings.is_empty(), "normal latency reserves nothing");
    assert!(p.pinning.is_none());
    assert!(p.strict_refusal().is_none());
}

#[test]
fn high_latency_on_a_roomy_kvm_host_is_fully_honoured() {
    let s = spec(
        Latency::High,
        2,
        &["vhost-user:/run/vnio/p1.sock,control=/run/vnio/switch.sock"],
    );
    let p = make(&s, &big_kvm_host(), &kvm(), &[]);
    let a = &p.argv;
    assert_eq!(values(a, "-machine"), ["q35,accel=kvm,memory-backend=mem0"]);
    assert_eq!(values(a, "-cpu"), ["host"]);
    assert_eq!(
        values(a, "-object"),
        ["memory-backend-file,id=mem0,size=256M,mem-path=/dev/hugepages,share=on,prealloc=on"]
    );
    assert_eq!(values(a, "-overcommit"), ["mem-lock=on", "cpu-pm=on"]);
    assert!(
        !values(a, "-device").iter().any(|d| d.contains("vectors=0")),
        "MSI-X under KVM"
    );
    // Isolated cores first, highest first; CPU 0 stays with the host.
    let pin = p.pinning.as_ref().unwrap();
    assert_eq!(pin.vcpus, vec![7, 6]);
    assert_eq!(pin.housekeeping, vec![0, 1, 2, 3, 4, 5]);
    assert!(p.nics[0].switch_latency_high);
    for s in &p.settings {
        assert_eq!(s.status, Status::Honoured, "{s:?}");
    }
    for name in [
        "dedicated vCPU cores",
        "emulator threads off the vCPU cores",
        "preallocated memory",
        "locked memory",
        "hugepages",
        "guest idles without exits",
        "switch port latency-high",
    ] {
        setting(&p, name);
    }
    assert!(p.strict_refusal().is_none());
}

#[test]
fn a_two_cpu_host_cannot_dedicate_cores_and_says_so() {
    // As planned before launch (printing): the switch port will want a
    // core of its own for its busy-poll worker.
    let s = spec(
        Latency::High,
        1,
        &["vhost-user:/run/vnio/p1.sock,control=/run/vnio/switch.sock"],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let cores = setting(&p, "dedicated vCPU cores");
    assert_eq!(cores.status, Status::NotHonoured);
    assert!(
        cores.detail.contains(
            "1 vCPU + 1 switch poller + 1 housekeeping core need 3 cores; this host has 2 online (0-1)"
        ),
        "{}",
        cores.detail
    );
    assert!(cores.detail.ends_with("vCPUs not pinned"));
    assert!(p.pinning.is_none());
    // The rest of the list: what TCG and this host cannot do.
    assert_eq!(setting(&p, "hugepages").status, Status::NotHonoured);
    let pm = setting(&p, "guest idles without exits");
    assert_eq!(pm.status, Status::NotHonoured);
    assert!(pm.detail.contains("cpu-pm needs KVM"));
    let port = setting(&p, "switch port latency-high");
    assert!(
        port.detail.contains("requested at launch"),
        "{}",
        port.detail
    );
    // What can be done still is: preallocated, locked memory.
    assert_eq!(setting(&p, "preallocated memory").status, Status::Honoured);
    assert_eq!(setting(&p, "locked memory").status, Status::Honoured);
    assert_eq!(
        values(&p.argv, "-overcommit"),
        ["mem-lock=on"],
        "no cpu-pm under TCG"
    );
    assert_eq!(
        values(&p.argv, "-object"),
        ["memory-backend-memfd,id=mem0,size=256M,share=on,prealloc=on"]
    );
    // --strict refuses, naming each setting.
    let refusal = p.strict_refusal().unwrap();
    for name in [
        "dedicated vCPU cores",
        "hugepages",
        "guest idles without exits",
    ] {
        assert!(refusal.contains(name), "{refusal}");
    }

    // At launch the switch dedicated CPU 1 to the port's worker: the vCPU
    // has nothing left, and the message says who holds what.
    let mut host = small_tcg_host();
    host.cpus_held = vec![("switch port p1".into(), vec![1])];
    let answers = [Some(SwitchAnswer::Dedicated {
        port: "p1".into(),
        core: Some(1),
    })];
    let p = make(&s, &host, &tcg(), &answers);
    let cores = setting(&p, "dedicated vCPU cores");
    assert_eq!(cores.status, Status::NotHonoured);
    assert!(
        cores.detail.contains(
            "1 vCPU + 1 housekeeping core need 2 cores; this host has 2 online (0-1), 1 held by switch port p1"
        ),
        "{}",
        cores.detail
    );
    let port = setting(&p, "switch port latency-high");
    assert_eq!(port.status, Status::Honoured);
    assert_eq!(port.detail, "port p1: its own busy-poll worker on CPU 1");
}

#[test]
fn the_switch_port_setting_follows_the_switch_answer() {
    let s = spec(
        Latency::High,
        1,
        &[
            "vhost-user:/run/vnio/p1.sock,control=/run/vnio/switch.sock",
            "vhost-user:/run/vnio/p2.sock",
        ],
    );
    let answers = [
        Some(SwitchAnswer::Refused {
            port: "p1".into(),
            why: "latency high: no core left to dedicate".into(),
        }),
        None,
    ];
    let p = make(&s, &big_kvm_host(), &kvm(), &answers);
    let p1 = setting(&p, "switch port latency-high (nic0)");
    assert_eq!(p1.status, Status::NotHonoured);
    assert_eq!(
        p1.detail,
        "the switch refused for port p1: latency high: no core left to dedicate"
    );
    // Without a control socket nothing can be asked.
    let p2 = setting(&p, "switch port latency-high (nic1)");
    assert_eq!(p2.status, Status::NotHonoured);
    assert!(p2.detail.contains("add control=PATH"), "{}", p2.detail);
    // A refused port needs no core: the vCPU takes the highest isolated CPU.
    assert_eq!(p.pinning.as_ref().unwrap().vcpus, vec![7]);
    assert!(p
        .strict_refusal()
        .unwrap()
        .contains("switch port latency-high (nic0)"));
}

#[test]
fn without_a_switch_vnic_two_cpus_give_one_dedicated_core() {
    let s = spec(Latency::High, 1, &["tap"]);
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let pin = p.pinning.as_ref().unwrap();
    assert_eq!(pin.vcpus, vec![1]);
    assert_eq!(pin.housekeeping, vec![0]);
    // Honoured in principle, but CPU 1 is not isolated from the host.
    let cores = setting(&p, "dedicated vCPU cores");
    assert_eq!(cores.status, Status::Partial);
    assert!(cores.detail.contains("not isolated"), "{}", cores.detail);
    // A tap without vhost-net: QEMU's main loop serves it.
    assert_eq!(
        setting(&p, "in-kernel NIC backend").status,
        Status::NotHonoured
    );
    assert!(values(&p.argv, "-netdev")
        .iter()
        .all(|n| !n.contains("vhost=on")));
}

#[test]
fn cores_held_by_other_vms_are_not_handed_out_twice() {
    let mut host = big_kvm_host();
    host.cpus_held = vec![("VM other".into(), vec![7, 6, 5, 4])];
    // Left: 1-3 (CPU 0 is the host's); 2 vCPUs + the switch poller fit.
    let pin = dedicate_cores(2, 1, &host).unwrap();
    assert_eq!(pin.vcpus, vec![3, 2]);
    assert_eq!(pin.housekeeping, vec![0, 1]);
    let err = dedicate_cores(3, 1, &host).unwrap_err();
    assert!(err.contains("need 5 cores"), "{err}");
    assert!(err.contains("4-7 held by VM other"), "{err}");
}

#[test]
fn tap_bridge_e1000_and_macvtap_nics() {
    let s = spec(
        Latency::High,
        1,
        &[
            "tap:vt0,bridge=br9,ip=10.1.0.2/24",
            "e1000",
            "macvtap:eth0,mode=bridge,mac=52:54:00:aa:bb:cc",
        ],
    );
    let p = make(&s, &big_kvm_host(), &kvm(), &[]);
    let netdevs = values(&p.argv, "-netdev");
    assert_eq!(
        netdevs,
        [
            "tap,id=nic0,ifname=vt0,script=no,downscript=no,vhost=on",
            "tap,id=nic1,ifname=vt-g1-1,script=no,downscript=no,vhost=on",
            "tap,id=nic2,fd=100,vhost=on",
        ]
    );
    let devices = values(&p.argv, "-device");
    assert!(devices.contains(&format!("virtio-net-pci,netdev=nic0,mac={}", s.mac(0)).as_str()));
    assert!(devices.contains(&format!("e1000,netdev=nic1,mac={}", s.mac(1)).as_str()));
    assert!(devices.contains(&"virtio-net-pci,netdev=nic2,mac=52:54:00:aa:bb:cc"));
    assert_eq!(p.nics[2].host_ifname.as_deref(), Some("mvt-g1-2"));
    assert_eq!(p.nics[2].fd, Some(100));
    assert_eq!(
        setting(&p, "in-kernel NIC backend (nic0)").status,
        Status::Honoured
    );
}

#[test]
fn a_low_memlock_limit_drops_mem_lock_and_says_why() {
    let mut host = big_kvm_host();
    host.memlock_limit = Some(64 * 1024);
    let s = spec(Latency::High, 1, &[]);
    let p = make(&s, &host, &kvm(), &[]);
    let lock = setting(&p, "locked memory");
    assert_eq!(lock.status, Status::NotHonoured);
    assert!(lock.detail.contains("RLIMIT_MEMLOCK is 64 KiB"));
    assert_eq!(values(&p.argv, "-overcommit"), ["cpu-pm=on"]);
}

/// Tags open and close in order (a structural check, not a schema).
fn assert_balanced(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("unclosed tag");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with("!--") || tag.ends_with('/') {
            continue;
        }
        let name = tag
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        if tag.starts_with('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "in:\n{xml}");
        } else {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
}

#[test]
fn libvirt_xml_for_normal_latency() {
    let s = spec(
        Latency::Normal,
        1,
        &[
            "vhost-user:/run/vnio/p1.sock,ip=10.0.0.11/24",
            "tap:vt0,bridge=br0",
        ],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    let x = domain_xml(&s, &p, Accel::Tcg, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.starts_with("<domain type='qemu'"));
    assert!(x.contains("<memory unit='MiB'>256</memory>"));
    assert!(x.contains("<source type='memfd'/>"));
    assert!(x.contains("<access mode='shared'/>"));
    assert!(!x.contains("<locked/>") && !x.contains("<cputune>"));
    assert!(x.contains("<interface type='vhostuser'>"));
    assert!(x.contains(
        "<source type='unix' path='/run/vnio/p1.sock' mode='client'>\n        \
         <reconnect enabled='yes' timeout='1'/>\n      </source>"
    ));
    assert!(x.contains("<interface type='bridge'>") && x.contains("<source bridge='br0'/>"));
    assert!(x.contains("<target dev='vt0' managed='yes'/>"));
    // vectors=0 for the vhost-user NIC under TCG, through an override.
    assert!(x.contains("<qemu:device alias='ua-nic0'>"));
    assert!(x.contains("<qemu:property name='vectors' type='unsigned' value='0'/>"));
    assert!(!x.contains("ua-nic1'>\n      <qemu:frontend>"));
    assert!(x.contains("<target type='virtio' name='org.vnio.exec'/>"));
    assert!(x.contains("vnio.ip="));
    assert!(x.contains("<cpu mode='maximum'/>"));
    assert!(!x.contains("<guest csum"));
}

#[test]
fn guest_offloads_off_reaches_the_device_and_the_xml() {
    let s = spec(
        Latency::Normal,
        1,
        &["vhost-user:/run/vnio/p2.sock,guest-offloads=off"],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let want = format!(
        "virtio-net-pci,netdev=nic0,mac={},vectors=0,guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off",
        s.mac(0)
    );
    assert!(
        values(&p.argv, "-device").contains(&want.as_str()),
        "{:?}",
        p.argv
    );
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    let x = domain_xml(&s, &p, Accel::Tcg, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.contains("<guest csum='off' tso4='off' tso6='off' ecn='off'/>"));
}

#[test]
fn packed_rings_reach_the_device_and_the_xml() {
    let s = spec(
        Latency::Normal,
        1,
        &["vhost-user:/run/vnio/p2.sock,packed=on"],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let want = format!(
        "virtio-net-pci,netdev=nic0,mac={},vectors=0,packed=on",
        s.mac(0)
    );
    assert!(
        values(&p.argv, "-device").contains(&want.as_str()),
        "{:?}",
        p.argv
    );
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    let x = domain_xml(&s, &p, Accel::Tcg, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.contains("<driver packed='on'/>"), "{x}");
}

#[test]
fn queue_pairs_reach_the_netdev_the_device_the_guest_and_the_xml() {
    let s = spec(
        Latency::Normal,
        1,
        &["vhost-user:/run/vnio/p2.sock,queues=2"],
    );
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    // Under TCG vectors=0 stays (QEMU 7.2's MSI-X crash): every queue on INTx.
    let want = format!(
        "virtio-net-pci,netdev=nic0,mac={},vectors=0,mq=on",
        s.mac(0)
    );
    assert!(
        values(&p.argv, "-device").contains(&want.as_str()),
        "{:?}",
        p.argv
    );
    assert!(
        values(&p.argv, "-netdev").contains(&"vhost-user,id=nic0,chardev=nic0c,queues=2"),
        "{:?}",
        p.argv
    );
    assert!(
        p.guest
            .kernel_cmdline()
            .contains(&format!("vnio.queues={},2", s.mac(0))),
        "{}",
        p.guest.kernel_cmdline()
    );
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    let x = domain_xml(&s, &p, Accel::Tcg, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.contains("<driver queues='2'/>"), "{x}");
    // With KVM, MSI-X: a vector per queue, the control queue's and the config's.
    let p = make(&s, &big_kvm_host(), &kvm(), &[]);
    let want = format!(
        "virtio-net-pci,netdev=nic0,mac={},mq=on,vectors=6",
        s.mac(0)
    );
    assert!(
        values(&p.argv, "-device").contains(&want.as_str()),
        "{:?}",
        p.argv
    );
    // One queue pair: the command line as before.
    let s = spec(Latency::Normal, 1, &["vhost-user:/run/vnio/p2.sock"]);
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    assert!(!p
        .argv
        .iter()
        .any(|a| a.contains("queues") || a.contains("mq=")));
    assert!(!p.guest.kernel_cmdline().contains("vnio.queues"));
}

#[test]
fn libvirt_xml_for_high_latency() {
    let s = spec(Latency::High, 2, &["macvtap:eth0", "e1000"]);
    let p = make(&s, &big_kvm_host(), &kvm(), &[]);
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    let x = domain_xml(&s, &p, Accel::Kvm, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.starts_with("<domain type='kvm'"));
    assert!(x.contains("<vcpupin vcpu='0' cpuset='7'/>"));
    assert!(x.contains("<vcpupin vcpu='1' cpuset='6'/>"));
    assert!(x.contains("<emulatorpin cpuset='0-5'/>"));
    assert!(x.contains("<hugepages/>"));
    assert!(x.contains("<allocation mode='immediate'/>"));
    assert!(x.contains("<locked/>"));
    assert!(x.contains("<hint-dedicated state='on'/>"));
    assert!(x.contains("<qemu:arg value='cpu-pm=on'/>"));
    assert!(
        x.contains("<interface type='direct'>") && x.contains("<source dev='eth0' mode='bridge'/>")
    );
    assert!(x.contains("<model type='e1000'/>"));
    assert!(x.contains("<driver name='vhost'/>"));
    assert!(x.contains("<cpu mode='host-passthrough'/>"));
    assert!(!x.contains("not honoured"));
    // On the small host the refusals travel as comments.
    let p = make(&s, &small_tcg_host(), &tcg(), &[]);
    let x = domain_xml(&s, &p, Accel::Tcg, Path::new("/k"), Path::new("/i"), &dir);
    assert_balanced(&x);
    assert!(x.contains("<!-- not honoured here: dedicated vCPU cores:"));
    assert!(!x.contains("<cputune>"));
}
