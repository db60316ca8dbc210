//! The audit on fake machines: each knob's verdict, value and planned
//! changes for a KVM guest and a bare-metal host.

use vnio_tune::knob::Change;
use vnio_tune::{audit, Audit, Finding, Host, Layer, Profile, Status};

use crate::fake::Fake;

pub fn find<'a>(a: &'a Audit, id: &str) -> &'a Finding {
    a.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}

fn changes(f: &Finding) -> Vec<(String, String, String)> {
    f.changes
        .iter()
        .map(|Change { path, to, restore }| (path.clone(), to.clone(), restore.clone()))
        .collect()
}

#[test]
fn catalogue_entries_are_complete_and_unique() {
    let cat = vnio_tune::knobs::catalogue();
    assert!(cat.len() >= 30, "catalogue has {} knobs", cat.len());
    let mut ids: Vec<&str> = cat.iter().map(|k| k.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), cat.len(), "knob ids are unique");
    for k in &cat {
        assert!(
            k.id.contains('.') && !k.id.contains(' '),
            "{}: id is area.name",
            k.id
        );
        for (what, s) in [
            ("title", k.title),
            ("reads", k.reads),
            ("why", k.why),
            ("tradeoff", k.tradeoff),
            ("how", k.how),
            ("revert", k.revert),
        ] {
            assert!(!s.trim().is_empty(), "{}: empty {what}", k.id);
        }
        for p in Profile::ALL {
            assert!(
                !k.targets.get(p).is_empty(),
                "{}: no target for {}",
                k.id,
                p.name()
            );
        }
        assert_eq!(vnio_tune::knobs::find(k.id).map(|f| f.id), Some(k.id));
    }
    for layer in [Layer::Bios, Layer::Host, Layer::Hypervisor, Layer::Guest] {
        assert!(
            cat.iter().any(|k| k.layer == layer),
            "no knob of layer {}",
            layer.name()
        );
    }
}

#[test]
fn kvm_guest_latency() {
    let fake = Fake::kvm_guest();
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(a.virtualized, Some(true));
    assert_eq!(a.kernel.as_deref(), Some("6.1.0-fake"));
    assert_eq!(a.exit_code(), 2);
    kvm_guest_hidden_and_idle(&a);
    kvm_guest_network(&a);
    kvm_guest_memory(&a);
    kvm_guest_virt_and_sched(&a);
    kvm_guest_security_and_time(&a);
    summary_adds_up(&a);
}

/// A KVM guest: the host's knobs are not visible from it; its idle states
/// and halt polling.
fn kvm_guest_hidden_and_idle(a: &Audit) {
    for id in [
        "bios.power",
        "cpu.governor",
        "cpu.epp",
        "cpu.turbo",
        "kvm.halt-poll",
    ] {
        let f = find(a, id);
        assert_eq!(f.status, Status::NotVisible, "{id}: {}", f.current);
        assert!(
            f.current.starts_with("not visible from here: "),
            "{id}: {}",
            f.current
        );
    }
    assert!(find(a, "cpu.governor").current.contains("host's governor"));

    assert_eq!(find(a, "idle.driver").status, Status::Ok);
    let states = find(a, "idle.states");
    assert_eq!(
        (states.status, states.current.as_str()),
        (Status::Ok, "all 2: POLL(0us) haltpoll idle(1us)")
    );
    let qos = find(a, "idle.pm-qos");
    assert_eq!(
        (qos.status, qos.current.as_str()),
        (Status::Ok, "no request")
    );
    assert!(
        qos.notes
            .iter()
            .any(|n| n == "deepest enabled idle state exits in 1 us"),
        "{:?}",
        qos.notes
    );

    let hp = find(a, "idle.haltpoll");
    assert_eq!(
        (hp.status, hp.current.as_str()),
        (Status::Differs, "guest_halt_poll_ns=0")
    );
    assert_eq!(
        changes(hp),
        vec![(
            "/sys/module/haltpoll/parameters/guest_halt_poll_ns".into(),
            "200000".into(),
            "0".into()
        )]
    );
}

