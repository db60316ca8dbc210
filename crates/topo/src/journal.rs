//! The crash-safety journal: every object is recorded before its creation is
//! attempted, and [`Journal::clean`] removes whatever a dead run left.
//!
//! One line per object, `KIND NAME OWNER_PID`:
//!
//! ```text
//! netns vnio-3kx0-a 4711
//! link vnio3kx1r 4711
//! process 4712:98231 4711
//! dir /run/vnio/lab/vnio-lab-3kx2 4711
//! hugepages 0:/run/vnio/lab/vnio-lab-3kx2/hugetlbfs 4711
//! ```
//!
//! A process is recorded as `PID:STARTTIME` (field 22 of `/proc/PID/stat`) so
//! a recycled pid is never killed. Writers hold an exclusive `flock` on the
//! file while they append or rewrite it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::error::{Context, Error, Result};
use crate::owner::{is_running, Owner};

/// Default journal location.
pub const DEFAULT_JOURNAL: &str = "/run/vnio/lab-journal";

/// Environment variable overriding [`DEFAULT_JOURNAL`].
pub const JOURNAL_ENV: &str = "VNIO_LAB_JOURNAL";

/// Name prefix a journaled directory must have to be removed by `clean`
/// (a guard against ever removing anything else).
pub const SCRATCH_PREFIX: &str = "vnio-lab-";

/// The owner pid of a journal line (its last word).
fn owner_of(line: &str) -> Option<i32> {
    line.split_whitespace().nth(2)?.parse().ok()
}

/// One object the lab created (or was about to create).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A named network namespace (`/run/netns/NAME`).
    Netns(String),
    /// An interface in the root namespace.
    Link(String),
    /// A scratch directory (sockets, configuration files) of a lab run,
    /// removed with its contents. Only directories whose name starts with
    /// [`SCRATCH_PREFIX`] are ever removed.
    Dir(PathBuf),
    /// A process, by pid and start time (clock ticks since boot).
    Process {
        /// Process id.
        pid: i32,
        /// Start time from `/proc/PID/stat`, guarding against pid reuse.
        start_time: u64,
    },
    /// A CPU shield's cpuset: its tasks go back to the root cpuset.
    Cpuset(PathBuf),
    /// Hugepages reserved and a hugetlbfs mounted for a DPDK program:
    /// unmounted, and the pool set back to `restore` pages.
    Hugepages {
        /// The hugetlbfs mount point.
        mount: PathBuf,
        /// `nr_hugepages` before the reservation.
        restore: u64,
    },
}

impl Entry {
    /// The entry of running process `pid` (pid and start time), for a
    /// process started by other means than [`crate::Process`] (e.g. QEMU,
    /// which the VM launcher spawns); `None` once it has exited.
    pub fn process(pid: i32) -> Option<Entry> {
        process_start_time(pid).map(|start_time| Entry::Process { pid, start_time })
    }

    fn kind_and_name(&self) -> (&'static str, String) {
        match self {
            Entry::Netns(name) => ("netns", name.clone()),
            Entry::Link(name) => ("link", name.clone()),
            Entry::Dir(path) => ("dir", path.display().to_string()),
            Entry::Process { pid, start_time } => ("process", format!("{pid}:{start_time}")),
            Entry::Hugepages { mount, restore } => {
                ("hugepages", format!("{restore}:{}", mount.display()))
            }
            Entry::Cpuset(path) => ("cpuset", path.display().to_string()),
        }
    }

    fn line(&self) -> String {
        let (kind, name) = self.kind_and_name();
        format!("{kind} {name} {}\n", std::process::id())
    }

    fn parse(line: &str) -> Option<Entry> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let name = words.next()?.to_owned();
        match kind {
            "netns" => Some(Entry::Netns(name)),
            "link" => Some(Entry::Link(name)),
            "dir" => Some(Entry::Dir(PathBuf::from(name))),
            "cpuset" => Some(Entry::Cpuset(PathBuf::from(name))),
            "hugepages" => {
                let (restore, mount) = name.split_once(':')?;
                Some(Entry::Hugepages {
                    mount: PathBuf::from(mount),
                    restore: restore.parse().ok()?,
                })
            }
            "process" => {
                let (pid, start) = name.split_once(':')?;
                Some(Entry::Process {
                    pid: pid.parse().ok()?,
                    start_time: start.parse().ok()?,
                })
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, name) = self.kind_and_name();
        write!(f, "{kind} {name}")
    }
}

