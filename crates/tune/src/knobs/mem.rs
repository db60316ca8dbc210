//! Memory: NUMA, transparent and explicit huge pages, KSM, swappiness and
//! dirty ratios, locked-memory limit, balloon.

use super::{change, is_guest};
use crate::host::{bracketed, excerpt, parse_cpu_list, Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

fn numa(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const ONLINE: &str = "/sys/devices/system/node/online";
    const BAL: &str = "/proc/sys/kernel/numa_balancing";
    let nodes = match host.read(ONLINE) {
        Ok(s) => parse_cpu_list(&s)
            .ok_or_else(|| {
                Unread::garbage(
                    ONLINE,
                    format!("expected a node list, found {}", excerpt(&s)),
                )
            })?
            .len(),
        Err(u) if u.kind == UnreadKind::Missing => 1,
        Err(u) => return Err(u),
    };
    let bal: Option<u64> = match host.parse(BAL) {
        Ok(v) => Some(v),
        Err(u) if u.kind == UnreadKind::Missing => None,
        Err(u) => return Err(u),
    };
    let current = format!(
        "{nodes} node{}; numa_balancing {}",
        if nodes == 1 { "" } else { "s" },
        bal.map_or("absent".to_string(), |b| b.to_string())
    );
    let Some(bal) = bal else {
        return Ok(Assessment::ok(current));
    };
    if nodes == 1 {
        return Ok(
            Assessment::ok(current).note("one node: automatic balancing has nothing to move")
        );
    }
    let good = match p {
        Profile::Latency => bal == 0,
        Profile::Throughput => bal != 0,
        Profile::Balanced => true,
    };
    let mut a = Assessment::judge(good, current).note("keep a latency VM's vCPUs and memory on one node (numactl, QEMU memory-backend host-nodes)");
    if !good {
        a = a.change(change(
            BAL,
            if p == Profile::Latency { "0" } else { "1" },
            bal.to_string(),
        ));
    }
    Ok(a)
}

fn choice(host: &Host, path: &str) -> Result<String, Unread> {
    let s = host.read(path)?;
    bracketed(&s).map(str::to_string).ok_or_else(|| {
        Unread::garbage(
            path,
            format!("expected a [selected] choice, found {}", excerpt(&s)),
        )
    })
}

fn thp(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const EN: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
    const DF: &str = "/sys/kernel/mm/transparent_hugepage/defrag";
    let en = match choice(host, EN) {
        Ok(v) => v,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::not_visible(
                "kernel built without transparent huge pages",
            ))
        }
        Err(u) => return Err(u),
    };
    let df = choice(host, DF)?;
    let (en_ok, df_ok, en_to, df_to) = match p {
        Profile::Latency => (
            en == "madvise" || en == "never",
            df == "never" || df == "defer",
            "madvise",
            "never",
        ),
        Profile::Throughput => (en == "always", df != "always", "always", "madvise"),
        Profile::Balanced => (true, true, "madvise", "madvise"),
    };
    let mut a = Assessment::judge(en_ok && df_ok, format!("enabled={en} defrag={df}"));
    if !en_ok {
        a = a.change(change(EN, en_to, en.clone()));
    }
    if !df_ok {
        a = a.change(change(DF, df_to, df.clone()));
    }
    Ok(a)
}

fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

fn hugepages(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let text = host.read("/proc/meminfo")?;
    let (Some(total), Some(free), Some(size)) = (
        meminfo_field(&text, "HugePages_Total"),
        meminfo_field(&text, "HugePages_Free"),
        meminfo_field(&text, "Hugepagesize"),
    ) else {
        return Err(Unread::garbage(
            "/proc/meminfo",
            "no HugePages_Total/HugePages_Free/Hugepagesize lines",
        ));
    };
    let mut a = Assessment::info(format!(
        "{total} default huge pages of {size} kB, {free} free"
    ));
    if let Ok(sizes) = host.list("/sys/kernel/mm/hugepages") {
        for s in sizes {
            if let Ok(n) = host.read(&format!("/sys/kernel/mm/hugepages/{s}/nr_hugepages")) {
                a = a.note(format!("{s}: {n}"));
            }
        }
    }
    Ok(a)
}

fn ksm(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const RUN: &str = "/sys/kernel/mm/ksm/run";
    let run: u8 = match host.parse(RUN) {
        Ok(v) => v,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::ok("not built in (no /sys/kernel/mm/ksm)"))
        }
        Err(u) => return Err(u),
    };
    let word = match run {
        0 => "stopped",
        1 => "running",
        2 => "stopped, pages unmerged",
        _ => {
            return Err(Unread::garbage(
                RUN,
                format!("expected 0, 1 or 2, found {run}"),
            ))
        }
    };
    let sharing = host
        .read("/sys/kernel/mm/ksm/pages_sharing")
        .unwrap_or_else(|_| "?".into());
    let good = match p {
        Profile::Latency | Profile::Throughput => run != 1,
        Profile::Balanced => true,
    };
    let mut a = Assessment::judge(good, format!("run={run} ({word})"))
        .note(format!("pages_sharing {sharing}"));
    if !good {
        a = a.change(change(RUN, "0", run.to_string()));
    }
    Ok(a)
}