/// A KVM guest's NIC: busy polling, coalescing, offloads, queues, IRQs.
fn kvm_guest_network(a: &Audit) {
    let bp = find(a, "net.busy-poll");
    assert_eq!(bp.status, Status::Differs);
    assert_eq!(bp.changes.len(), 2);
    assert!(bp.changes.iter().all(|c| c.to == "50" && c.restore == "0"));

    let co = find(a, "net.coalescing");
    assert_eq!(
        (co.status, co.current.as_str()),
        (
            Status::Ok,
            "eth0: rx-usecs 0 rx-frames 1 adaptive-rx off tx-usecs 0 tx-frames 1"
        )
    );
    assert_eq!(find(a, "net.offloads").current, "eth0: lro off gro on");
    assert_eq!(
        find(a, "net.rps-xps").current,
        "eth0: 1 rx queues (0 with RPS), 1 tx queues (1 with XPS)"
    );

    let irq = find(a, "irq.affinity");
    assert_eq!(
        (irq.status, irq.current.as_str()),
        (
            Status::Info,
            "default_smp_affinity 3; 2 NIC queue interrupts"
        )
    );
    assert_eq!(
        irq.notes,
        vec![
            "eth0: NUMA node 0: keep its IRQs and consumers on that node's cores".to_string(),
            "30 virtio1-input.0 -> 0".to_string(),
            "31 virtio1-output.0 -> 1".to_string(),
        ]
    );
}

/// A KVM guest's memory: NUMA, THP, KSM, balloon, memlock.
fn kvm_guest_memory(a: &Audit) {
    let numa = find(a, "mem.numa");
    assert_eq!(
        (numa.status, numa.current.as_str()),
        (Status::Ok, "1 node; numa_balancing 1")
    );
    assert!(numa.changes.is_empty());

    let thp = find(a, "mem.thp");
    assert_eq!(thp.status, Status::Differs);
    assert_eq!(
        changes(thp),
        vec![
            (
                "/sys/kernel/mm/transparent_hugepage/enabled".into(),
                "madvise".into(),
                "always".into()
            ),
            (
                "/sys/kernel/mm/transparent_hugepage/defrag".into(),
                "never".into(),
                "madvise".into()
            ),
        ]
    );
    assert_eq!(
        changes(find(a, "mem.ksm")),
        vec![("/sys/kernel/mm/ksm/run".into(), "0".into(), "1".into())]
    );
    assert_eq!(find(a, "mem.balloon").status, Status::Differs);
    assert_eq!(
        find(a, "mem.memlock").current,
        "ulimit -l 8192 KiB (this process)"
    );
}

/// A KVM guest's hypervisor hints, housekeeping, idle limits and steal.
fn kvm_guest_virt_and_sched(a: &Audit) {
    let hv = find(a, "virt.hypervisor");
    assert_eq!(
        (hv.status, hv.current.as_str()),
        (Status::Differs, "KVM guest; vCPUs not hinted dedicated")
    );
    assert!(
        hv.notes
            .iter()
            .any(|n| n == "KVM features: clocksource2 steal-time pv-unhalt"),
        "{:?}",
        hv.notes
    );
    assert_eq!(hv.apply.kind, vnio_tune::ApplyKind::Manual);
    assert!(hv.changes.is_empty(), "manual knobs plan no change");

    let hk = find(a, "sched.housekeeping");
    assert_eq!(
        (hk.status, hk.current.as_str()),
        (
            Status::Differs,
            "kernel.nmi_watchdog=1 kernel.timer_migration=1 vm.stat_interval=1"
        )
    );
    assert_eq!(hk.changes.len(), 3);
    assert_eq!(
        changes(find(a, "net.tcp-fastopen")),
        vec![(
            "/proc/sys/net/ipv4/tcp_fastopen".into(),
            "3".into(),
            "1".into()
        )]
    );
    let rl = find(a, "idle.cpu-resume-latency");
    assert_eq!(
        (rl.status, rl.changes.len()),
        (Status::Ok, 0),
        "haltpoll exits in 1 us: no limit needed"
    );
    assert_eq!(
        find(a, "sched.nohz").current,
        "tickless idle (default), skew_tick=0"
    );

    let steal = find(a, "virt.steal");
    assert_eq!(
        (steal.status, steal.current.as_str()),
        (Status::Differs, "1.70% of CPU time since boot")
    );
}

/// A KVM guest's firewall, LSM, conntrack and clock.
fn kvm_guest_security_and_time(a: &Audit) {
    let fw = find(a, "sec.firewall");
    assert_eq!(fw.status, Status::Differs);
    assert!(
        fw.notes
            .iter()
            .any(|n| n == "iptables filter: 5 entries, at most 1 rules"),
        "{:?}",
        fw.notes
    );
    assert_eq!(
        find(a, "sec.lsm").current,
        "SELinux off; AppArmor on, 1 profiles enforcing"
    );
    assert_eq!(find(a, "sec.conntrack").current, "12 of 262144 entries");
    assert_eq!(find(a, "time.clocksource").status, Status::Ok);
    assert_eq!(
        find(a, "time.clock-cost").current,
        "25.0 ns per clock_gettime(CLOCK_MONOTONIC)"
    );
}