/// What [`Journal::clean`] did.
#[derive(Debug, Default)]
pub struct CleanReport {
    /// Objects that existed and were removed.
    pub removed: Vec<Entry>,
    /// Objects that could not be removed (they stay in the journal), with
    /// the reason.
    pub failed: Vec<(Entry, Error)>,
    /// Objects left alone because their owner still runs (only
    /// [`Journal::clean_orphans`] leaves any), with that owner; `None` for
    /// a line that names no owner.
    pub kept: Vec<(Entry, Option<Owner>)>,
}

/// A journal file. Cheap to clone: it is only a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    path: PathBuf,
}

impl Default for Journal {
    /// `$VNIO_LAB_JOURNAL` if set, else `/run/vnio/lab-journal`.
    fn default() -> Self {
        let path = std::env::var_os(JOURNAL_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_JOURNAL));
        Journal { path }
    }
}

impl Journal {
    /// A journal at `path` (created on first use, with its directory).
    pub fn at(path: impl Into<PathBuf>) -> Journal {
        Journal { path: path.into() }
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_locked(&self) -> Result<Flock<File>> {
        let what = || format!("opening journal {}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).what(what)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .what(what)?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .what(|| format!("locking journal {}", self.path.display()))
    }

    /// Append `entry`, durably, before the object is created.
    pub fn record(&self, entry: &Entry) -> Result<()> {
        let mut file = self.open_locked()?;
        let what = || format!("writing journal {}", self.path.display());
        file.write_all(entry.line().as_bytes()).what(what)?;
        file.sync_data().what(what)
    }

    /// Remove `entry` (its first occurrence) once the object is gone.
    pub fn forget(&self, entry: &Entry) -> Result<()> {
        let mut file = self.open_locked()?;
        let lines = read_lines(&mut file).what(|| self.what_reading())?;
        let mut found = false;
        let kept: Vec<String> = lines
            .into_iter()
            .filter(|line| {
                if !found && Entry::parse(line).as_ref() == Some(entry) {
                    found = true;
                    false
                } else {
                    true
                }
            })
            .collect();
        if found {
            rewrite(&mut file, &kept)
                .what(|| format!("rewriting journal {}", self.path.display()))?;
        }
        Ok(())
    }

    /// Every entry in the journal, oldest first.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        if !self.path.exists() {
            return Ok(Vec::new());
        }
        let mut file = self.open_locked()?;
        let lines = read_lines(&mut file).what(|| self.what_reading())?;
        Ok(lines.iter().filter_map(|l| Entry::parse(l)).collect())
    }

    /// Remove every listed object that still exists (processes first, then
    /// namespaces, then root-namespace links), and keep in the journal only
    /// what could not be removed. Idempotent; a missing journal is an empty
    /// one.
    ///
    /// Only run it when no other lab run is using the same journal: it does
    /// not check whether the owner of an entry is still alive.
    pub fn clean(&self) -> Result<CleanReport> {
        self.clean_where(|_| true)
    }

    /// Like [`Journal::clean`], but only for entries whose owner process is
    /// gone (a crashed or killed run; a zombie or an exiting process counts
    /// as gone, see [`crate::owner`]): safe while other runs share the
    /// journal. Entries of live owners stay untouched and are listed in
    /// [`CleanReport::kept`].
    pub fn clean_orphans(&self) -> Result<CleanReport> {
        let me = std::process::id() as i32;
        self.clean_where(|owner| owner.is_some_and(|pid| pid != me && !is_running(pid)))
    }

