//! Idle: the idle driver, C-states, PM QoS, guest halt polling, KVM halt
//! polling.

use super::{change, cmdline, collapse, is_guest, online_cpus};
use crate::host::{Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};
use crate::pmqos;

const CPUIDLE: &str = "/sys/devices/system/cpu/cpuidle";

/// Deepest exit latency (µs) the latency profile accepts.
pub const LATENCY_MAX_EXIT_US: u64 = 2;

/// One idle state of one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleState {
    /// `stateN` directory.
    pub dir: String,
    /// Name (`POLL`, `C1`, `haltpoll`).
    pub name: String,
    /// Exit latency, µs.
    pub latency_us: u64,
    /// Disabled by `disable`.
    pub disabled: bool,
}

/// The idle states of one CPU (empty when it has none).
pub fn cpu_states(host: &Host, cpu: u32) -> Result<Vec<IdleState>, Unread> {
    let base = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle");
    let dirs = match host.list(&base) {
        Ok(d) => d,
        Err(u) if u.kind == UnreadKind::Missing => return Ok(Vec::new()),
        Err(u) => return Err(u),
    };
    let mut out = Vec::new();
    for dir in dirs.into_iter().filter(|d| d.starts_with("state")) {
        let p = format!("{base}/{dir}");
        let disable: u8 = host.parse(&format!("{p}/disable"))?;
        out.push(IdleState {
            name: host.read(&format!("{p}/name"))?,
            latency_us: host.parse(&format!("{p}/latency"))?,
            disabled: disable != 0,
            dir,
        });
    }
    Ok(out)
}

fn idle_driver(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let driver = match host.read(&format!("{CPUIDLE}/current_driver")) {
        Ok(d) => d,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::not_visible(
                "no cpuidle framework: the kernel idles with its default loop",
            ))
        }
        Err(u) => return Err(u),
    };
    let gov = host
        .read(&format!("{CPUIDLE}/current_governor_ro"))
        .or_else(|_| host.read(&format!("{CPUIDLE}/current_governor")))
        .unwrap_or_else(|_| "?".into());
    let words = cmdline(host).unwrap_or_default();
    let idle_poll = words.iter().any(|w| w == "idle=poll");
    let current = format!(
        "driver {driver}, governor {gov}{}",
        if idle_poll { ", idle=poll" } else { "" }
    );
    let guest = is_guest(host);
    let good = match p {
        Profile::Latency => !guest || driver == "haltpoll" || idle_poll,
        Profile::Throughput | Profile::Balanced => !idle_poll,
    };
    let mut a = Assessment::judge(good, current);
    if guest && driver != "haltpoll" && p == Profile::Latency {
        a = a.note("in a KVM guest, cpuidle-haltpoll polls before halting and avoids a VM exit per short idle (cpuidle_haltpoll.force=1 when vCPUs are not dedicated)");
    }
    Ok(a)
}

