//! The controller's handle on one machine for one configuration: journal
//! it, probe it (which interface the SSH connection arrives on, which
//! architecture), copy `vnio` there, start the far side ([`super::side`])
//! over an SSH session whose pipes carry the `ready` line and the clock
//! exchanges, and remove everything at the end.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use super::clock::{now_ns, ClockOffset, ClockSample};
use super::journal::{clean_one, MachineEntry, MachineJournal, REMOTE_ROOT};
use super::side::{SideReady, SideSpec};
use super::MachineSpec;
use crate::host::Scratch;
use vnio_topo::ssh::quote;
use vnio_topo::{Journal, Process, SCRATCH_PREFIX};

/// How long the far side may take to build.
const BUILD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one clock exchange may take.
const CLOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the probe learnt.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The controller's address on the network joining the machines.
    pub local: IpAddr,
    /// The machine's address on it.
    pub remote: IpAddr,
}

/// One machine in use.
pub struct Remote {
    /// The scenario's name for it.
    pub name: String,
    entry: MachineEntry,
    journal: MachineJournal,
    /// What the probe found.
    pub probe: Probe,
    session: Option<Session>,
    control: Scratch,
}

struct Session {
    ssh: Process,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Remote {
    /// Journal the machine, probe it and copy `binary` there.
    pub fn connect(
        spec: &MachineSpec,
        id: &str,
        binary: &Path,
        journal: &Journal,
    ) -> Result<Remote, String> {
        let control = Scratch::create(journal).map_err(|e| e.to_string())?;
        let ssh = spec.ssh(control.path());
        let entry = MachineEntry {
            machine: spec.name.clone(),
            ssh: ssh.clone(),
            dir: format!("{REMOTE_ROOT}/{SCRATCH_PREFIX}{id}-{}", spec.name),
            owner: std::process::id(),
        };
        let machines = MachineJournal::beside(journal);
        // Before anything is made there.
        machines.record(&entry)?;
        let mut remote = Remote {
            name: spec.name.clone(),
            entry,
            journal: machines,
            probe: Probe {
                local: IpAddr::from([0, 0, 0, 0]),
                remote: IpAddr::from([0, 0, 0, 0]),
            },
            session: None,
            control,
        };
        let dir = quote(&remote.entry.dir);
        let out = ssh
            .run(
                &format!("mkdir -p {dir} && echo $SSH_CONNECTION && uname -m && id -u"),
                "probing",
            )
            .map_err(|e| {
                // The master's socket appears only once authenticated: without
                // it nothing ran there, and there is nothing to clean.
                let reached = std::fs::read_dir(remote.control.path())
                    .map_or(true, |mut d| d.next().is_some());
                if !reached {
                    let _ = remote.journal.forget(&remote.entry);
                }
                format!("machine {}: {e}", spec.name)
            })?;
        let mut lines = out.lines();
        let conn: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        let arch = lines.next().unwrap_or("").trim();
        let uid = lines.next().unwrap_or("").trim();
        let bad = |why: String| format!("machine {}: {why}", spec.name);
        let (Some(local), Some(there)) = (
            conn.first().and_then(|a| a.parse::<IpAddr>().ok()),
            conn.get(2).and_then(|a| a.parse::<IpAddr>().ok()),
        ) else {
            return Err(bad(format!(
                "no $SSH_CONNECTION in the remote shell (got {conn:?})"
            )));
        };
        if arch != std::env::consts::ARCH {
            return Err(bad(format!(
                "is {arch}, this vnio is built for {} (copying it would not run)",
                std::env::consts::ARCH
            )));
        }
        if uid != "0" {
            return Err(bad(format!(
                "logs in as uid {uid}: the far side makes namespaces and needs root (ssh = \"root@...\")"
            )));
        }
        remote.probe.local = local;
        remote.probe.remote = there;
        ssh.install(
            binary,
            &format!("{}/vnio", remote.entry.dir),
            "installing vnio",
        )
        .map_err(bad)?;
        Ok(remote)
    }

    /// The SSH destination.
    pub fn ssh_dest(&self) -> &str {
        &self.entry.ssh.dest
    }

    /// Start the far side of `spec` and wait until it is built.
    pub fn start(&mut self, spec: &SideSpec, journal: &Journal) -> Result<SideReady, String> {
        let d = quote(&self.entry.dir);
        let json = serde_json::to_string(spec).map_err(|e| e.to_string())?;
        let script = format!(
            "VNIO_LAB_JOURNAL={d}/journal exec {d}/vnio lab side --dir {d} {}",
            quote(&json)
        );
        let log = self.control.path().join("side.log");
        let mut cmd = self.entry.ssh.command(&script);
        let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // Its own process group: a Ctrl-C reaches only the runner, which
        // then ends the session in order.
        cmd.process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err);
        let mut ssh = Process::spawn_with_journal(&mut cmd, journal).map_err(|e| e.to_string())?;
        let stdin = ssh.child_mut().stdin.take();
        let stdout: Option<ChildStdout> = ssh.child_mut().stdout.take();
        let (tx, rx) = channel();
        if let Some(out) = stdout {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        self.session = Some(Session {
            ssh,
            stdin,
            lines: rx,
        });
        let session = self.session.as_mut().ok_or("no session")?;
        let line = session.lines.recv_timeout(BUILD_TIMEOUT).map_err(|_| {
            format!(
                "machine {}: the far side did not come up: {}",
                self.name,
                crate::host::log_tail(&log)
            )
        })?;
        if let Some(json) = line.strip_prefix("ready ") {
            return serde_json::from_str(json).map_err(|e| format!("machine {}: {e}", self.name));
        }
        Err(format!(
            "machine {}: {}",
            self.name,
            line.strip_prefix("error ").unwrap_or(&line)
        ))
    }

    /// Measure the machine's clock against ours over the session.
    pub fn clock(&mut self, exchanges: u32) -> Result<ClockOffset, String> {
        let name = self.name.clone();
        let session = self.session.as_mut().ok_or("no session")?;
        let stdin = session.stdin.as_mut().ok_or("no session")?;
        let mut samples = Vec::new();
        for _ in 0..exchanges {
            let t0 = now_ns();
            stdin
                .write_all(b"clock\n")
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("machine {name}: clock: {e}"))?;
            let line = session
                .lines
                .recv_timeout(CLOCK_TIMEOUT)
                .map_err(|_| format!("machine {name}: clock: no answer"))?;
            let t2 = now_ns();
            let t1 = line
                .strip_prefix("clock ")
                .and_then(|t| t.trim().parse::<i128>().ok())
                .ok_or_else(|| format!("machine {name}: clock: unexpected {line:?}"))?;
            samples.push(ClockSample { t0, t1, t2 });
        }
        ClockOffset::estimate(&samples)
            .ok_or_else(|| format!("machine {name}: clock ran backwards"))
    }

    /// Stop the far side (end of its input), wait for it, then clean the
    /// machine as `vnio lab clean` would and forget it.
    pub fn finish(mut self) -> Result<(), String> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), String> {
        if let Some(mut s) = self.session.take() {
            drop(s.stdin.take());
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while s.ssh.child_mut().try_wait().ok().flatten().is_none()
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = s.ssh.kill();
        }
        clean_one(&self.entry).map_err(|e| format!("machine {}: {e}", self.name))?;
        self.journal.forget(&self.entry)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.session.is_some()
            || self
                .journal
                .entries()
                .is_ok_and(|e| e.contains(&self.entry))
        {
            let _ = self.stop();
        }
    }
}
