//! The host resources a latency-high VM takes, and whether this host can
//! give them: dedicated cores for its vCPUs, and memory that is
//! preallocated, locked and on hugepages. Separate from the rest of the
//! planner because these read the host's facts (free, isolated and held
//! CPUs, hugepages, the memlock limit) and each turns into a setting with
//! its status; the NICs and the command line only use the outcome.

use std::path::PathBuf;

use super::{setting, Pinning, Setting, Status};
use crate::host::{format_cpu_list, HostFacts};

/// Dedicated cores for `vcpus` vCPUs: the highest free CPUs, isolated ones
/// first; CPU 0 (the lowest online) stays for the host, and one more free
/// CPU is left per switch port for its latency-high busy-poll worker (the
/// switch places that worker itself).
pub fn dedicate_cores(
    vcpus: usize,
    switch_pollers: usize,
    host: &HostFacts,
) -> Result<Pinning, String> {
    let online = &host.cpus_online;
    let held: Vec<usize> = host
        .cpus_held
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .collect();
    let housekeeping_cpu = online.first().copied().unwrap_or(0);
    let mut pool: Vec<usize> = online
        .iter()
        .copied()
        .filter(|c| *c != housekeeping_cpu && !held.contains(c))
        .collect();
    let need = vcpus + switch_pollers + 1;
    if pool.len() < vcpus + switch_pollers {
        let pollers = match switch_pollers {
            0 => String::new(),
            1 => "1 switch poller + ".to_string(),
            n => format!("{n} switch pollers + "),
        };
        let mut why = format!(
            "{vcpus} vCPU{} + {pollers}1 housekeeping core need {need} cores; this host has {} online ({})",
            if vcpus == 1 { "" } else { "s" },
            online.len(),
            format_cpu_list(online),
        );
        for (holder, cpus) in &host.cpus_held {
            why.push_str(&format!(", {} held by {holder}", format_cpu_list(cpus)));
        }
        return Err(why);
    }
    // Isolated first, then highest numbers first.
    pool.sort_by_key(|c| (!host.cpus_isolated.contains(c), std::cmp::Reverse(*c)));
    let vcpu_cores: Vec<usize> = pool[..vcpus].to_vec();
    let housekeeping = online
        .iter()
        .copied()
        .filter(|c| !vcpu_cores.contains(c) && !held.contains(c))
        .collect();
    Ok(Pinning {
        vcpus: vcpu_cores,
        housekeeping,
    })
}

/// vCPUs on dedicated cores (for latency high), with the settings that say
/// how; `None` when the cores cannot be dedicated.
pub(super) fn vcpu_pinning(
    vcpus: usize,
    switch_pollers: usize,
    host: &HostFacts,
    settings: &mut Vec<Setting>,
) -> Option<Pinning> {
    match dedicate_cores(vcpus, switch_pollers, host) {
        Ok(p) => {
            let not_isolated: Vec<usize> = p
                .vcpus
                .iter()
                .copied()
                .filter(|c| !host.cpus_isolated.contains(c))
                .collect();
            let (status, detail) = if not_isolated.is_empty() {
                (
                    Status::Honoured,
                    format!("vCPUs on isolated CPUs {}", format_cpu_list(&p.vcpus)),
                )
            } else {
                (
                    Status::Partial,
                    format!(
                        "vCPUs on CPUs {}; {} not isolated (isolcpus/nohz_full), so host tasks may still run there",
                        format_cpu_list(&p.vcpus),
                        format_cpu_list(&not_isolated)
                    ),
                )
            };
            settings.push(setting(
                "dedicated vCPU cores",
                "QMP query-cpus-fast thread ids + sched_setaffinity",
                status,
                detail,
            ));
            settings.push(setting(
                "emulator threads off the vCPU cores",
                "sched_setaffinity of QEMU's other threads",
                Status::Honoured,
                format!("on CPUs {}", format_cpu_list(&p.housekeeping)),
            ));
            Some(p)
        }
        Err(why) => {
            settings.push(setting(
                "dedicated vCPU cores",
                "QMP query-cpus-fast thread ids + sched_setaffinity",
                Status::NotHonoured,
                format!("{why}: vCPUs not pinned"),
            ));
            None
        }
    }
}

/// Memory preallocated, locked and on hugepages, and the guest idling
/// without exits (for latency high), with the settings that say how;
/// returns the hugetlbfs mount to back guest memory with, if there is room.
pub(super) fn memory_and_idle(
    mem: u64,
    kvm: bool,
    host: &HostFacts,
    settings: &mut Vec<Setting>,
) -> Option<PathBuf> {
    let mut hugepage_backend = None;
    settings.push(setting(
        "preallocated memory",
        "memory backend prealloc=on",
        Status::Honoured,
        format!("{mem} MiB touched at start"),
    ));
    match host.memlock_limit {
        Some(limit) if limit < mem * 1024 * 1024 => settings.push(setting(
            "locked memory",
            "-overcommit mem-lock=on",
            Status::NotHonoured,
            format!(
                "RLIMIT_MEMLOCK is {} KiB, the guest needs {mem} MiB (run as root or raise the limit)",
                limit / 1024
            ),
        )),
        _ => settings.push(setting(
            "locked memory",
            "-overcommit mem-lock=on",
            Status::Honoured,
            "QEMU's memory mlock()ed",
        )),
    }
    match &host.hugepages {
        Some(h) if h.free * h.page_kib >= mem * 1024 => {
            hugepage_backend = Some(h.mount.clone());
            settings.push(setting(
                "hugepages",
                "memory-backend-file on hugetlbfs",
                Status::Honoured,
                format!("{} KiB pages from {}", h.page_kib, h.mount.display()),
            ));
        }
        Some(h) => settings.push(setting(
            "hugepages",
            "memory-backend-file on hugetlbfs",
            Status::NotHonoured,
            format!(
                "{} free {} KiB pages on {}, the guest needs {mem} MiB: memfd with 4 KiB pages instead",
                h.free,
                h.page_kib,
                h.mount.display()
            ),
        )),
        None => settings.push(setting(
            "hugepages",
            "memory-backend-file on hugetlbfs",
            Status::NotHonoured,
            if host.hugepages_free_unmounted > 0 {
                "no hugetlbfs mounted: memfd with 4 KiB pages instead".to_string()
            } else {
                "no hugepages reserved (vm.nr_hugepages) and no hugetlbfs mounted: memfd with 4 KiB pages instead".to_string()
            },
        )),
    }
    if kvm {
        settings.push(setting(
            "guest idles without exits",
            "-overcommit cpu-pm=on",
            Status::Honoured,
            "HLT/MWAIT/PAUSE run in the guest on its dedicated core",
        ));
    } else {
        settings.push(setting(
            "guest idles without exits",
            "-overcommit cpu-pm=on",
            Status::NotHonoured,
            "cpu-pm needs KVM; this VM runs under TCG (see accel)",
        ));
    }
    hugepage_backend
}
