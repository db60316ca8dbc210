//! The catalogue: every knob, one module per area, all of the shape
//! [`Knob`].

use crate::host::{parse_cpu_list, Host, Unread};
use crate::knob::{Change, Knob};

pub mod cpu;
pub mod idle;
pub mod irq;
pub mod mem;
pub mod net;
pub mod sched;
pub mod security;
pub mod time;
pub mod virt;

/// Every knob, in the order the audit shows them (BIOS to guest).
pub fn catalogue() -> Vec<&'static Knob> {
    [
        cpu::KNOBS,
        idle::KNOBS,
        sched::KNOBS,
        irq::KNOBS,
        net::KNOBS,
        mem::KNOBS,
        time::KNOBS,
        security::KNOBS,
        virt::KNOBS,
    ]
    .iter()
    .flat_map(|k| k.iter())
    .collect()
}

/// The knob with this id.
pub fn find(id: &str) -> Option<&'static Knob> {
    catalogue().into_iter().find(|k| k.id == id)
}

/// Checks that every id names a knob; the error lists the valid ids.
pub fn check_ids(ids: &[String]) -> Result<(), String> {
    let cat = catalogue();
    match ids
        .iter()
        .find(|id| !cat.iter().any(|k| k.id == id.as_str()))
    {
        None => Ok(()),
        Some(bad) => {
            let all: Vec<&str> = cat.iter().map(|k| k.id).collect();
            Err(format!("no knob {bad:?}; knobs: {}", all.join(", ")))
        }
    }
}

/// Online CPUs.
pub(crate) fn online_cpus(host: &Host) -> Result<Vec<u32>, Unread> {
    const P: &str = "/sys/devices/system/cpu/online";
    let s = host.read(P)?;
    match parse_cpu_list(&s) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Unread::garbage(
            P,
            format!("expected a CPU list, found {}", crate::host::excerpt(&s)),
        )),
    }
}

/// Whether the CPU flags say a hypervisor runs this machine.
pub(crate) fn is_guest(host: &Host) -> bool {
    host.read("/proc/cpuinfo")
        .is_ok_and(|c| virt::cpuinfo_has_flag(&c, "hypervisor"))
}

/// A change that writes `to` and restores `restore`.
pub(crate) fn change(path: &str, to: impl Into<String>, restore: impl Into<String>) -> Change {
    Change {
        path: path.to_string(),
        to: to.into(),
        restore: restore.into(),
    }
}

/// The kernel command line, split into words.
pub(crate) fn cmdline(host: &Host) -> Result<Vec<String>, Unread> {
    Ok(host
        .read("/proc/cmdline")?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The value of `name=value` on the command line, if present.
pub(crate) fn cmdline_value(words: &[String], name: &str) -> Option<String> {
    words.iter().find_map(|w| {
        w.strip_prefix(name)
            .and_then(|r| r.strip_prefix('='))
            .map(str::to_string)
    })
}

/// Joins per-item descriptions, collapsing identical ones: `cpu0-1: x`.
pub(crate) fn collapse(items: &[(String, String)]) -> String {
    if !items.is_empty() && items.iter().all(|(_, v)| *v == items[0].1) {
        if items.len() == 1 {
            return format!("{}: {}", items[0].0, items[0].1);
        }
        return format!("all {}: {}", items.len(), items[0].1);
    }
    items
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join("; ")
}