fn states(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let mut items = Vec::new();
    let mut good = true;
    let mut changes = Vec::new();
    for cpu in online_cpus(host)? {
        let st = cpu_states(host, cpu)?;
        if st.is_empty() {
            continue;
        }
        let desc = st
            .iter()
            .map(|s| {
                format!(
                    "{}({}us){}",
                    s.name,
                    s.latency_us,
                    if s.disabled { " off" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        for s in &st {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/{}/disable", s.dir);
            let deep = s.latency_us > LATENCY_MAX_EXIT_US;
            // Latency disables the deep states and leaves the shallow ones
            // as they are (all disabled means polling: never re-enable one);
            // the other profiles want every state usable.
            let want_disabled = match p {
                Profile::Latency => deep || s.disabled,
                Profile::Throughput | Profile::Balanced => false,
            };
            if want_disabled != s.disabled {
                good = false;
                let (to, back) = if want_disabled {
                    ("1", "0")
                } else {
                    ("0", "1")
                };
                changes.push(change(&path, to, back));
            }
        }
        items.push((format!("cpu{cpu}"), desc));
    }
    if items.is_empty() {
        return Ok(Assessment::not_visible("no cpuidle states exposed"));
    }
    let mut a = Assessment::judge(good, collapse(&items));
    a.changes = changes;
    Ok(a)
}

fn deepest_enabled_us(host: &Host) -> Option<u64> {
    let cpus = online_cpus(host).ok()?;
    let mut deepest = None;
    for cpu in cpus {
        for s in cpu_states(host, cpu).ok()? {
            if !s.disabled {
                deepest = Some(deepest.unwrap_or(0).max(s.latency_us));
            }
        }
    }
    deepest
}

fn pm_qos(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let value = match pmqos::current(host) {
        Ok(v) => v,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::not_visible(
                "no /dev/cpu_dma_latency (kernel without PM QoS)",
            ))
        }
        Err(u) => return Err(u),
    };
    let current = if value >= pmqos::NO_CONSTRAINT_US {
        "no request".to_string()
    } else {
        format!("{value} us")
    };
    let (holders, hidden) = pmqos::holders(host);
    let deepest = deepest_enabled_us(host);
    let good = match p {
        Profile::Latency => {
            value as u64 <= LATENCY_MAX_EXIT_US || deepest.is_some_and(|d| d <= LATENCY_MAX_EXIT_US)
        }
        Profile::Throughput | Profile::Balanced => true,
    };
    let mut a = Assessment::judge(good, current);
    if holders.is_empty() {
        a = a.note("held by no visible process");
    } else {
        let list: Vec<String> = holders
            .iter()
            .map(|(pid, c)| format!("{c}[{pid}]"))
            .collect();
        a = a.note(format!("held by {}", list.join(", ")));
    }
    if hidden > 0 {
        a = a.note(format!(
            "{hidden} processes' fds unreadable (not root): holders may be missing"
        ));
    }
    if let Some(d) = deepest {
        a = a.note(format!("deepest enabled idle state exits in {d} us"));
    }
    Ok(a)
}

fn haltpoll(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";
    if !host.exists(NS) {
        return Ok(if is_guest(host) {
            Assessment::not_visible("cpuidle-haltpoll is not loaded in this guest")
        } else {
            Assessment::info("not a guest: guest halt polling does not apply")
        });
    }
    let ns: u64 = host.parse(NS)?;
    let base = "/sys/module/haltpoll/parameters";
    let grow = host
        .read(&format!("{base}/guest_halt_poll_grow"))
        .unwrap_or_else(|_| "?".into());
    let shrink = host
        .read(&format!("{base}/guest_halt_poll_shrink"))
        .unwrap_or_else(|_| "?".into());
    let allow = host
        .read(&format!("{base}/guest_halt_poll_allow_shrink"))
        .unwrap_or_else(|_| "?".into());
    let good = match p {
        Profile::Latency => ns >= 200_000,
        Profile::Throughput | Profile::Balanced => true,
    };
    let mut a = Assessment::judge(good, format!("guest_halt_poll_ns={ns}"))
        .note(format!("grow={grow} shrink={shrink} allow_shrink={allow}"));
    if !good {
        a = a.change(change(NS, "200000", ns.to_string()));
    }
    Ok(a)
}

fn kvm_halt_poll(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const NS: &str = "/sys/module/kvm/parameters/halt_poll_ns";
    if !host.exists(NS) {
        return Ok(if is_guest(host) {
            Assessment::not_visible("the host's KVM halt_poll_ns is not visible from a guest")
        } else {
            Assessment::not_visible("the kvm module is not loaded")
        });
    }
    let ns: u64 = host.parse(NS)?;
    let base = "/sys/module/kvm/parameters";
    let grow = host
        .read(&format!("{base}/halt_poll_ns_grow"))
        .unwrap_or_else(|_| "?".into());
    let shrink = host
        .read(&format!("{base}/halt_poll_ns_shrink"))
        .unwrap_or_else(|_| "?".into());
    let good = match p {
        Profile::Latency => ns >= 200_000,
        Profile::Throughput => ns <= 200_000,
        Profile::Balanced => true,
    };
    let mut a = Assessment::judge(good, format!("halt_poll_ns={ns}"))
        .note(format!("grow={grow} shrink={shrink}"));
    if !good {
        a = a.change(change(NS, "200000", ns.to_string()));
    }
    if is_guest(host) {
        a = a.note("this is the kvm module of this (guest) kernel: it governs VMs nested in it, not this VM");
    }
    Ok(a)
}

fn resume_latency(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let mut items = Vec::new();
    let mut changes = Vec::new();
    let mut limits = Vec::new();
    for cpu in online_cpus(host)? {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us");
        let raw = match host.read(&path) {
            Ok(r) => r,
            Err(u) if u.kind == UnreadKind::Missing => continue,
            Err(u) => return Err(u),
        };
        // 0 reads as "no constraint"; "n/a" as "no idle state at all".
        let limit = match raw.as_str() {
            "n/a" => Some(0),
            r => match r.parse::<u64>() {
                Ok(0) => None,
                Ok(v) => Some(v),
                Err(_) => {
                    return Err(Unread::garbage(
                        &path,
                        format!(
                            "expected microseconds or n/a, found {}",
                            crate::host::excerpt(r)
                        ),
                    ))
                }
            },
        };
        limits.push(limit);
        items.push((
            format!("cpu{cpu}"),
            limit.map_or("no constraint".to_string(), |v| format!("{v} us")),
        ));
        if p == Profile::Latency && !matches!(limit, Some(v) if v <= LATENCY_MAX_EXIT_US) {
            changes.push(change(&path, LATENCY_MAX_EXIT_US.to_string(), raw.clone()));
        }
    }
    if items.is_empty() {
        return Ok(Assessment::not_visible(
            "no per-CPU pm_qos_resume_latency_us",
        ));
    }
    let shallow = deepest_enabled_us(host).is_some_and(|d| d <= LATENCY_MAX_EXIT_US);
    let capped = limits
        .iter()
        .all(|l| l.is_some_and(|v| v <= LATENCY_MAX_EXIT_US));
    let good = p != Profile::Latency || capped || shallow;
    let mut a = Assessment::judge(good, collapse(&items));
    if shallow && p == Profile::Latency {
        a = a.note(format!(
            "no enabled idle state exits slower than {LATENCY_MAX_EXIT_US} us: no limit needed"
        ));
    }
    if !good {
        a.changes = changes;
    }
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "idle.driver",
        title: "Idle driver and governor (haltpoll in guests)",
        layer: Layer::Guest,
        reads: "/sys/devices/system/cpu/cpuidle/current_driver, current_governor_ro; idle=poll in /proc/cmdline",
        targets: Targets {
            latency: "guest: haltpoll; host: intel_idle or acpi_idle, capped by PM QoS",
            throughput: "the platform driver, no idle=poll",
            balanced: "the platform driver, no idle=poll",
        },
        why: "A guest that halts exits to the hypervisor; waking it costs an IPI and a VM entry. haltpoll polls briefly first.",
        tradeoff: "Polling burns vCPU time the host could give to other VMs.",
        apply: ApplyKind::Reboot,
        how: "kernel command line: cpuidle_haltpoll.force=1 (guest), or load cpuidle-haltpoll",
        revert: "remove the parameter and reboot",
        volatile: false,
        assess: idle_driver,
    },
    Knob {
        id: "idle.states",
        title: "Per-state cpuidle disable (C-states)",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/online; cpu*/cpuidle/state*/{name,latency,disable}",
        targets: Targets {
            latency: "every state with exit latency above 2 us disabled (shallower ones left as they are)",
            throughput: "all states enabled",
            balanced: "all states enabled",
        },
        why: "Deep C-states take tens to hundreds of microseconds to exit: added to every wake-up of an idle CPU.",
        tradeoff: "Shallow idle draws more power and leaves less turbo headroom.",
        apply: ApplyKind::Runtime,
        how: "write 1 to /sys/devices/system/cpu/cpu*/cpuidle/state*/disable for the deep states",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: states,
    },
    Knob {
        id: "idle.pm-qos",
        title: "PM QoS CPU latency request (/dev/cpu_dma_latency) and who holds it",
        layer: Layer::Host,
        reads: "/dev/cpu_dma_latency (binary s32, root only); holders from the /proc/*/fd/* links",
        targets: Targets {
            latency: "a request of at most 2 us held open (or no deep state enabled)",
            throughput: "no request needed",
            balanced: "no request needed",
        },
        why: "The request keeps every CPU out of idle states slower to exit than the limit, without changing per-state settings.",
        tradeoff: "Same as disabling the states; the request ends when its holder exits.",
        apply: ApplyKind::Process,
        how: "run `vnio tune hold-pm-qos --latency-us 1` (or tuned) for as long as the limit is wanted",
        revert: "stop the holding process",
        volatile: false,
        assess: pm_qos,
    },
    Knob {
        id: "idle.cpu-resume-latency",
        title: "Per-CPU PM QoS resume latency (pm_qos_resume_latency_us)",
        layer: Layer::Host,
        reads: "/sys/devices/system/cpu/cpu*/power/pm_qos_resume_latency_us",
        targets: Targets {
            latency: "at most 2 us on every CPU (or no deep state enabled)",
            throughput: "any (no constraint, 0, is the default)",
            balanced: "any (no constraint, 0, is the default)",
        },
        why: "The same limit as /dev/cpu_dma_latency, per CPU, kept by the kernel without a process holding it.",
        tradeoff: "As disabling the deep states on those CPUs; lasts until reboot or revert.",
        apply: ApplyKind::Runtime,
        how: "write 2 to /sys/devices/system/cpu/cpu*/power/pm_qos_resume_latency_us (0 = no constraint)",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: resume_latency,
    },
    Knob {
        id: "idle.haltpoll",
        title: "Guest halt polling (haltpoll guest_halt_poll_ns)",
        layer: Layer::Guest,
        reads: "/sys/module/haltpoll/parameters/guest_halt_poll_{ns,grow,shrink,allow_shrink}",
        targets: Targets {
            latency: "guest_halt_poll_ns >= 200000",
            throughput: "any (0 spares host CPU)",
            balanced: "any",
        },
        why: "How long an idle vCPU polls before it halts and exits to the host.",
        tradeoff: "Polling vCPUs consume host CPU while idle.",
        apply: ApplyKind::Runtime,
        how: "write 200000 to /sys/module/haltpoll/parameters/guest_halt_poll_ns",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: haltpoll,
    },
    Knob {
        id: "kvm.halt-poll",
        title: "KVM halt polling (kvm halt_poll_ns)",
        layer: Layer::Hypervisor,
        reads: "/sys/module/kvm/parameters/halt_poll_ns, halt_poll_ns_grow, halt_poll_ns_shrink",
        targets: Targets {
            latency: "halt_poll_ns >= 200000",
            throughput: "halt_poll_ns <= 200000",
            balanced: "any",
        },
        why: "The host polls a halted vCPU for this long before descheduling it: the counterpart of 'spin before halt'.",
        tradeoff: "Host CPU spent polling on behalf of idle vCPUs.",
        apply: ApplyKind::Runtime,
        how: "write to /sys/module/kvm/parameters/halt_poll_ns (host), or kvm.halt_poll_ns= at boot",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: kvm_halt_poll,
    },
];
