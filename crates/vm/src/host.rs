//! What this host offers a latency-sensitive guest: CPUs (online,
//! isolated, already dedicated to other vnio VMs), hugepages, locked
//! memory, vhost-net. Read once ([`HostFacts::read`]) and passed to the
//! planner as a value, so plans are testable with any host's facts.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Free hugepages on a mounted hugetlbfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hugepages {
    /// Where hugetlbfs is mounted.
    pub mount: PathBuf,
    /// Page size in KiB (the default size, /proc/meminfo Hugepagesize).
    pub page_kib: u64,
    /// Free pages (HugePages_Free).
    pub free: u64,
}

/// The host, as far as launching a guest is concerned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    /// Online CPUs.
    pub cpus_online: Vec<usize>,
    /// CPUs isolated from the scheduler (isolcpus / nohz_full).
    pub cpus_isolated: Vec<usize>,
    /// CPUs already dedicated elsewhere: (holder, CPUs), the holder being
    /// `VM g2` or `switch port p1`.
    pub cpus_held: Vec<(String, Vec<usize>)>,
    /// Hugepages (`None`: no hugetlbfs mounted).
    pub hugepages: Option<Hugepages>,
    /// Free pages per size when no hugetlbfs is mounted, for the message.
    pub hugepages_free_unmounted: u64,
    /// Bytes QEMU may lock (`None`: unlimited, or CAP_IPC_LOCK).
    pub memlock_limit: Option<u64>,
    /// `/dev/vhost-net` exists (in-kernel virtio-net backend for taps).
    pub vhost_net: bool,
}

/// Parses a kernel CPU list: "0-3,6,8-9".
pub fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(c) = part.parse() {
                    out.push(c);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Formats CPUs as a kernel CPU list ("0-3,6").
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let start = v[i];
        let mut end = start;
        while i + 1 < v.len() && v[i + 1] == end + 1 {
            i += 1;
            end = v[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

fn meminfo_value(meminfo: &str, key: &str) -> Option<u64> {
    meminfo
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l[key.len() + 1..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl HostFacts {
    /// Reads this host. `cpus_held` comes from the running VMs' states.
    pub fn read(cpus_held: Vec<(String, Vec<usize>)>) -> Self {
        let online = parse_cpu_list(&read("/sys/devices/system/cpu/online"));
        let mut isolated = parse_cpu_list(&read("/sys/devices/system/cpu/isolated"));
        isolated.extend(parse_cpu_list(&read("/sys/devices/system/cpu/nohz_full")));
        isolated.sort_unstable();
        isolated.dedup();
        let meminfo = read("/proc/meminfo");
        let free = meminfo_value(&meminfo, "HugePages_Free").unwrap_or(0);
        let page_kib = meminfo_value(&meminfo, "Hugepagesize").unwrap_or(2048);
        let mount = read("/proc/mounts")
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 2 && f[2] == "hugetlbfs").then(|| PathBuf::from(f[1]))
            })
            .next();
        let memlock_limit = if nix::unistd::geteuid().is_root() {
            None
        } else {
            match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
                Ok((soft, _)) if soft != libc::RLIM_INFINITY => Some(soft),
                _ => None,
            }
        };
        Self {
            cpus_online: if online.is_empty() { vec![0] } else { online },
            cpus_isolated: isolated,
            cpus_held,
            hugepages: mount.clone().map(|m| Hugepages {
                mount: m,
                page_kib,
                free,
            }),
            hugepages_free_unmounted: if mount.is_none() { free } else { 0 },
            memlock_limit,
            vhost_net: Path::new("/dev/vhost-net").exists(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-3,6,8-9\n"), vec![0, 1, 2, 3, 6, 8, 9]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
        assert_eq!(format_cpu_list(&[9, 8, 0, 1, 2, 3, 6]), "0-3,6,8-9");
        assert_eq!(format_cpu_list(&[1]), "1");
    }

    #[test]
    fn meminfo_keys_are_matched_whole() {
        let m = "HugePages_Total:       4\nHugePages_Free:        3\nHugepagesize:       2048 kB\n";
        assert_eq!(meminfo_value(m, "HugePages_Free"), Some(3));
        assert_eq!(meminfo_value(m, "Hugepagesize"), Some(2048));
        assert_eq!(meminfo_value(m, "HugePages"), None);
    }
}