/// The summary counts every finding, and none is unreadable.
fn summary_adds_up(a: &Audit) {
    let s = a.summary;
    assert_eq!(
        s.ok + s.differs + s.info + s.not_visible + s.unreadable,
        a.findings.len()
    );
    assert_eq!(
        s.unreadable,
        0,
        "{:?}",
        a.findings
            .iter()
            .filter(|f| f.status == Status::Unreadable)
            .collect::<Vec<_>>()
    );
}

#[test]
fn kvm_guest_throughput_and_balanced() {
    let fake = Fake::kvm_guest();
    let t = audit(&fake.host(), Profile::Throughput);
    assert_eq!(find(&t, "net.busy-poll").status, Status::Ok);
    assert_eq!(find(&t, "idle.haltpoll").status, Status::Ok);
    assert_eq!(find(&t, "virt.steal").status, Status::Ok);
    assert_eq!(
        find(&t, "mem.thp").status,
        Status::Ok,
        "enabled=always, defrag=madvise suits throughput"
    );
    assert_eq!(
        find(&t, "net.coalescing").status,
        Status::Differs,
        "rx-usecs 0 without adaptive is not a throughput setting"
    );
    let b = audit(&fake.host(), Profile::Balanced);
    assert_eq!(find(&b, "mem.ksm").status, Status::Ok);
    assert_eq!(find(&b, "sec.firewall").status, Status::Ok);
}

#[test]
fn bare_metal_latency_plans_cpu_and_idle_changes() {
    let fake = Fake::bare_metal();
    let a = audit(&fake.host(), Profile::Latency);
    assert_eq!(a.virtualized, Some(false));
    assert_eq!(find(&a, "bios.power").status, Status::Info);
    bare_metal_cpu_and_idle(&a);
    bare_metal_firmware_and_limits(&a);

    let t = audit(&fake.host(), Profile::Throughput);
    assert_eq!(find(&t, "cpu.epb").status, Status::Ok);
    assert_eq!(find(&t, "idle.cpu-resume-latency").status, Status::Ok);
    assert_eq!(find(&t, "idle.states").status, Status::Ok);
    assert_eq!(find(&t, "cpu.governor").status, Status::Differs);
    let b = audit(&fake.host(), Profile::Balanced);
    assert_eq!(find(&b, "cpu.governor").status, Status::Ok);
}

/// Bare metal for latency: the governor, EPP and idle states planned,
/// PM QoS held by a process, no hypervisor or balloon.
fn bare_metal_cpu_and_idle(a: &Audit) {
    let gov = find(a, "cpu.governor");
    assert_eq!(
        (gov.status, gov.current.as_str()),
        (Status::Differs, "all 2: powersave")
    );
    assert_eq!(
        changes(gov),
        vec![
            (
                "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor".into(),
                "performance".into(),
                "powersave".into()
            ),
            (
                "/sys/devices/system/cpu/cpufreq/policy1/scaling_governor".into(),
                "performance".into(),
                "powersave".into()
            ),
        ]
    );
    assert_eq!(find(a, "cpu.epp").changes.len(), 2);
    assert_eq!(find(a, "cpu.turbo").status, Status::Ok);
    let st = find(a, "idle.states");
    assert_eq!(st.status, Status::Differs);
    let disabled: Vec<String> = st.changes.iter().map(|c| c.path.clone()).collect();
    assert_eq!(
        disabled,
        vec![
            "/sys/devices/system/cpu/cpu0/cpuidle/state2/disable",
            "/sys/devices/system/cpu/cpu0/cpuidle/state3/disable",
            "/sys/devices/system/cpu/cpu1/cpuidle/state2/disable",
            "/sys/devices/system/cpu/cpu1/cpuidle/state3/disable",
        ]
    );
    assert!(st.changes.iter().all(|c| c.to == "1" && c.restore == "0"));
    let qos = find(a, "idle.pm-qos");
    assert_eq!(qos.status, Status::Differs);
    assert_eq!(qos.apply.kind, vnio_tune::ApplyKind::Process);
    assert!(
        qos.changes.is_empty(),
        "PM QoS is held by a process, never written by apply"
    );
    assert_eq!(find(a, "idle.haltpoll").status, Status::Info);
    assert_eq!(find(a, "kvm.halt-poll").status, Status::Ok);
    assert_eq!(
        find(a, "virt.hypervisor").current,
        "bare metal (no hypervisor flag)"
    );
    assert_eq!(find(a, "mem.balloon").status, Status::Info);
}