    fn clean_where(&self, take: impl Fn(Option<i32>) -> bool) -> Result<CleanReport> {
        let mut report = CleanReport::default();
        if !self.path.exists() {
            return Ok(report);
        }
        let mut file = self.open_locked()?;
        let lines = read_lines(&mut file).what(|| self.what_reading())?;
        let (taken, untouched): (Vec<&String>, Vec<&String>) =
            lines.iter().partition(|l| take(owner_of(l)));
        let mut seen = std::collections::HashSet::new();
        let mut entries: Vec<(Entry, String)> = taken
            .iter()
            .filter_map(|l| Entry::parse(l).map(|e| (e, l.to_string())))
            .filter(|(e, _)| seen.insert(e.clone()))
            .collect();
        let order = |e: &Entry| match e {
            Entry::Process { .. } => 0,
            // Shielded tasks back before anything else goes.
            Entry::Cpuset(_) => 0,
            Entry::Netns(_) => 1,
            Entry::Link(_) => 2,
            // After the processes using them, before the directory holding them.
            Entry::Hugepages { .. } => 3,
            Entry::Dir(_) => 4,
        };
        entries.sort_by_key(|(e, _)| order(e));
        let mut seen_kept = std::collections::HashSet::new();
        report.kept = untouched
            .iter()
            .filter_map(|l| Entry::parse(l).map(|e| (e, owner_of(l))))
            .filter(|(e, _)| seen_kept.insert(e.clone()))
            .map(|(e, pid)| (e, pid.map(Owner::of)))
            .collect();
        let mut kept: Vec<String> = untouched.into_iter().cloned().collect();
        for (entry, line) in entries {
            match remove(&entry) {
                Ok(true) => report.removed.push(entry),
                Ok(false) => {}
                Err(e) => {
                    kept.push(line);
                    report.failed.push((entry, e));
                }
            }
        }
        rewrite(&mut file, &kept).what(|| format!("rewriting journal {}", self.path.display()))?;
        Ok(report)
    }

    fn what_reading(&self) -> String {
        format!("reading journal {}", self.path.display())
    }
}

/// Remove one object; `Ok(false)` if it was already gone.
fn remove(entry: &Entry) -> Result<bool> {
    match entry {
        Entry::Netns(name) => crate::netns::remove_named(name),
        Entry::Link(name) => crate::link::remove_root_link(name),
        Entry::Dir(path) => remove_scratch_dir(path),
        Entry::Hugepages { mount, restore } => crate::hugepages::release(mount, *restore),
        Entry::Cpuset(path) => crate::shield::lower(path),
        Entry::Process { pid, start_time } => {
            if process_start_time(*pid) != Some(*start_time) {
                return Ok(false);
            }
            match kill(Pid::from_raw(*pid), Signal::SIGKILL) {
                Ok(()) => Ok(true),
                Err(nix::errno::Errno::ESRCH) => Ok(false),
                Err(e) => Err(e).what(|| format!("killing process {pid}")),
            }
        }
    }
}

/// Remove a scratch directory and its contents; `Ok(false)` if gone.
fn remove_scratch_dir(path: &Path) -> Result<bool> {
    let what = || format!("removing directory {}", path.display());
    let named_ours = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(SCRATCH_PREFIX));
    if !named_ours || !path.is_absolute() {
        return Err(Error::os(
            what(),
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a lab scratch directory (name must start with {SCRATCH_PREFIX})"),
            ),
        ));
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).what(what),
    }
}

/// Field 22 of `/proc/PID/stat`: the start time in clock ticks since boot.
pub(crate) fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

fn read_lines(file: &mut File) -> io::Result<Vec<String>> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    Ok(text.lines().map(str::to_owned).collect())
}

