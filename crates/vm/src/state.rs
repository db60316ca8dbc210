//! Each VM's state directory (`/run/vnio/vm/NAME`): QEMU's pid file, QMP,
//! console and command-channel sockets, the serial log, QEMU's own log,
//! the command line used, and `state.json` (what was asked, what was
//! planned, what the launcher created and must remove).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::accel::AccelDecision;
use crate::error::{Context, Error, Result};
use crate::plan::{Pinning, Setting};
use crate::spec::VmSpec;

/// Where state directories live: `$VNIO_VM_DIR`, else `/run/vnio/vm` as
/// root, else `$XDG_RUNTIME_DIR/vnio/vm` (or a per-user directory in /tmp).
pub fn runtime_root() -> PathBuf {
    if let Some(d) = std::env::var_os("VNIO_VM_DIR") {
        return PathBuf::from(d);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/run/vnio/vm");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("vnio/vm"),
        None => std::env::temp_dir().join(format!("vnio-{}/vm", nix::unistd::geteuid())),
    }
}

/// The paths of one VM's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmDir {
    path: PathBuf,
}

impl VmDir {
    /// The directory of VM `name` under `root`.
    pub fn new(root: &Path, name: &str) -> Self {
        Self::at(root.join(name))
    }

    /// A directory at `path`.
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The VM's name (the directory's).
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// QEMU's monitor (QMP) socket.
    pub fn qmp(&self) -> PathBuf {
        self.path.join("qmp.sock")
    }
    /// The serial console socket (`vnio vm console`).
    pub fn console(&self) -> PathBuf {
        self.path.join("console.sock")
    }
    /// Everything the guest wrote on its serial console.
    pub fn serial_log(&self) -> PathBuf {
        self.path.join("serial.log")
    }
    /// The command channel's socket (`vnio vm exec`).
    pub fn exec(&self) -> PathBuf {
        self.path.join("exec.sock")
    }
    /// Serialises users of the command channel.
    pub fn exec_lock(&self) -> PathBuf {
        self.path.join("exec.lock")
    }
    /// QEMU's pid file.
    pub fn pidfile(&self) -> PathBuf {
        self.path.join("qemu.pid")
    }
    /// QEMU's stdout and stderr.
    pub fn qemu_log(&self) -> PathBuf {
        self.path.join("qemu.log")
    }
    /// The command line used, one shell line.
    pub fn cmdline(&self) -> PathBuf {
        self.path.join("cmdline")
    }
    /// [`State`] as JSON.
    pub fn state_file(&self) -> PathBuf {
        self.path.join("state.json")
    }
}

/// Something the launcher created on the host and must remove.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Owned {
    /// A link (macvtap) to delete.
    Link {
        /// Its name.
        name: String,
    },
    /// A bridge the launcher created to delete.
    Bridge {
        /// Its name.
        name: String,
    },
    /// A socket file QEMU listens on outside the state directory.
    Socket {
        /// Its path.
        path: PathBuf,
    },
    /// A host change for a passthrough NIC (a device on vfio-pci, VFs created).
    Passthrough {
        /// What to undo.
        undo: crate::passthrough::Undo,
    },
    /// A switch port made for the VM (by a migration): removed on stop.
    MadePort {
        /// The switch's control socket.
        control: PathBuf,
        /// The port.
        port: String,
    },
    /// A switch port whose latency policy was raised: put back `latency`.
    SwitchPort {
        /// The switch's control socket.
        control: PathBuf,
        /// The port.
        port: String,
        /// Its policy before.
        latency: vnio_switch::config::Latency,
    },
}

/// Where a VM is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Being launched (QEMU may not run yet).
    Starting,
    /// Launched: QEMU runs the guest.
    Running,
}

/// A VM's state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// What was asked.
    pub spec: VmSpec,
    /// Phase.
    pub phase: Phase,
    /// QEMU's pid once spawned.
    pub pid: Option<u32>,
    /// KVM or TCG, and why.
    pub accel: AccelDecision,
    /// The latency settings and whether each is honoured.
    pub settings: Vec<Setting>,
    /// vCPU pinning in effect.
    pub pinning: Option<Pinning>,
    /// Host interfaces per NIC (taps, macvtaps).
    pub host_ifnames: Vec<Option<String>>,
    /// The guest's addresses (first is where the agent is reached).
    pub addrs: Vec<String>,
    /// The agent's port (0: none) and token.
    pub agent_port: u16,
    /// The agent's token.
    pub agent_token: Option<String>,
    /// The image used (cache key).
    pub image: String,
    /// What the launcher created and stop removes.
    pub owned: Vec<Owned>,
    /// CLOCK_MONOTONIC at launch (ns), for launch-to-ready times across processes.
    pub launched_ns: u64,
    /// Notes from the plan.
    pub notes: Vec<String>,
}