/// Bare metal for latency: the platform profile, EPB, minimum performance
/// and resume latency planned; the firewall's rules counted.
fn bare_metal_firmware_and_limits(a: &Audit) {
    let pp = find(a, "bios.platform-profile");
    assert_eq!(
        (pp.status, pp.current.as_str()),
        (
            Status::Differs,
            "balanced (choices: low-power balanced performance)"
        )
    );
    assert_eq!(
        changes(pp),
        vec![(
            "/sys/firmware/acpi/platform_profile".into(),
            "performance".into(),
            "balanced".into()
        )]
    );
    let epb = find(a, "cpu.epb");
    assert_eq!(
        (epb.status, epb.current.as_str(), epb.changes.len()),
        (Status::Differs, "all 2: 6", 2)
    );
    assert_eq!(
        changes(find(a, "cpu.min-perf")),
        vec![(
            "/sys/devices/system/cpu/intel_pstate/min_perf_pct".into(),
            "100".into(),
            "20".into()
        )]
    );
    let rl = find(a, "idle.cpu-resume-latency");
    assert_eq!(
        (rl.status, rl.current.as_str()),
        (Status::Differs, "all 2: no constraint")
    );
    assert_eq!(
        changes(rl),
        vec![
            (
                "/sys/devices/system/cpu/cpu0/power/pm_qos_resume_latency_us".into(),
                "2".into(),
                "0".into()
            ),
            (
                "/sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us".into(),
                "2".into(),
                "0".into()
            ),
        ]
    );
    let fw = find(a, "sec.firewall");
    assert_eq!(
        fw.current,
        "legacy iptables tables: filter / filter; nf_tables loaded; at most 6 rules counted"
    );
    assert!(
        fw.notes.iter().any(|n| n == "nftables: 4 rules"),
        "{:?}",
        fw.notes
    );
}

#[test]
fn pm_qos_request_and_its_holders_are_reported() {
    let fake = Fake::bare_metal();
    fake.put("/dev/cpu_dma_latency", 1i32.to_ne_bytes())
        .put("/proc/77/comm", "tuned\n")
        .symlink("/proc/77/fd/9", "/dev/cpu_dma_latency")
        .symlink("/proc/77/fd/1", "/dev/null");
    let a = audit(&fake.host(), Profile::Latency);
    let q = find(&a, "idle.pm-qos");
    assert_eq!((q.status, q.current.as_str()), (Status::Ok, "1 us"));
    assert!(
        q.notes.iter().any(|n| n == "held by tuned[77]"),
        "{:?}",
        q.notes
    );
}

#[test]
fn read_only_parameters_are_not_planned() {
    let fake = Fake::kvm_guest();
    fake.chmod("/sys/module/haltpoll/parameters/guest_halt_poll_ns", 0o444);
    let a = audit(&fake.host(), Profile::Latency);
    let hp = find(&a, "idle.haltpoll");
    assert_eq!(hp.status, Status::Differs);
    assert!(hp.changes.is_empty());
    assert!(
        hp.notes.iter().any(|n| n.contains("read-only here")),
        "{:?}",
        hp.notes
    );
}

#[test]
fn fake_root_without_probe_says_what_it_did_not_probe() {
    let fake = Fake::kvm_guest();
    let a = audit(&Host::with_root(fake.root()), Profile::Latency);
    let co = find(&a, "net.coalescing");
    assert_eq!(
        (co.status, co.current.as_str()),
        (
            Status::NotVisible,
            "not visible from here: eth0: not probed under a fake root"
        )
    );
    assert_eq!(find(&a, "time.clock-cost").status, Status::NotVisible);
    assert_eq!(find(&a, "virt.hypervisor").status, Status::NotVisible);
}

#[test]
fn an_empty_root_is_all_not_visible_or_unreadable_never_a_panic() {
    let dir = crate::fake::TempDir::new("empty");
    let a = audit(&Host::with_root(&dir.0), Profile::Latency);
    for f in &a.findings {
        assert!(
            !f.current.contains("internal error"),
            "{}: {}",
            f.id,
            f.current
        );
        assert_ne!(
            f.status,
            Status::Differs,
            "{}: nothing to differ on an empty machine: {}",
            f.id,
            f.current
        );
    }
    assert!(a.summary.not_visible >= 20, "{:?}", a.summary);
    assert_eq!(a.virtualized, None);
    assert_eq!(a.kernel, None);
}

