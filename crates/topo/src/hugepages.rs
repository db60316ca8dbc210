//! 2 MiB hugepages for DPDK programs the lab runs (testpmd, OVS-DPDK):
//! the pool raised to what they need, a hugetlbfs mounted in a scratch
//! directory, and both given back afterwards.
//!
//! The reservation is journaled before anything changes (one entry holding
//! the mount point and the pool size to restore), so `vnio lab clean`
//! unmounts and restores what a crashed run left.

use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::error::{Context, Error, Result};
use crate::journal::{Entry, Journal};

/// The kernel's pool of default-size (2 MiB) hugepages.
const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// Hugepages reserved and a hugetlbfs mounted; dropping gives both back.
#[derive(Debug)]
pub struct Hugepages {
    mount: PathBuf,
    restore: u64,
    journal: Journal,
}

impl Hugepages {
    /// Raise the pool to at least `pages` 2 MiB pages (never lower it) and
    /// mount a hugetlbfs at `mount` (created if missing). Fails when the
    /// kernel grants fewer than `pages` (memory too fragmented or short).
    pub fn reserve(mount_at: &Path, pages: u64, journal: &Journal) -> Result<Hugepages> {
        let restore = read_pool()?;
        let entry = Entry::Hugepages {
            mount: mount_at.to_path_buf(),
            restore,
        };
        journal.record(&entry)?;
        let guard = Hugepages {
            mount: mount_at.to_path_buf(),
            restore,
            journal: journal.clone(),
        };
        if restore < pages {
            std::fs::write(NR_HUGEPAGES, pages.to_string())
                .what(|| format!("setting {NR_HUGEPAGES} to {pages}"))?;
            let got = read_pool()?;
            if got < pages {
                return Err(Error::os(
                    format!("reserving {pages} hugepages of 2 MiB"),
                    std::io::Error::other(format!(
                        "the kernel granted {got} (free memory too short or fragmented)"
                    )),
                ));
            }
        }
        std::fs::create_dir_all(mount_at).what(|| format!("creating {}", mount_at.display()))?;
        mount(
            Some("nodev"),
            mount_at,
            Some("hugetlbfs"),
            MsFlags::empty(),
            Some("pagesize=2M"),
        )
        .what(|| format!("mounting hugetlbfs at {}", mount_at.display()))?;
        Ok(guard)
    }

    /// The hugetlbfs mount point (DPDK's `--huge-dir`).
    pub fn dir(&self) -> &Path {
        &self.mount
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        if release(&self.mount, self.restore).is_ok() {
            let _ = self.journal.forget(&Entry::Hugepages {
                mount: self.mount.clone(),
                restore: self.restore,
            });
        }
    }
}

/// Unmount `mount` (if mounted), remove the directory, and set the pool
/// back to `restore` pages. `Ok(false)` when there was nothing to do.
pub(crate) fn release(mount_at: &Path, restore: u64) -> Result<bool> {
    let mut did = false;
    if is_mounted(mount_at) {
        // Files left in it (a killed DPDK program's segments) go with it.
        umount2(mount_at, MntFlags::MNT_DETACH)
            .what(|| format!("unmounting {}", mount_at.display()))?;
        did = true;
    }
    if std::fs::remove_dir(mount_at).is_ok() {
        did = true;
    }
    if read_pool()? != restore {
        std::fs::write(NR_HUGEPAGES, restore.to_string())
            .what(|| format!("restoring {NR_HUGEPAGES} to {restore}"))?;
        did = true;
    }
    Ok(did)
}

fn read_pool() -> Result<u64> {
    let text = std::fs::read_to_string(NR_HUGEPAGES).what(|| format!("reading {NR_HUGEPAGES}"))?;
    text.trim().parse().map_err(|_| {
        Error::os(
            format!("reading {NR_HUGEPAGES}"),
            std::io::Error::other(format!("not a number: {:?}", text.trim())),
        )
    })
}

fn is_mounted(path: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let want = path.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_ref()))
}
