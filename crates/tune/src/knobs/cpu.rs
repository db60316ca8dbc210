//! CPU frequency: BIOS power policy, governor, energy preference, turbo.

use super::{change, collapse, is_guest};
use crate::host::{Host, Unread};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

const CPUFREQ: &str = "/sys/devices/system/cpu/cpufreq";

/// cpufreq policies present (`policy0`, ...).
fn policies(host: &Host) -> Result<Vec<String>, Unread> {
    Ok(host
        .list(CPUFREQ)?
        .into_iter()
        .filter(|n| n.starts_with("policy"))
        .collect())
}

fn no_cpufreq(host: &Host) -> Assessment {
    if is_guest(host) {
        Assessment::not_visible(
            "no cpufreq policy in this VM: the host's governor decides the frequency",
        )
    } else {
        Assessment::not_visible(
            "no cpufreq driver: the firmware decides the frequency (check the BIOS power profile)",
        )
    }
}

fn bios_power(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    if is_guest(host) {
        return Ok(Assessment::not_visible(
            "a VM cannot read the physical machine's firmware settings",
        ));
    }
    let driver = host
        .read("/sys/devices/system/cpu/cpuidle/current_driver")
        .unwrap_or_else(|_| "none".into());
    let freq = if policies(host).map(|p| p.is_empty()).unwrap_or(true) {
        "firmware (no cpufreq driver)"
    } else {
        "OS (cpufreq)"
    };
    Ok(Assessment::info(format!("firmware settings are not readable from the OS; idle driver {driver}, frequency control by {freq}"))
        .note("an OS-controlled frequency with C-states available means the BIOS is not in a static high-performance mode"))
}

fn governor(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let pols = policies(host).or_else(|u| {
        if u.kind == crate::host::UnreadKind::Missing {
            Ok(Vec::new())
        } else {
            Err(u)
        }
    })?;
    if pols.is_empty() {
        return Ok(no_cpufreq(host));
    }
    let mut items = Vec::new();
    let mut good = true;
    let mut changes = Vec::new();
    for pol in &pols {
        let path = format!("{CPUFREQ}/{pol}/scaling_governor");
        let g = host.read(&path)?;
        let avail = host
            .read(&format!("{CPUFREQ}/{pol}/scaling_available_governors"))
            .unwrap_or_default();
        let ok = match p {
            Profile::Latency | Profile::Throughput => g == "performance",
            Profile::Balanced => true,
        };
        if !ok {
            good = false;
            if avail.split_whitespace().any(|a| a == "performance") {
                changes.push(change(&path, "performance", g.clone()));
            }
        }
        items.push((pol.clone(), g));
    }
    let mut a = Assessment::judge(good, collapse(&items));
    a.changes = changes;
    Ok(a)
}

fn epp(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let pols = policies(host).or_else(|u| {
        if u.kind == crate::host::UnreadKind::Missing {
            Ok(Vec::new())
        } else {
            Err(u)
        }
    })?;
    if pols.is_empty() {
        return Ok(no_cpufreq(host));
    }
    let mut items = Vec::new();
    let mut good = true;
    let mut changes = Vec::new();
    for pol in &pols {
        let path = format!("{CPUFREQ}/{pol}/energy_performance_preference");
        if !host.exists(&path) {
            continue;
        }
        let v = host.read(&path)?;
        let ok = match p {
            Profile::Latency => v == "performance",
            Profile::Throughput => v == "performance" || v == "balance_performance",
            Profile::Balanced => true,
        };
        if !ok {
            good = false;
            changes.push(change(&path, "performance", v.clone()));
        }
        items.push((pol.clone(), v));
    }
    if items.is_empty() {
        return Ok(Assessment::not_visible("the cpufreq driver has no energy_performance_preference (not intel_pstate/amd_pstate active)"));
    }
    let mut a = Assessment::judge(good, collapse(&items));
    a.changes = changes;
    Ok(a)
}

