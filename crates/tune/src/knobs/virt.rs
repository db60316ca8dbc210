//! What a guest can see of its hypervisor: steal time and paravirtual hints.

use crate::host::{excerpt, Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

/// Whether `/proc/cpuinfo` text lists `flag` for the first CPU.
pub fn cpuinfo_has_flag(cpuinfo: &str, flag: &str) -> bool {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .is_some_and(|(_, f)| f.split_whitespace().any(|w| w == flag))
}

/// Steal and total CPU time (ticks) since boot, from `/proc/stat`.
pub fn cpu_times(host: &Host) -> Result<(u64, u64), Unread> {
    const STAT: &str = "/proc/stat";
    let text = host.read(STAT)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| Unread::garbage(STAT, "no aggregate 'cpu' line"))?;
    let nums: Result<Vec<u64>, _> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse::<u64>)
        .collect();
    let nums =
        nums.map_err(|_| Unread::garbage(STAT, format!("non-numeric field in {}", excerpt(line))))?;
    if nums.len() < 8 {
        return Err(Unread::garbage(
            STAT,
            format!(
                "expected at least 8 fields on the cpu line, found {}",
                nums.len()
            ),
        ));
    }
    // guest and guest_nice (fields 9 and 10) are already counted in user.
    let total = nums.iter().take(8).fold(0u64, |a, &n| a.saturating_add(n));
    Ok((nums[7], total))
}

/// Steal time as a share of all CPU time since boot.
pub fn steal_share(host: &Host) -> Result<f64, Unread> {
    let (steal, total) = cpu_times(host)?;
    Ok(if total == 0 {
        0.0
    } else {
        steal as f64 / total as f64
    })
}

/// How long `virt.steal` samples the current steal rate.
pub const STEAL_SAMPLE: std::time::Duration = std::time::Duration::from_millis(200);

fn steal(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let (s1, t1) = cpu_times(host)?;
    host.probe().pause(STEAL_SAMPLE);
    let (s2, t2) = cpu_times(host)?;
    let since_boot = if t1 == 0 { 0.0 } else { s1 as f64 / t1 as f64 };
    let recent = (t2 > t1).then(|| s2.saturating_sub(s1) as f64 / (t2 - t1) as f64);
    let limit = if p == Profile::Latency { 0.01 } else { 0.10 };
    let mut current = format!("{:.2}% of CPU time since boot", since_boot * 100.0);
    if let Some(r) = recent {
        current.push_str(&format!(
            ", {:.2}% over the last {} ms",
            r * 100.0,
            STEAL_SAMPLE.as_millis()
        ));
    }
    let good = since_boot <= limit && !recent.is_some_and(|r| r > limit);
    Ok(Assessment::judge(good, current)
        .note("steal is time a vCPU was runnable but the host ran something else"))
}

const FEATURES: &[(u32, &str)] = &[
    (0, "clocksource"),
    (3, "clocksource2"),
    (4, "async-pf"),
    (5, "steal-time"),
    (6, "pv-eoi"),
    (7, "pv-unhalt"),
    (9, "pv-tlb-flush"),
    (11, "pv-send-ipi"),
    (12, "poll-control"),
    (13, "pv-sched-yield"),
    (14, "async-pf-int"),
    (15, "msi-ext-dest-id"),
];

fn hypervisor(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let cpuinfo = host.read("/proc/cpuinfo")?;
    if !cpuinfo.lines().any(|l| l.starts_with("flags")) {
        return Err(Unread::garbage("/proc/cpuinfo", "no 'flags' line"));
    }
    let guest = cpuinfo_has_flag(&cpuinfo, "hypervisor");
    if !guest {
        return Ok(Assessment::info("bare metal (no hypervisor flag)"));
    }
    let sys_type = match host.read("/sys/hypervisor/type") {
        Ok(t) => Some(t),
        Err(u) if u.kind == UnreadKind::Missing => None,
        Err(u) => return Err(u),
    };
    let mut a;
    match host.probe().kvm_cpuid() {
        Some(k) if k.signature.starts_with("KVMKVMKVM") => {
            let feats: Vec<&str> = FEATURES
                .iter()
                .filter(|(b, _)| k.features & (1 << b) != 0)
                .map(|(_, n)| *n)
                .collect();
            let dedicated = k.hints & 1 != 0;
            let current = format!(
                "KVM guest; vCPUs {}",
                if dedicated {
                    "dedicated (KVM_HINTS_REALTIME)"
                } else {
                    "not hinted dedicated"
                }
            );
            a = Assessment::judge(p != Profile::Latency || dedicated, current)
                .note(format!("KVM features: {}", feats.join(" ")));
        }
        Some(k) => {
            a = Assessment::info(format!(
                "guest of {}",
                if k.signature.is_empty() {
                    "an unnamed hypervisor"
                } else {
                    &k.signature
                }
            ))
        }
        None => {
            a = Assessment::not_visible(
                "the paravirtual CPUID leaves were not probed (the hypervisor flag is set)",
            )
        }
    }
    if let Some(t) = sys_type {
        a = a.note(format!("/sys/hypervisor/type: {t}"));
    }
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "virt.steal",
        title: "Steal time seen by this guest",
        layer: Layer::Hypervisor,
        reads: "the cpu line of /proc/stat",
        targets: Targets {
            latency: "below 1%: vCPUs not overcommitted",
            throughput: "below 10%",
            balanced: "below 10%",
        },
        why: "A vCPU waiting for a physical CPU delays whatever it was about to run: a tail-latency spike per wait.",
        tradeoff: "No overcommit: fewer VMs per host.",
        apply: ApplyKind::Manual,
        how: "on the host: no more vCPUs than physical cores for latency VMs; pin them",
        revert: "n/a",
        volatile: true,
        assess: steal,
    },
    Knob {
        id: "virt.hypervisor",
        title: "Hypervisor hints visible to the guest (dedicated vCPUs, PV features)",
        layer: Layer::Hypervisor,
        reads: "hypervisor flag in /proc/cpuinfo, /sys/hypervisor/type, KVM CPUID leaves 0x40000000-0x40000001",
        targets: Targets {
            latency: "KVM guest with dedicated, pinned vCPUs (kvm-hint-dedicated) and idle without exits (cpu-pm=on)",
            throughput: "any",
            balanced: "any",
        },
        why: "With dedicated vCPUs the guest can idle by polling or MWAIT without exits, and skip paravirtual spinlock halts.",
        tradeoff: "A physical core per vCPU, even when idle.",
        apply: ApplyKind::Manual,
        how: "QEMU: -cpu host,kvm-hint-dedicated=on -overcommit cpu-pm=on, vCPU threads pinned (libvirt <vcpupin>)",
        revert: "remove the options from the VM definition",
        volatile: false,
        assess: hypervisor,
    },
];
