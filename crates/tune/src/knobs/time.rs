//! Time: the clocksource and what reading the clock costs.

use super::change;
use crate::host::{Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

const CS: &str = "/sys/devices/system/clocksource/clocksource0";

/// Clocksources read in the vDSO without a system call.
pub const FAST_CLOCKSOURCES: &[&str] = &[
    "tsc",
    "kvm-clock",
    "hyperv_clocksource_tsc_page",
    "arch_sys_counter",
];

/// Clock reads slower than this (ns) are flagged.
pub const CLOCK_COST_MAX_NS: f64 = 100.0;

fn clocksource(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let cur = match host.read(&format!("{CS}/current_clocksource")) {
        Ok(c) => c,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::not_visible("no clocksource in sysfs"))
        }
        Err(u) => return Err(u),
    };
    if cur.is_empty() || cur.contains(char::is_whitespace) {
        return Err(Unread::garbage(
            &format!("{CS}/current_clocksource"),
            format!(
                "expected one clocksource name, found {}",
                crate::host::excerpt(&cur)
            ),
        ));
    }
    let avail = host
        .read(&format!("{CS}/available_clocksource"))
        .unwrap_or_default();
    let good = FAST_CLOCKSOURCES.contains(&cur.as_str());
    let mut a = Assessment::judge(good, format!("{cur} (available: {avail})"));
    if !good {
        if let Some(best) = ["tsc", "kvm-clock"]
            .iter()
            .find(|c| avail.split_whitespace().any(|a| a == **c))
        {
            a = a.change(change(
                &format!("{CS}/current_clocksource"),
                *best,
                cur.clone(),
            ));
        }
    }
    Ok(a)
}

fn clock_cost(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let ns = host.probe().clock_read_ns();
    if !ns.is_finite() {
        return Ok(Assessment::not_visible("not measured under a fake root"));
    }
    Ok(Assessment::judge(
        ns <= CLOCK_COST_MAX_NS,
        format!("{ns:.1} ns per clock_gettime(CLOCK_MONOTONIC)"),
    ))
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "time.clocksource",
        title: "Clocksource",
        layer: Layer::Guest,
        reads: "/sys/devices/system/clocksource/clocksource0/current_clocksource, available_clocksource",
        targets: Targets {
            latency: "tsc or kvm-clock (read in the vDSO, no exit)",
            throughput: "tsc or kvm-clock",
            balanced: "tsc or kvm-clock",
        },
        why: "With hpet or acpi_pm every clock read is a system call and, in a VM, an exit to the hypervisor.",
        tradeoff: "None when the TSC is stable; an unstable TSC must not be forced.",
        apply: ApplyKind::Runtime,
        how: "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource (or clocksource=tsc at boot)",
        revert: "write the former clocksource back (journaled)",
        volatile: false,
        assess: clocksource,
    },
    Knob {
        id: "time.clock-cost",
        title: "Measured cost of reading CLOCK_MONOTONIC",
        layer: Layer::Guest,
        reads: "measured: median of 50 batches of 2000 clock_gettime(CLOCK_MONOTONIC)",
        targets: Targets {
            latency: "at most 100 ns",
            throughput: "at most 100 ns",
            balanced: "at most 100 ns",
        },
        why: "Timestamps are taken around every request; a slow clock adds to each and to the application's own reads.",
        tradeoff: "None: a measurement.",
        apply: ApplyKind::None,
        how: "follows from the clocksource",
        revert: "nothing to revert",
        volatile: true,
        assess: clock_cost,
    },
];