/// Now on CLOCK_MONOTONIC in ns (system-wide, so comparable between the
/// launcher and a later `vnio vm wait-agent`).
pub fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

impl State {
    /// Writes `state.json` atomically.
    pub fn save(&self, dir: &VmDir) -> Result<()> {
        let tmp = dir.path().join(".state.json.tmp");
        let json = serde_json::to_string_pretty(self).expect("state serialises");
        std::fs::write(&tmp, json).ctx(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, dir.state_file())
            .ctx(|| format!("writing {}", dir.state_file().display()))
    }

    /// Reads `state.json`.
    pub fn load(dir: &VmDir) -> Result<State> {
        let text = std::fs::read_to_string(dir.state_file()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Missing(format!("no VM named {}", dir.name()))
            } else {
                Error::Io {
                    what: format!("reading {}", dir.state_file().display()),
                    source: e,
                }
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::Invalid(format!("{}: {e}", dir.state_file().display())))
    }
}

/// The start time of process `pid` (clock ticks after boot) while it has
/// not exited: None once it is gone or a zombie. A pid and its start time
/// name one process, even when the pid is reused later.
pub fn started_at(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name: state is the first,
    // the start time the twentieth (field 22 of proc(5)).
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    if matches!(rest.next(), Some("Z" | "X")) {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// True if `pid` is a live (not zombie) QEMU of this state directory: the
/// pid alone could have been reused by another process.
pub fn is_ours(pid: u32, dir: &VmDir) -> bool {
    if started_at(pid).is_none() {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    // Its files are in the directory (a migrated QEMU's in `incoming/`).
    let needle = format!("{}/", dir.path().display());
    String::from_utf8_lossy(&cmdline).contains(&needle)
}

/// One process, followed by its pid and start time until it has exited.
/// Whether it is ours is checked once, when it is found: a QEMU unmapping
/// its memory has lost its command line (so `is_ours` no longer knows it)
/// long before it is gone, and still holds its sockets, taps and hugepages.
#[derive(Debug, Clone, Copy)]
pub struct Tracked {
    pid: u32,
    started: u64,
}

impl Tracked {
    /// Process `pid`, if it is running.
    pub fn of(pid: u32) -> Option<Self> {
        started_at(pid).map(|started| Self { pid, started })
    }

    /// Process `pid`, if it is a running QEMU of `dir`.
    pub fn ours(pid: u32, dir: &VmDir) -> Option<Self> {
        Self::of(pid).filter(|_| is_ours(pid, dir))
    }

    /// True until the process is a zombie or gone.
    pub fn running(&self) -> bool {
        started_at(self.pid) == Some(self.started)
    }

    /// Waits up to `limit` for the process to exit; true when it has.
    pub fn exited_within(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while self.running() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// Sends `sig` (the process may have exited meanwhile: then nothing).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if self.running() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid as i32), sig);
        }
    }
}

/// Every VM under `root`: (directory, state or why it cannot be read).
pub fn list(root: &Path) -> Vec<(VmDir, Result<State>)> {
    let mut out: Vec<(VmDir, Result<State>)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| {
            let dir = VmDir::at(e.path());
            let state = State::load(&dir);
            (dir, state)
        })
        .collect();
    out.sort_by_key(|(d, _)| d.name());
    out
}

/// CPUs dedicated to running VMs under `root`, except `except`: ("VM
/// NAME", CPUs).
pub fn held_cpus(root: &Path, except: &str) -> Vec<(String, Vec<usize>)> {
    list(root)
        .into_iter()
        .filter(|(d, _)| d.name() != except)
        .filter_map(|(d, s)| {
            let s = s.ok()?;
            let pin = s.pinning?;
            s.pid
                .is_some_and(|p| is_ours(p, &d))
                .then(|| (format!("VM {}", d.name()), pin.vcpus))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::started_at;
    use std::process::Command;

    #[test]
    fn a_process_has_a_start_time_until_it_exits_even_as_a_zombie() {
        let me = started_at(std::process::id()).expect("this test is running");
        assert_eq!(started_at(std::process::id()), Some(me), "stable");
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(started_at(pid).is_some(), "a running child");
        child.kill().unwrap();
        // Killed but not reaped: a zombie, which has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while started_at(pid).is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(started_at(pid), None, "a zombie has exited");
        child.wait().unwrap();
        assert_eq!(started_at(pid), None, "a reaped process is gone");
    }
}