fn rewrite(file: &mut File, lines: &[String]) -> io::Result<()> {
    file.set_len(0)?;
    // The file is in append mode: writes land at the (new) end.
    for line in lines {
        let line = line.trim_end_matches('\n');
        file.write_all(line.as_bytes())?;
        file.write_all(b"\n")?;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_journal(tag: &str) -> Journal {
        let dir = std::env::temp_dir().join(format!("vnio-lab-unit-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Journal::at(dir.join("journal"))
    }

    #[test]
    fn record_forget_round_trip() {
        let j = temp_journal("rt");
        let a = Entry::Netns("vnio-unit-a".into());
        let b = Entry::Link("vniounitb".into());
        let p = Entry::Process {
            pid: 42,
            start_time: 7,
        };
        j.record(&a).unwrap();
        j.record(&b).unwrap();
        j.record(&p).unwrap();
        assert_eq!(j.entries().unwrap(), vec![a.clone(), b.clone(), p.clone()]);
        j.forget(&b).unwrap();
        assert_eq!(j.entries().unwrap(), vec![a.clone(), p]);
        j.forget(&b).unwrap();
        assert_eq!(j.entries().unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(j.path().parent().unwrap());
    }

    #[test]
    fn parse_rejects_garbage() {
        assert_eq!(Entry::parse(""), None);
        assert_eq!(Entry::parse("netns"), None);
        assert_eq!(Entry::parse("chair x 1"), None);
        assert_eq!(Entry::parse("process 12 1"), None);
        assert_eq!(
            Entry::parse("process 12:34 1"),
            Some(Entry::Process {
                pid: 12,
                start_time: 34
            })
        );
    }

    #[test]
    fn own_start_time_is_readable() {
        assert!(process_start_time(std::process::id() as i32).is_some());
        assert_eq!(process_start_time(-1), None);
    }

    #[test]
    fn scratch_dirs_are_removed_only_when_named_ours() {
        let j = temp_journal("dirs");
        let base = j.path().parent().unwrap().to_path_buf();
        let ours = base.join(format!("{SCRATCH_PREFIX}t"));
        let other = base.join("precious");
        std::fs::create_dir_all(ours.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        j.record(&Entry::Dir(ours.clone())).unwrap();
        j.record(&Entry::Dir(other.clone())).unwrap();
        assert_eq!(
            Entry::parse(&Entry::Dir(ours.clone()).line()),
            Some(Entry::Dir(ours.clone()))
        );
        let report = j.clean().unwrap();
        assert_eq!(report.removed, vec![Entry::Dir(ours.clone())]);
        assert_eq!(report.failed.len(), 1);
        assert!(!ours.exists() && other.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn clean_orphans_leaves_live_owners_alone() {
        let j = temp_journal("orphans");
        let base = j.path().parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&base).unwrap();
        let mine = base.join(format!("{SCRATCH_PREFIX}mine"));
        let dead = base.join(format!("{SCRATCH_PREFIX}dead"));
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::create_dir_all(&dead).unwrap();
        // pid 1 is alive; a pid above pid_max never is.
        let lines = format!(
            "dir {} 1\ndir {} 99999999\n",
            mine.display(),
            dead.display()
        );
        std::fs::write(j.path(), lines).unwrap();
        let report = j.clean_orphans().unwrap();
        assert_eq!(report.removed, vec![Entry::Dir(dead.clone())]);
        assert_eq!(report.kept.len(), 1);
        let (entry, owner) = &report.kept[0];
        assert_eq!(entry, &Entry::Dir(mine.clone()));
        assert_eq!(owner.as_ref().map(|o| o.pid), Some(1));
        assert!(mine.exists() && !dead.exists());
        assert_eq!(j.entries().unwrap(), vec![Entry::Dir(mine.clone())]);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn clean_orphans_takes_a_killed_owner_before_it_is_reaped() {
        let j = temp_journal("zombie");
        let base = j.path().parent().unwrap().to_path_buf();
        let dir = base.join(format!("{SCRATCH_PREFIX}zombie"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut owner = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::fs::write(j.path(), format!("dir {} {}\n", dir.display(), owner.id())).unwrap();
        // `spawn` returns once exec has begun, before the kernel has set the
        // new image's argument area: until then the command line reads empty.
        let pid = owner.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Owner::of(pid).command == "?" && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let report = j.clean_orphans().unwrap();
        assert!(report.removed.is_empty() && dir.exists(), "the owner runs");
        assert_eq!(report.kept[0].1.as_ref().unwrap().command, "sleep 60");
        // Killed, not reaped: a zombie (or still exiting) owns nothing.
        owner.kill().unwrap();
        let report = j.clean_orphans().unwrap();
        assert_eq!(report.removed, vec![Entry::Dir(dir.clone())]);
        assert!(report.kept.is_empty() && !dir.exists());
        owner.wait().unwrap();
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn clean_of_missing_journal_is_empty() {
        let j = temp_journal("missing");
        let report = j.clean().unwrap();
        assert!(report.removed.is_empty() && report.failed.is_empty());
    }
}