fn turbo(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    const NO_TURBO: &str = "/sys/devices/system/cpu/intel_pstate/no_turbo";
    const BOOST: &str = "/sys/devices/system/cpu/cpufreq/boost";
    let (path, on, on_value, off_value) = if host.exists(NO_TURBO) {
        let v: u8 = host.parse(NO_TURBO)?;
        (NO_TURBO, v == 0, "0", "1")
    } else if host.exists(BOOST) {
        let v: u8 = host.parse(BOOST)?;
        (BOOST, v == 1, "1", "0")
    } else if is_guest(host) {
        return Ok(Assessment::not_visible(
            "turbo is a host/BIOS setting a VM cannot see",
        ));
    } else {
        return Ok(Assessment::not_visible(
            "neither intel_pstate/no_turbo nor cpufreq/boost exists",
        ));
    };
    let a = Assessment::judge(on, if on { "enabled" } else { "disabled" })
        .note(format!("read from {path}"));
    Ok(if on {
        a
    } else {
        a.change(change(path, on_value, off_value))
    })
}

fn epb(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let mut items = Vec::new();
    let mut changes = Vec::new();
    let mut good = true;
    for cpu in super::online_cpus(host)? {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/power/energy_perf_bias");
        if !host.exists(&path) {
            continue;
        }
        let v: u8 = host.parse(&path)?;
        if v > 15 {
            return Err(Unread::garbage(
                &path,
                format!("expected 0 to 15, found {v}"),
            ));
        }
        let ok = match p {
            Profile::Latency => v == 0,
            Profile::Throughput => v <= 6,
            Profile::Balanced => true,
        };
        if !ok {
            good = false;
            changes.push(change(&path, "0", v.to_string()));
        }
        items.push((format!("cpu{cpu}"), v.to_string()));
    }
    if items.is_empty() {
        return Ok(if is_guest(host) {
            Assessment::not_visible("no energy_perf_bias in this VM: a host/BIOS setting")
        } else {
            Assessment::not_visible("the CPU or driver exposes no energy_perf_bias")
        });
    }
    let mut a = Assessment::judge(good, collapse(&items));
    a.changes = changes;
    Ok(a)
}

fn min_perf(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const MIN: &str = "/sys/devices/system/cpu/intel_pstate/min_perf_pct";
    if !host.exists(MIN) {
        return Ok(if is_guest(host) {
            Assessment::not_visible("intel_pstate is a host driver; a VM does not see it")
        } else {
            Assessment::not_visible("not intel_pstate: no min_perf_pct")
        });
    }
    let v: u8 = host.parse(MIN)?;
    let good = p != Profile::Latency || v == 100;
    let a = Assessment::judge(good, format!("min_perf_pct={v}"));
    Ok(if good {
        a
    } else {
        a.change(change(MIN, "100", v.to_string()))
    })
}