fn vm_sysctls(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const SW: &str = "/proc/sys/vm/swappiness";
    const DR: &str = "/proc/sys/vm/dirty_ratio";
    const DB: &str = "/proc/sys/vm/dirty_background_ratio";
    let sw: u64 = host.parse(SW)?;
    let dr: u64 = host.parse(DR)?;
    let db: u64 = host.parse(DB)?;
    let mut current = format!("swappiness={sw} dirty_ratio={dr} dirty_background_ratio={db}");
    // When a byte limit is set the kernel reads its ratio as 0 (and a ratio
    // of 0 is never planned, so the byte limit is never overwritten).
    for name in ["dirty_bytes", "dirty_background_bytes"] {
        let path = format!("/proc/sys/vm/{name}");
        match host.parse::<u64>(&path) {
            Ok(0) => {}
            Ok(v) => current.push_str(&format!(" {name}={v}")),
            Err(u) if u.kind == UnreadKind::Missing => {}
            Err(u) => return Err(u),
        }
    }
    if p != Profile::Latency {
        return Ok(Assessment::ok(current));
    }
    let mut a = Assessment::judge(sw <= 10 && dr <= 10 && db <= 3, current);
    if sw > 10 {
        a = a.change(change(SW, "10", sw.to_string()));
    }
    if dr > 10 {
        a = a.change(change(DR, "10", dr.to_string()));
    }
    if db > 3 {
        a = a.change(change(DB, "3", db.to_string()));
    }
    Ok(a)
}

