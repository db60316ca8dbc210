//! Golden output: the parsed NIC options, the whole plan (QEMU command
//! line, guest settings, pinning, latency settings, notes) and the libvirt
//! domain XML for a matrix of guests, hosts and switch answers, byte for
//! byte as in tests/golden/plans.txt. It guards restructurings of the
//! parser, the planner and both renderers; a deliberate change of output
//! is blessed with `VNIO_BLESS=1 cargo test -p vnio-vm --test plan_golden`.
//! Nothing here reads the real host.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use vnio_vm::accel::{Accel, AccelDecision};
use vnio_vm::host::{HostFacts, Hugepages};
use vnio_vm::libvirt::domain_xml;
use vnio_vm::plan::{plan, PlanInput, SwitchAnswer};
use vnio_vm::spec::{Latency, Nic, VmSpec};
use vnio_vm::state::VmDir;

const GOLDEN: &str = "tests/golden/plans.txt";

/// The NIC options parsed (or refused) for each accepted form.
const NICS: &[&str] = &[
    "vhost-user:/run/vnio/p1.sock",
    "vhost-user:/run/vnio/p1.sock,server",
    "vhost-user:/run/vnio/p1.sock,server=off,control=/run/vnio/c.sock,queues=4",
    "vhost-user:/run/vnio/p1.sock,queues=9",
    "vhost-user:/run/vnio/p1.sock,model=e1000",
    "vhost-user:",
    "tap",
    "tap:vt0,bridge=br0,mac=52:54:00:12:34:56",
    "tap:vt0,host-ip=10.1.0.1/24,ip=10.1.0.2/24",
    "tap:vt0,host-ip=10.1.0.1/24,bridge=br0",
    "tap:vt0,model=e1000",
    "e1000:vt1,bridge=br1",
    "e1000,model=virtio",
    "e1000,guest-offloads=off",
    "macvtap:eth0",
    "macvtap:eth0,mode=passthru",
    "macvtap",
    "vfio:0000:03:00.0",
    "sriov:eth0,vf=3",
    "sriov:eth0",
    "vfio:0000:03:00.0,vf=1",
    "vhost-user:/s,packed=on,guest-offloads=off",
    "vhost-user:/s,packed=maybe",
    "vhost-user:/s,mac=",
    "vhost-user:/s,bogus=1",
    "wifi:x",
];

/// The guests planned: latency, vCPUs, NICs.
const GUESTS: &[(Latency, u32, &[&str])] = &[
    (Latency::Normal, 1, &[]),
    (
        Latency::Normal,
        1,
        &[
            "vhost-user:/run/vnio/p1.sock,ip=10.0.0.11/24",
            "tap:vt0,bridge=br0",
        ],
    ),
    (
        Latency::Normal,
        2,
        &[
            "vhost-user:/run/vnio/p2.sock,server,guest-offloads=off,packed=on",
            "vhost-user:/run/vnio/p3.sock,queues=2,control=/run/vnio/c.sock",
        ],
    ),
    (
        Latency::High,
        2,
        &["macvtap:eth0", "e1000", "tap:vt0,host-ip=10.1.0.1/24"],
    ),
    (
        Latency::High,
        1,
        &[
            "vhost-user:/run/vnio/p1.sock",
            "vhost-user:/run/vnio/p2.sock,queues=2",
        ],
    ),
    (Latency::High, 4, &["vfio:0000:03:00.0", "sriov:eth0,vf=3"]),
];

fn hosts() -> Vec<(&'static str, HostFacts, AccelDecision)> {
    let small = HostFacts {
        cpus_online: vec![0, 1],
        cpus_isolated: vec![],
        cpus_held: vec![],
        hugepages: None,
        hugepages_free_unmounted: 0,
        memlock_limit: None,
        vhost_net: false,
    };
    let big = HostFacts {
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
    };
    let mut tight = big.clone();
    tight.cpus_held = vec![("other".into(), vec![6, 7])];
    tight.hugepages = None;
    tight.hugepages_free_unmounted = 512;
    tight.memlock_limit = Some(64 * 1024);
    let tcg = AccelDecision {
        accel: Accel::Tcg,
        why: "no /dev/kvm: golden".into(),
    };
    let kvm = AccelDecision {
        accel: Accel::Kvm,
        why: "KVM booted a stock guest: golden".into(),
    };
    vec![
        ("small TCG host", small, tcg),
        ("big KVM host", big, kvm.clone()),
        ("tight KVM host", tight, kvm),
    ]
}

fn answers() -> Vec<(&'static str, Vec<Option<SwitchAnswer>>)> {
    vec![
        ("no answers", vec![]),
        (
            "dedicated, refused",
            vec![
                Some(SwitchAnswer::Dedicated {
                    port: "p1".into(),
                    core: Some(3),
                }),
                Some(SwitchAnswer::Refused {
                    port: "p2".into(),
                    why: "no core left".into(),
                }),
            ],
        ),
    ]
}

fn render() -> String {
    let mut out = String::new();
    for n in NICS {
        let _ = writeln!(out, "=== nic {n}\n{:#?}", n.parse::<Nic>());
    }
    let dir = VmDir::new(Path::new("/run/vnio/vm"), "g1");
    for (latency, vcpus, nics) in GUESTS {
        let mut s = VmSpec::new("g1");
        s.vcpus = *vcpus;
        s.latency = *latency;
        s.nics = nics.iter().map(|n| n.parse().unwrap()).collect();
        s.validate().unwrap();
        for (host_name, host, accel) in hosts() {
            for (answer_name, answers) in answers() {
                let p = plan(&PlanInput {
                    spec: &s,
                    kernel: Path::new("/cache/img/vmlinuz"),
                    initrd: Path::new("/cache/img/initrd.img"),
                    accel: &accel,
                    host: &host,
                    dir: &dir,
                    qemu: "qemu-system-x86_64",
                    switch_answers: &answers,
                });
                let x = domain_xml(&s, &p, accel.accel, Path::new("/k"), Path::new("/i"), &dir);
                let _ = writeln!(
                    out,
                    "=== {latency:?} {vcpus} vCPUs {nics:?} on the {host_name}, {answer_name}\n{p:#?}\n{x}"
                );
            }
        }
    }
    out
}

#[test]
fn plans_and_domain_xml_match_the_golden_file() {
    let got = render();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("VNIO_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&golden).expect("tests/golden/plans.txt");
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(g, w)| g != w)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "output differs from {GOLDEN} at line {}:\n  got:  {:?}\n  want: {:?}",
            line + 1,
            got.lines().nth(line),
            want.lines().nth(line)
        );
    }
}