fn platform_profile(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const PP: &str = "/sys/firmware/acpi/platform_profile";
    let cur = match host.read(PP) {
        Ok(v) => v,
        Err(u) if u.kind == crate::host::UnreadKind::Missing => {
            return Ok(Assessment::not_visible(
                "no ACPI platform profile (most servers and VMs have none)",
            ))
        }
        Err(u) => return Err(u),
    };
    let choices = host
        .read("/sys/firmware/acpi/platform_profile_choices")
        .unwrap_or_default();
    let good = p != Profile::Latency || cur == "performance";
    let mut a = Assessment::judge(good, format!("{cur} (choices: {choices})"));
    if !good && choices.split_whitespace().any(|c| c == "performance") {
        a = a.change(change(PP, "performance", cur.clone()));
    }
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "bios.power",
        title: "Firmware power management (static high performance, C1E off)",
        layer: Layer::Bios,
        reads: "nothing readable: inferred from the hypervisor flag (/proc/cpuinfo), the cpuidle driver and the presence of cpufreq",
        targets: Targets {
            latency: "static high / maximum performance, C-states and C1E disabled in firmware",
            throughput: "OS-controlled power management",
            balanced: "OS-controlled power management",
        },
        why: "Any power management adds the time to leave a low-power state to the path of an event that wakes an idle CPU.",
        tradeoff: "Full power all the time: more heat, more watts, less turbo headroom.",
        apply: ApplyKind::Manual,
        how: "firmware setup: power profile 'maximum performance', C-states and C1E disabled (HP: Static High; Dell: Performance)",
        revert: "firmware setup: restore the previous power profile",
        volatile: false,
        assess: bios_power,
    },
    Knob {
        id: "bios.platform-profile",
        title: "ACPI platform profile (firmware power/thermal mode)",
        layer: Layer::Bios,
        reads: "/sys/firmware/acpi/platform_profile, platform_profile_choices",
        targets: Targets {
            latency: "performance",
            throughput: "any",
            balanced: "any (balanced is the usual default)",
        },
        why: "The firmware's power and cooling mode caps sustained frequency and may push deeper package states.",
        tradeoff: "Louder fans, more power.",
        apply: ApplyKind::Runtime,
        how: "echo performance > /sys/firmware/acpi/platform_profile (tuned: [acpi] platform_profile=performance)",
        revert: "write the former profile back (journaled)",
        volatile: false,
        assess: platform_profile,
    },
    Knob {
        id: "cpu.governor",
        title: "CPU frequency governor",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor, scaling_available_governors",
        targets: Targets {
            latency: "performance",
            throughput: "performance",
            balanced: "any (schedutil is the usual default)",
        },
        why: "A dynamic governor lowers the clock of an idle CPU; the first microseconds of a burst then run slow.",
        tradeoff: "Higher power draw at idle.",
        apply: ApplyKind::Runtime,
        how: "write 'performance' to /sys/devices/system/cpu/cpufreq/policy*/scaling_governor",
        revert: "write the former governor back (journaled)",
        volatile: false,
        assess: governor,
    },
    Knob {
        id: "cpu.epp",
        title: "Energy-performance preference (EPP)",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference",
        targets: Targets {
            latency: "performance",
            throughput: "performance or balance_performance",
            balanced: "any (balance_performance is the usual default)",
        },
        why: "With hardware P-states the CPU picks its own frequency; EPP tells it how eagerly to ramp up.",
        tradeoff: "Higher power draw; less thermal headroom for turbo on other cores.",
        apply: ApplyKind::Runtime,
        how: "write 'performance' to /sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference",
        revert: "write the former preference back (journaled)",
        volatile: false,
        assess: epp,
    },
    Knob {
        id: "cpu.turbo",
        title: "Turbo / boost",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/intel_pstate/no_turbo or /sys/devices/system/cpu/cpufreq/boost",
        targets: Targets {
            latency: "enabled (disable only if frequency jitter matters more than speed)",
            throughput: "enabled",
            balanced: "enabled",
        },
        why: "Turbo raises the clock when few cores are busy: shorter service times.",
        tradeoff: "The frequency varies with load and temperature: some jitter.",
        apply: ApplyKind::Runtime,
        how: "write 0 to /sys/devices/system/cpu/intel_pstate/no_turbo or 1 to /sys/devices/system/cpu/cpufreq/boost",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: turbo,
    },
    Knob {
        id: "cpu.epb",
        title: "Energy-performance bias (energy_perf_bias)",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/cpu*/power/energy_perf_bias",
        targets: Targets {
            latency: "0 (performance)",
            throughput: "0 to 6 (performance to normal)",
            balanced: "any (6, normal, is the usual default)",
        },
        why: "The bias steers the hardware's own power decisions (C-state promotion, uncore and turbo) towards speed or savings.",
        tradeoff: "More power at low load.",
        apply: ApplyKind::Runtime,
        how: "write 0 to /sys/devices/system/cpu/cpu*/power/energy_perf_bias (tuned: energy_perf_bias=performance)",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: epb,
    },
    Knob {
        id: "cpu.min-perf",
        title: "Minimum P-state (intel_pstate min_perf_pct)",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/intel_pstate/min_perf_pct",
        targets: Targets {
            latency: "100",
            throughput: "any",
            balanced: "any",
        },
        why: "A floor at 100% keeps every core at its highest non-turbo frequency: no ramp-up after idle.",
        tradeoff: "Full frequency even when idle: power and heat.",
        apply: ApplyKind::Runtime,
        how: "write 100 to /sys/devices/system/cpu/intel_pstate/min_perf_pct (tuned: min_perf_pct=100)",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: min_perf,
    },
];