fn memlock(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const LIM: &str = "/proc/self/limits";
    let text = host.read(LIM)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .ok_or_else(|| Unread::garbage(LIM, "no 'Max locked memory' line"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()
        .unwrap_or("");
    let (current, unlimited) = match soft {
        "unlimited" => ("unlimited".to_string(), true),
        v => match v.parse::<u64>() {
            Ok(b) => (format!("{} KiB", b / 1024), false),
            Err(_) => {
                return Err(Unread::garbage(
                    LIM,
                    format!("expected a byte count, found {}", excerpt(v)),
                ))
            }
        },
    };
    let good = p != Profile::Latency || unlimited;
    Ok(Assessment::judge(good, format!("ulimit -l {current} (this process)"))
        .note("needed to mlockall() a latency process or lock a VM's memory (QEMU -overcommit mem-lock=on)"))
}

fn balloon(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    if !is_guest(host) {
        return Ok(Assessment::info("not a guest: no balloon"));
    }
    let mut found = false;
    if let Ok(devs) = host.list("/sys/bus/virtio/devices") {
        for d in devs {
            // virtio device id 5 is the memory balloon.
            if host
                .read(&format!("/sys/bus/virtio/devices/{d}/device"))
                .is_ok_and(|id| id == "0x0005")
            {
                found = true;
            }
        }
    } else if let Ok(irqs) = super::irq::irq_names(host) {
        found = irqs.iter().any(|(_, n)| n.contains("inflate"));
    } else {
        return Ok(Assessment::not_visible(
            "neither /sys/bus/virtio nor /proc/interrupts readable",
        ));
    }
    let reporting = super::cmdline(host)
        .unwrap_or_default()
        .iter()
        .any(|w| w.starts_with("page_reporting."));
    let current = if found {
        "virtio balloon present"
    } else {
        "no balloon device"
    };
    let good = p != Profile::Latency || !found;
    let mut a = Assessment::judge(good, current);
    if reporting {
        a = a.note("free page reporting configured on the command line: freed memory returns to the host and faults back in");
    }
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "mem.numa",
        title: "NUMA nodes and automatic NUMA balancing",
        layer: Layer::Host,
        reads: "/sys/devices/system/node/online, /proc/sys/kernel/numa_balancing",
        targets: Targets {
            latency: "numa_balancing=0, workload and its memory pinned to one node",
            throughput: "numa_balancing=1 on multi-node machines",
            balanced: "any",
        },
        why: "Remote memory costs more per access; automatic balancing unmaps pages to sample them, adding faults.",
        tradeoff: "Without balancing, misplaced memory stays remote unless pinned by hand.",
        apply: ApplyKind::Runtime,
        how: "sysctl -w kernel.numa_balancing=0",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: numa,
    },
    Knob {
        id: "mem.thp",
        title: "Transparent huge pages (enabled, defrag)",
        layer: Layer::Guest,
        reads: "/sys/kernel/mm/transparent_hugepage/enabled, defrag",
        targets: Targets {
            latency: "enabled=madvise or never, defrag=never or defer (no direct compaction stalls)",
            throughput: "enabled=always, defrag not 'always'",
            balanced: "any",
        },
        why: "Synchronous compaction to build a huge page stalls the faulting thread for milliseconds; khugepaged collapses pages behind its back.",
        tradeoff: "Fewer huge pages: more TLB misses for large working sets (use explicit huge pages for those).",
        apply: ApplyKind::Runtime,
        how: "echo never > /sys/kernel/mm/transparent_hugepage/defrag",
        revert: "write the former choice back (journaled)",
        volatile: false,
        assess: thp,
    },
    Knob {
        id: "mem.hugepages",
        title: "Explicit huge pages (hugetlbfs)",
        layer: Layer::Host,
        reads: "/proc/meminfo, /sys/kernel/mm/hugepages/*/nr_hugepages",
        targets: Targets {
            latency: "preallocated for the VM memory or the application (-XX:+UseLargePages, memory-backend-file)",
            throughput: "as for latency, where memory is large",
            balanced: "any",
        },
        why: "Huge pages cut TLB misses and page-walk time, more so under nested paging.",
        tradeoff: "Reserved memory is unavailable to everything else.",
        apply: ApplyKind::Manual,
        how: "sysctl -w vm.nr_hugepages=<n> (or hugepages=<n> at boot for 1 GiB pages)",
        revert: "sysctl -w vm.nr_hugepages=<former>",
        volatile: false,
        assess: hugepages,
    },
    Knob {
        id: "mem.ksm",
        title: "Kernel same-page merging (KSM)",
        layer: Layer::Host,
        reads: "/sys/kernel/mm/ksm/run, pages_sharing",
        targets: Targets {
            latency: "run=0 (stopped)",
            throughput: "run=0 (stopped)",
            balanced: "any",
        },
        why: "ksmd scans memory in the background; merged pages fault on write (copy-on-write).",
        tradeoff: "Less memory shared between similar VMs.",
        apply: ApplyKind::Runtime,
        how: "echo 0 > /sys/kernel/mm/ksm/run",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: ksm,
    },
    Knob {
        id: "mem.vm-sysctls",
        title: "Swappiness and dirty page ratios (vm.swappiness, vm.dirty_*ratio)",
        layer: Layer::Guest,
        reads: "/proc/sys/vm/swappiness, dirty_ratio, dirty_background_ratio",
        targets: Targets {
            latency: "swappiness<=10, dirty_ratio<=10, dirty_background_ratio<=3 (as tuned's latency-performance)",
            throughput: "any",
            balanced: "any",
        },
        why: "Less swapping of anonymous memory; smaller bursts of writeback that stall writers.",
        tradeoff: "Page cache is dropped sooner; writeback starts earlier.",
        apply: ApplyKind::Runtime,
        how: "sysctl -w vm.swappiness=10 vm.dirty_ratio=10 vm.dirty_background_ratio=3",
        revert: "write the former values back (journaled)",
        volatile: false,
        assess: vm_sysctls,
    },
    Knob {
        id: "mem.memlock",
        title: "Locked memory limit (ulimit -l)",
        layer: Layer::Guest,
        reads: "Max locked memory in /proc/self/limits",
        targets: Targets {
            latency: "unlimited for the latency process (or at least its working set)",
            throughput: "any",
            balanced: "any",
        },
        why: "Locked memory never faults or swaps; a VM with locked memory cannot be ballooned or swapped by the host.",
        tradeoff: "Locked memory is lost to the rest of the system.",
        apply: ApplyKind::Manual,
        how: "LimitMEMLOCK=infinity (systemd) or '<user> - memlock unlimited' in /etc/security/limits.conf",
        revert: "remove the setting",
        volatile: false,
        assess: memlock,
    },
    Knob {
        id: "mem.balloon",
        title: "Memory balloon visible in the guest",
        layer: Layer::Hypervisor,
        reads: "virtio device id 0x0005 in /sys/bus/virtio/devices/*/device (else an inflate queue in /proc/interrupts); page_reporting.* in /proc/cmdline",
        targets: Targets {
            latency: "no balloon device: memory fully reserved (and preallocated) by the host",
            throughput: "any",
            balanced: "any",
        },
        why: "A balloon lets the host reclaim guest memory; reclaimed memory faults back slowly, and the host may swap the rest.",
        tradeoff: "No memory overcommit for this VM.",
        apply: ApplyKind::Manual,
        how: "QEMU: no virtio-balloon device, -mem-prealloc, -overcommit mem-lock=on",
        revert: "add the balloon back to the VM definition",
        volatile: false,
        assess: balloon,
    },
];
