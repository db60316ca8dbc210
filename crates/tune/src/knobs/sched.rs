//! Scheduler tick and CPU isolation (boot-time settings).

use super::{cmdline, cmdline_value, online_cpus};
use crate::host::{parse_cpu_list, Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

fn nohz(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let words = cmdline(host)?;
    let current = match cmdline_value(&words, "nohz").as_deref() {
        Some("off") => "periodic tick (nohz=off)".to_string(),
        Some(v) => format!("tickless idle (nohz={v})"),
        None => "tickless idle (default)".to_string(),
    };
    let skew = cmdline_value(&words, "skew_tick").unwrap_or_else(|| "0".into());
    Ok(Assessment::info(format!("{current}, skew_tick={skew}"))
        .note("measure both: the study saw guests gain from nohz=off, which avoids reprogramming a one-shot timer at each idle exit")
        .note("skew_tick=1 (tuned's network-latency) staggers the CPUs' ticks so they do not contend for the same locks"))
}

fn isolation(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let words = cmdline(host)?;
    let cpus = online_cpus(host)?;
    let mut parts = Vec::new();
    for name in ["isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"] {
        if let Some(v) = cmdline_value(&words, name) {
            parts.push(format!("{name}={v}"));
        }
    }
    let isolated = match host.read("/sys/devices/system/cpu/isolated") {
        Ok(s) => parse_cpu_list(&s).ok_or_else(|| {
            Unread::garbage(
                "/sys/devices/system/cpu/isolated",
                format!("expected a CPU list, found {}", crate::host::excerpt(&s)),
            )
        })?,
        Err(u) if u.kind == UnreadKind::Missing => Vec::new(),
        Err(u) => return Err(u),
    };
    let nohz_full = host.read("/sys/devices/system/cpu/nohz_full").ok();
    let current = format!(
        "isolated: {}; nohz_full: {}; cmdline: {}",
        if isolated.is_empty() {
            "none".to_string()
        } else {
            format!("{isolated:?}")
        },
        nohz_full
            .as_deref()
            .filter(|s| !s.is_empty() && *s != "(null)")
            .unwrap_or("none"),
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(" ")
        }
    );
    let a = match p {
        Profile::Latency if cpus.len() < 4 => Assessment::info(current).note(format!(
            "{} CPUs: too few to set some apart for latency work",
            cpus.len()
        )),
        Profile::Latency => Assessment::judge(!isolated.is_empty(), current),
        Profile::Throughput => Assessment::judge(isolated.is_empty(), current),
        Profile::Balanced => Assessment::info(current),
    };
    Ok(a)
}

fn housekeeping(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    // (sysctl, path, value the latency profile wants, "at least" or exact)
    const ITEMS: &[(&str, &str, u64, bool)] = &[
        (
            "kernel.nmi_watchdog",
            "/proc/sys/kernel/nmi_watchdog",
            0,
            false,
        ),
        (
            "kernel.timer_migration",
            "/proc/sys/kernel/timer_migration",
            0,
            false,
        ),
        ("vm.stat_interval", "/proc/sys/vm/stat_interval", 10, true),
    ];
    let mut parts = Vec::new();
    let mut good = true;
    let mut changes = Vec::new();
    for (name, path, want, at_least) in ITEMS {
        let v: u64 = match host.parse(path) {
            Ok(v) => v,
            Err(u) if u.kind == UnreadKind::Missing => {
                parts.push(format!("{name} absent"));
                continue;
            }
            Err(u) => return Err(u),
        };
        let ok = p != Profile::Latency || if *at_least { v >= *want } else { v == *want };
        if !ok {
            good = false;
            changes.push(crate::knobs::change(path, want.to_string(), v.to_string()));
        }
        parts.push(format!("{name}={v}"));
    }
    let mut a = Assessment::judge(good, parts.join(" "));
    a.changes = changes;
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "sched.nohz",
        title: "Scheduler tick: tickless idle or periodic (nohz)",
        layer: Layer::Guest,
        reads: "nohz= and skew_tick= in /proc/cmdline",
        targets: Targets {
            latency: "measure both: tickless idle (default) or nohz=off",
            throughput: "tickless idle (default)",
            balanced: "tickless idle (default)",
        },
        why: "A tickless kernel programs a one-shot timer at each idle exit; a periodic tick costs a wake-up every tick instead.",
        tradeoff: "nohz=off wakes idle CPUs (and vCPUs) at every tick: power and host CPU.",
        apply: ApplyKind::Reboot,
        how: "kernel command line: nohz=off",
        revert: "remove nohz=off and reboot",
        volatile: false,
        assess: nohz,
    },
    Knob {
        id: "sched.isolation",
        title: "CPU isolation (isolcpus, nohz_full, rcu_nocbs)",
        layer: Layer::Host,
        reads: "isolcpus=, nohz_full=, rcu_nocbs=, irqaffinity= in /proc/cmdline; /sys/devices/system/cpu/{isolated,nohz_full}",
        targets: Targets {
            latency: "with 4 or more CPUs: latency cores isolated (isolcpus=managed_irq,domain, nohz_full, rcu_nocbs)",
            throughput: "no isolated CPUs",
            balanced: "any",
        },
        why: "Isolated cores run only what is pinned to them: no other tasks, no tick, no RCU callbacks.",
        tradeoff: "Isolated cores are lost to everything else; the load balancer ignores them.",
        apply: ApplyKind::Reboot,
        how: "kernel command line: isolcpus=managed_irq,domain,<cpus> nohz_full=<cpus> rcu_nocbs=<cpus>",
        revert: "remove the parameters and reboot",
        volatile: false,
        assess: isolation,
    },
    Knob {
        id: "sched.housekeeping",
        title: "Periodic kernel work: NMI watchdog, timer migration, vmstat interval",
        layer: Layer::Guest,
        reads: "/proc/sys/kernel/nmi_watchdog, /proc/sys/kernel/timer_migration, /proc/sys/vm/stat_interval",
        targets: Targets {
            latency: "kernel.nmi_watchdog=0 kernel.timer_migration=0 vm.stat_interval>=10 (as tuned's network-latency)",
            throughput: "any",
            balanced: "any",
        },
        why: "The NMI watchdog interrupts every CPU periodically; migrating timers and frequent vmstat updates wake idle or busy-polling CPUs.",
        tradeoff: "No hard-lockup detection; less precise memory statistics.",
        apply: ApplyKind::Runtime,
        how: "sysctl -w kernel.nmi_watchdog=0 kernel.timer_migration=0 vm.stat_interval=10",
        revert: "write the former values back (journaled)",
        volatile: false,
        assess: housekeeping,
    },
];
