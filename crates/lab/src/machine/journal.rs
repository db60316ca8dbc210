//! The local record of what the lab made on other machines, next to the
//! lab's journal (`JOURNAL.machines`): one JSON line per machine a run
//! touched, written before the first command that makes anything there.
//!
//! A line names the machine (how to reach it) and its scratch directory,
//! which holds the copied `vnio` and the far side's own journal of what it
//! made (namespaces, macvlans, processes). Cleaning a line runs that
//! journal's `vnio lab clean --all` on the machine over SSH, removes the
//! directory, ends the connection master and removes its local socket
//! directory; a machine that cannot be reached keeps its line (and says so)
//! for the next `vnio lab clean`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use vnio_topo::ssh::{quote, Ssh};
use vnio_topo::{Journal, SCRATCH_PREFIX};

/// Where the lab's scratch directories are, on every machine.
pub const REMOTE_ROOT: &str = "/run/vnio/lab";

/// One machine a run touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineEntry {
    /// The scenario's name for it.
    pub machine: String,
    /// How to reach it.
    pub ssh: Ssh,
    /// The scratch directory there.
    pub dir: String,
    /// The run (local pid) that made it.
    pub owner: u32,
}

impl MachineEntry {
    /// The far side's cleaning script: its own journal's clean, then the
    /// directory. The binary is only run once complete (it is copied to
    /// `vnio.part` and renamed).
    pub fn clean_script(&self) -> String {
        let d = quote(&self.dir);
        format!(
            "if [ -x {d}/vnio ]; then VNIO_LAB_JOURNAL={d}/journal {d}/vnio lab clean --all >/dev/null || exit 1; fi; rm -rf {d}"
        )
    }

    /// True when the paths are the lab's (never remove anything else).
    fn is_ours(&self) -> bool {
        let under = |p: &Path| {
            p.is_absolute()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(SCRATCH_PREFIX))
        };
        under(Path::new(&self.dir))
            && self.dir.starts_with(REMOTE_ROOT)
            && !self.dir.contains("..")
            && under(&self.ssh.control_dir)
    }
}

/// What [`MachineJournal::clean`] did.
#[derive(Debug, Default)]
pub struct MachineCleanReport {
    /// Machines cleaned (name, directory).
    pub removed: Vec<String>,
    /// Machines that could not be cleaned, and why (they stay journalled).
    pub failed: Vec<String>,
}

/// The machines journal beside a lab journal.
#[derive(Debug, Clone)]
pub struct MachineJournal {
    path: PathBuf,
}

impl MachineJournal {
    /// The machines journal of `journal` (`PATH.machines`).
    pub fn beside(journal: &Journal) -> MachineJournal {
        let mut path = journal.path().as_os_str().to_owned();
        path.push(".machines");
        MachineJournal { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open(&self) -> Result<Flock<File>, String> {
        let what = |e: &dyn std::fmt::Display| format!("journal {}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| what(&e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| what(&e))?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| what(&e))
    }

    fn lines(file: &mut File) -> std::io::Result<Vec<String>> {
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_string(&mut text)?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    fn rewrite(file: &mut File, lines: &[String]) -> std::io::Result<()> {
        file.set_len(0)?;
        for l in lines {
            file.write_all(l.as_bytes())?;
            file.write_all(b"\n")?;
        }
        file.sync_data()
    }

    /// Append `entry`, durably, before anything is made on the machine.
    pub fn record(&self, entry: &MachineEntry) -> Result<(), String> {
        let mut file = self.open()?;
        let line = serde_json::to_string(entry).map_err(|e| e.to_string())?;
        file.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    /// Remove `entry` once everything it names is gone.
    pub fn forget(&self, entry: &MachineEntry) -> Result<(), String> {
        let mut file = self.open()?;
        let what = |e: std::io::Error| format!("rewriting {}: {e}", self.path.display());
        let lines = Self::lines(&mut file).map_err(what)?;
        let kept: Vec<String> = lines
            .into_iter()
            .filter(|l| serde_json::from_str::<MachineEntry>(l).ok().as_ref() != Some(entry))
            .collect();
        Self::rewrite(&mut file, &kept).map_err(what)
    }

    /// Every entry, oldest first (unreadable lines are skipped).
    pub fn entries(&self) -> Result<Vec<MachineEntry>, String> {
        if !self.path.exists() {
            return Ok(Vec::new());
        }
        let mut file = self.open()?;
        let lines = Self::lines(&mut file).map_err(|e| e.to_string())?;
        Ok(lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// Clean the machines of dead runs (`all`: of every run), keeping the
    /// entries that could not be cleaned.
    pub fn clean(&self, all: bool) -> Result<MachineCleanReport, String> {
        let mut report = MachineCleanReport::default();
        let me = std::process::id();
        for entry in self.entries()? {
            // A zombie or exiting owner is gone too (see vnio_topo::owner).
            let dead = !vnio_topo::owner::is_running(entry.owner as i32);
            if !(all || (dead && entry.owner != me)) {
                continue;
            }
            match clean_one(&entry) {
                Ok(()) => {
                    self.forget(&entry)?;
                    report
                        .removed
                        .push(format!("machine {} {}", entry.machine, entry.dir));
                }
                Err(e) => report
                    .failed
                    .push(format!("machine {}: {e}", entry.machine)),
            }
        }
        Ok(report)
    }
}

/// Remove what `entry` names: on the machine, then the local master.
pub fn clean_one(entry: &MachineEntry) -> Result<(), String> {
    if !entry.is_ours() {
        return Err(format!(
            "{} / {}: not lab scratch directories, left alone",
            entry.dir,
            entry.ssh.control_dir.display()
        ));
    }
    // The master's socket directory may be gone (the local journal's clean
    // removes scratch directories): ssh needs it to exist.
    let _ = std::fs::create_dir_all(&entry.ssh.control_dir);
    let result = entry.ssh.run(&entry.clean_script(), "cleaning").map(|_| ());
    entry.ssh.exit_master();
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&entry.ssh.control_dir);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dir: &str, owner: u32) -> MachineEntry {
        MachineEntry {
            machine: "m1".into(),
            ssh: Ssh {
                dest: "root@m1".into(),
                config: None,
                options: vec![],
                control_dir: PathBuf::from("/run/vnio/lab/vnio-lab-ssh1"),
            },
            dir: dir.into(),
            owner,
        }
    }

    #[test]
    fn record_forget_round_trip() {
        let base = std::env::temp_dir().join(format!("vnio-lab-mj-{}", std::process::id()));
        let j = MachineJournal::beside(&Journal::at(base.join("journal")));
        assert!(j.path().ends_with("journal.machines"));
        let a = entry("/run/vnio/lab/vnio-lab-a", 1);
        let b = entry("/run/vnio/lab/vnio-lab-b", 2);
        j.record(&a).unwrap();
        j.record(&b).unwrap();
        assert_eq!(j.entries().unwrap(), vec![a.clone(), b.clone()]);
        j.forget(&a).unwrap();
        assert_eq!(j.entries().unwrap(), vec![b]);
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn only_lab_directories_are_ours() {
        assert!(entry("/run/vnio/lab/vnio-lab-a", 1).is_ours());
        assert!(!entry("/home/me", 1).is_ours());
        assert!(!entry("/run/vnio/lab/../../etc/vnio-lab-x", 1).is_ours());
        assert!(!entry("vnio-lab-a", 1).is_ours());
        let script = entry("/run/vnio/lab/vnio-lab-a", 1).clean_script();
        assert!(
            script.ends_with("rm -rf '/run/vnio/lab/vnio-lab-a'"),
            "{script}"
        );
    }
}
