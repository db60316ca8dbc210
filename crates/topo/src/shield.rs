//! A CPU shield without a reboot: every task of the machine's root cpuset
//! but this process moves to a cpuset holding the other CPUs, so what this
//! process starts afterwards (it stays in the root cpuset) has the shielded
//! CPUs to itself, as `isolcpus` would give them. Kernel threads pinned to
//! a CPU cannot move and stay.
//!
//! Needs the cgroup v1 cpuset controller (`/sys/fs/cgroup/cpuset`). The
//! cpuset is journaled before it is made, so `vnio lab clean` puts the
//! tasks back and removes it after a crash.

use std::path::{Path, PathBuf};

use crate::error::{Context, Error, Result};
use crate::journal::{Entry, Journal};

/// The cgroup v1 cpuset hierarchy's root.
pub const CPUSET_ROOT: &str = "/sys/fs/cgroup/cpuset";
/// Name prefix of the shield's cpuset (a guard for `clean`).
const PREFIX: &str = "vnio-lab-shield-";

/// A raised shield; dropping it lowers it.
#[derive(Debug)]
pub struct Shield {
    cpuset: PathBuf,
    journal: Journal,
    moved: usize,
}

impl Shield {
    /// Move every other task to the online CPUs not in `shielded`.
    pub fn raise(shielded: &[usize], journal: &Journal) -> Result<Shield> {
        let root = Path::new(CPUSET_ROOT);
        if !root.join("cgroup.procs").exists() {
            return Err(Error::os(
                "raising a CPU shield",
                std::io::Error::other(format!(
                    "it needs the cgroup v1 cpuset controller at {CPUSET_ROOT}"
                )),
            ));
        }
        let online = std::fs::read_to_string(root.join("cpuset.cpus"))
            .what(|| format!("reading {CPUSET_ROOT}/cpuset.cpus"))?;
        let rest: Vec<usize> = parse_list(online.trim())
            .into_iter()
            .filter(|c| !shielded.contains(c))
            .collect();
        if rest.is_empty() {
            return Err(Error::os(
                "raising a CPU shield",
                std::io::Error::other(format!(
                    "shielding CPUs {shielded:?} leaves none for the rest of the machine"
                )),
            ));
        }
        let me = std::process::id();
        let cpuset = root.join(format!("{PREFIX}{me}"));
        journal.record(&Entry::Cpuset(cpuset.clone()))?;
        std::fs::create_dir_all(&cpuset).what(|| format!("creating {}", cpuset.display()))?;
        let mut shield = Shield {
            cpuset: cpuset.clone(),
            journal: journal.clone(),
            moved: 0,
        };
        let list: Vec<String> = rest.iter().map(|c| c.to_string()).collect();
        write(&cpuset.join("cpuset.cpus"), &list.join(","))?;
        let mems = std::fs::read_to_string(root.join("cpuset.mems"))
            .what(|| format!("reading {CPUSET_ROOT}/cpuset.mems"))?;
        write(&cpuset.join("cpuset.mems"), mems.trim())?;
        // Twice: a process forked while the first pass ran is caught by
        // the second.
        for _ in 0..2 {
            for pid in procs(root) {
                if pid != me && write(&cpuset.join("cgroup.procs"), &pid.to_string()).is_ok() {
                    shield.moved += 1;
                }
            }
        }
        Ok(shield)
    }

    /// Tasks moved off the shielded CPUs.
    pub fn moved(&self) -> usize {
        self.moved
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        if lower(&self.cpuset).is_ok() {
            let _ = self.journal.forget(&Entry::Cpuset(self.cpuset.clone()));
        }
    }
}

/// Put the tasks of `cpuset` back in the root cpuset and remove it;
/// `Ok(false)` if it was gone.
pub(crate) fn lower(cpuset: &Path) -> Result<bool> {
    let named_ours = cpuset
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(PREFIX));
    if !named_ours || cpuset.parent() != Some(Path::new(CPUSET_ROOT)) {
        return Err(Error::os(
            format!("lowering the CPU shield {}", cpuset.display()),
            std::io::Error::other("not a shield's cpuset"),
        ));
    }
    if !cpuset.exists() {
        return Ok(false);
    }
    let root = Path::new(CPUSET_ROOT);
    // Three passes: tasks that fork while they move.
    for _ in 0..3 {
        for pid in procs(cpuset) {
            let _ = write(&root.join("cgroup.procs"), &pid.to_string());
        }
    }
    std::fs::remove_dir(cpuset).what(|| format!("removing cpuset {}", cpuset.display()))?;
    Ok(true)
}

fn procs(cpuset: &Path) -> Vec<u32> {
    std::fs::read_to_string(cpuset.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).what(|| format!("writing {value} to {}", path.display()))
}

/// "0-2,5" -> [0, 1, 2, 5].
fn parse_list(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_parse() {
        assert_eq!(super::parse_list("0-2,5"), vec![0, 1, 2, 5]);
        assert_eq!(super::parse_list("1"), vec![1]);
        assert_eq!(super::parse_list(""), Vec::<usize>::new());
    }
}
