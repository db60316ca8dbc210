//! The processes and files the lab starts and watches on this machine:
//! scratch directories, journaled children in their own process group,
//! waiting for them to be ready or to end, their logs, CPU pinning, and
//! the settings they run with ([`RunnerOptions`]). Below the testbed:
//! the testbed, the anchor switches, the far sides of machines, the
//! generators and the workload drivers all start processes the same way.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use vnio_topo::{unique_id, Entry, Journal, Process, SCRATCH_PREFIX};

use crate::guest::GuestKit;

/// Port every agent listens on.
pub const AGENT_PORT: u16 = 7700;
/// How long a part may take to come up.
pub(crate) const READY: Duration = Duration::from_secs(10);
/// Where scratch directories go (sockets, the switch's configuration, logs).
pub const SCRATCH_ROOT: &str = "/run/vnio/lab";

/// Why a testbed could not be built. One line.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// A netlink, namespace or journal operation failed.
    #[error(transparent)]
    Topology(#[from] crate::Error),
    /// A process or part did not come up.
    #[error("{what}: {detail}")]
    Setup {
        /// What was being done.
        what: String,
        /// What went wrong.
        detail: String,
    },
}

pub(crate) fn setup(what: impl Into<String>, detail: impl std::fmt::Display) -> BedError {
    BedError::Setup {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// Runner settings.
#[derive(Debug, Clone)]
pub struct RunnerOptions {
    /// The `vnio` binary run in the hosts (agents, switch, generators).
    pub vnio: PathBuf,
    /// Journal for everything created.
    pub journal: Journal,
    /// Image and accelerator for VM hosts ([`GuestKit::prepare`]); `None`
    /// when the run has no VM host.
    pub guests: Option<GuestKit>,
}

/// A scratch directory under [`SCRATCH_ROOT`], journaled, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    journal: Journal,
}

impl Scratch {
    /// Create `SCRATCH_ROOT/vnio-lab-ID`.
    pub fn create(journal: &Journal) -> Result<Scratch, BedError> {
        let (id, _) = unique_id();
        let path = Path::new(SCRATCH_ROOT).join(format!("{SCRATCH_PREFIX}{id}"));
        journal.record(&Entry::Dir(path.clone()))?;
        std::fs::create_dir_all(&path)
            .map_err(|e| setup(format!("creating {}", path.display()), e))?;
        Ok(Scratch {
            path,
            journal: journal.clone(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The journal it is recorded in (the run's).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = self.journal.forget(&Entry::Dir(self.path.clone()));
    }
}

/// Start `cmd` as a journaled child in its own process group (so a Ctrl-C
/// at the terminal reaches only the runner, which then stops it in order),
/// stdin closed, stderr appended to `log`.
pub fn spawn(cmd: &mut Command, journal: &Journal, log: &Path) -> Result<Process, BedError> {
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| setup(format!("opening {}", log.display()), e))?;
    cmd.process_group(0).stdin(Stdio::null()).stderr(log_file);
    Ok(Process::spawn_with_journal(cmd, journal)?)
}

/// Waits for `child` to exit; once `stop` is raised, interrupts it (SIGINT,
/// once: a measuring tool still writes its result). `what` names it in
/// the error.
pub fn wait_or_interrupt(mut child: Process, stop: &AtomicBool, what: &str) -> Result<(), String> {
    let mut signalled = false;
    loop {
        match child.child_mut().try_wait() {
            Ok(Some(_)) => break,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) && !signalled {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            signalled = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.wait();
    Ok(())
}

/// The last lines of a log, for error messages.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(2)..].join(" | ");
    if tail.is_empty() {
        "(no output)".into()
    } else {
        tail
    }
}

/// Wait for a child to print its first line ("ready"): it has bound its
/// sockets or connected its port. Its stdout must be piped.
pub fn wait_ready(p: &mut Process, what: &str, log: &Path) -> Result<(), BedError> {
    use std::io::BufRead;
    let Some(stdout) = p.child_mut().stdout.take() else {
        return Err(setup(what, "stdout is not piped"));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        let got = reader.read_line(&mut line).map(|_| line);
        let _ = tx.send((got, reader));
    });
    match rx.recv_timeout(READY) {
        Ok((Ok(line), reader)) if line.trim() == "ready" => {
            // Hand the rest of the output back to the child's owner.
            p.child_mut().stdout = Some(reader.into_inner());
            Ok(())
        }
        Ok((Ok(line), _)) if line.is_empty() => {
            Err(setup(what, format!("it exited: {}", log_tail(log))))
        }
        Ok((Ok(line), _)) => Err(setup(what, format!("unexpected output {:?}", line.trim()))),
        Ok((Err(e), _)) => Err(setup(what, e)),
        Err(_) => Err(setup(
            what,
            format!("not ready after {READY:?}: {}", log_tail(log)),
        )),
    }
}

/// Wait until a child's log (its stderr) contains `needle`.
pub fn wait_log(p: &mut Process, what: &str, log: &Path, needle: &str) -> Result<(), BedError> {
    let deadline = Instant::now() + READY;
    loop {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(needle)) {
            return Ok(());
        }
        if let Ok(Some(status)) = p.child_mut().try_wait() {
            return Err(setup(
                what,
                format!("it exited ({status}): {}", log_tail(log)),
            ));
        }
        if Instant::now() > deadline {
            return Err(setup(
                what,
                format!("not ready after {READY:?}: {}", log_tail(log)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pin every thread of process `pid` to `cpus`.
pub fn pin_process(pid: i32, cpus: &[usize]) -> Result<(), String> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| format!("CPU {c}: {e}"))?;
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
    for task in tasks.flatten() {
        if let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        {
            sched_setaffinity(Pid::from_raw(tid), &set)
                .map_err(|e| format!("thread {tid}: {e}"))?;
        }
    }
    Ok(())
}

/// Pin the calling thread (and the threads it starts afterwards) to `cpus`.
pub fn pin_self(cpus: &[usize]) -> Result<(), String> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| format!("CPU {c}: {e}"))?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("pinning to CPUs {cpus:?}: {e}"))
}