#[test]
fn docs_list_every_knob_and_no_other() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/tune.md");
    let doc = std::fs::read_to_string(path).expect("docs/tune.md is readable");
    let ids: Vec<&str> = vnio_tune::knobs::catalogue().iter().map(|k| k.id).collect();
    for id in &ids {
        assert!(
            doc.contains(&format!("| `{id}` |")),
            "docs/tune.md has no catalogue row for {id}"
        );
    }
    for line in doc
        .lines()
        .filter(|l| l.starts_with("| `") && l.matches('|').count() == 7)
    {
        let id = line
            .trim_start_matches("| `")
            .split('`')
            .next()
            .unwrap_or("");
        assert!(
            ids.contains(&id),
            "docs/tune.md lists {id}, which is not in the catalogue"
        );
    }
}

/// A probe that moves /proc/stat on when the audit pauses, as time would.
struct Ticking {
    inner: vnio_tune::host::FixedProbe,
    stat: std::path::PathBuf,
    next: &'static str,
}

impl vnio_tune::host::Probe for Ticking {
    fn euid(&self) -> u32 {
        self.inner.euid()
    }
    fn coalesce(&self, i: &str) -> std::io::Result<vnio_tune::sys::Coalesce> {
        self.inner.coalesce(i)
    }
    fn offloads(&self, i: &str) -> std::io::Result<vnio_tune::sys::Offloads> {
        self.inner.offloads(i)
    }
    fn iptables_entries(&self, v6: bool, t: &str) -> std::io::Result<(u32, u32)> {
        self.inner.iptables_entries(v6, t)
    }
    fn nft_rules(&self) -> std::io::Result<u64> {
        self.inner.nft_rules()
    }
    fn kvm_cpuid(&self) -> Option<vnio_tune::sys::KvmCpuid> {
        self.inner.kvm_cpuid()
    }
    fn clock_read_ns(&self) -> f64 {
        self.inner.clock_read_ns()
    }
    fn pause(&self, _d: std::time::Duration) {
        std::fs::write(&self.stat, self.next).expect("advance /proc/stat");
    }
}

#[test]
fn steal_is_judged_since_boot_and_over_a_short_sample() {
    let fake = Fake::kvm_guest();
    fake.put("/proc/stat", "cpu  1000 0 500 100000 5 0 1 20 0 0\n");
    let ticking = |next| Ticking {
        inner: fake.probe.clone(),
        stat: fake.path("/proc/stat"),
        next,
    };
    // Quiet since boot (0.02%), but 20% of the last sample was stolen.
    let host = Host::new(
        fake.root(),
        std::sync::Arc::new(ticking("cpu  1100 0 500 100100 5 0 1 70 0 0\n")),
    );
    let s = audit(&host, Profile::Latency);
    let f = find(&s, "virt.steal");
    assert_eq!(
        (f.status, f.current.as_str()),
        (
            Status::Differs,
            "0.02% of CPU time since boot, 20.00% over the last 200 ms"
        )
    );
    assert!(f.volatile);
    fake.put("/proc/stat", "cpu  1000 0 500 100000 5 0 1 20 0 0\n");
    let host = Host::new(
        fake.root(),
        std::sync::Arc::new(ticking("cpu  1100 0 500 100100 5 0 1 20 0 0\n")),
    );
    let f = audit(&host, Profile::Latency)
        .findings
        .into_iter()
        .find(|f| f.id == "virt.steal")
        .expect("steal");
    assert_eq!(
        (f.status, f.current.as_str()),
        (
            Status::Ok,
            "0.02% of CPU time since boot, 0.00% over the last 200 ms"
        )
    );
}

#[test]
fn latency_never_re_enables_a_shallow_state_and_throughput_enables_all() {
    let fake = Fake::bare_metal();
    // An operator disabled C1 (2 us) on cpu0: polling only below C1E.
    fake.put("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable", "1\n");
    let a = audit(&fake.host(), Profile::Latency);
    let paths: Vec<String> = find(&a, "idle.states")
        .changes
        .iter()
        .map(|c| format!("{}={}", c.path, c.to))
        .collect();
    assert!(
        !paths.iter().any(|p| p.contains("cpu0/cpuidle/state1/")),
        "{paths:?}"
    );
    assert_eq!(paths.len(), 4, "only C1E and C6 on both CPUs: {paths:?}");
    let t = audit(&fake.host(), Profile::Throughput);
    let st = find(&t, "idle.states");
    assert_eq!(st.status, Status::Differs);
    assert_eq!(
        changes(st),
        vec![(
            "/sys/devices/system/cpu/cpu0/cpuidle/state1/disable".into(),
            "0".into(),
            "1".into()
        )]
    );
}
