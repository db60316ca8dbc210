//! Stopping VMs: ending QEMU and removing everything a VM's state says it
//! owns (interfaces, switch port settings, passthrough, sockets, the state
//! directory). Separate from launching because it only reads the state:
//! a failed launch, `vnio vm stop` and a later launch after a crash all
//! undo the same record the same way.

use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::error_chain;
use crate::error::{Context, Result};
use crate::hostnet;
use crate::passthrough;
use crate::qmp::Qmp;
use crate::spec::Backend;
use crate::state::{self, Owned, State, VmDir};
use crate::switchport;

/// Stops QEMU if it runs and removes everything listed in the state, then
/// the state directory. Returns what it removed. Never fails: each step is
/// attempted, and leftovers are reported.
pub fn teardown(dir: &VmDir, st: &State, child: Option<&mut Child>) -> Vec<String> {
    let mut done = Vec::new();
    if let Some(pid) = st.pid {
        if let Some(what) = stop_qemu(dir, pid, child) {
            done.push(what);
        }
    }
    let mut net = None;
    for o in st.owned.iter().rev() {
        match o {
            Owned::Link { name } | Owned::Bridge { name } => {
                if net.is_none() {
                    net = hostnet::handle(dir.path()).ok();
                }
                if let Some(h) = net.as_mut() {
                    match hostnet::delete(h, name) {
                        Ok(true) => done.push(format!("interface {name}")),
                        Ok(false) => {}
                        Err(e) => done.push(format!("interface {name} NOT removed: {e}")),
                    }
                }
            }
            Owned::SwitchPort {
                control,
                port,
                latency,
            } => match switchport::set_latency(control, port, *latency) {
                Ok(()) => done.push(format!("switch port {port} back to latency {latency}")),
                // The switch (or the port) is gone: nothing to put back.
                Err(_) if !control.exists() => {}
                Err(e) => done.push(format!(
                    "switch port {port} NOT back to latency {latency}: {}",
                    error_chain(&e)
                )),
            },
            Owned::MadePort { control, port } => match crate::migrate::del_port(control, port) {
                Ok(()) => done.push(format!("switch port {port}")),
                // The switch is gone, and its ports with it.
                Err(_) if !control.exists() => {}
                Err(e) => done.push(format!(
                    "switch port {port} NOT removed: {}",
                    error_chain(&e)
                )),
            },
            Owned::Passthrough { undo } => {
                done.push(passthrough::undo(&passthrough::Sysfs::host(), undo));
            }
            Owned::Socket { path: p } => {
                if std::fs::remove_file(p).is_ok() {
                    done.push(format!("socket {}", p.display()));
                }
            }
        }
    }
    // QEMU's taps vanish with its last fd; wait for the kernel to finish.
    let taps: Vec<&String> = st
        .spec
        .nics
        .iter()
        .zip(&st.host_ifnames)
        .filter(|(n, _)| matches!(n.backend, Backend::Tap { .. }))
        .filter_map(|(_, i)| i.as_ref())
        .collect();
    if !taps.is_empty() && nix::unistd::geteuid().is_root() {
        if let Ok(mut h) = hostnet::handle(dir.path()) {
            let deadline = Instant::now() + Duration::from_secs(5);
            for t in taps {
                while hostnet::exists(&mut h, t).unwrap_or(false) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if hostnet::exists(&mut h, t).unwrap_or(false) {
                    done.push(format!("tap {t} NOT gone"));
                }
            }
        }
    }
    if std::fs::remove_dir_all(dir.path()).is_ok() {
        done.push(format!("state {}", dir.path().display()));
    }
    done
}

/// Ends QEMU: `quit` over QMP, then SIGTERM, then SIGKILL, each time
/// waiting until the process has really exited ([`state::Tracked`]).
/// Returns what was done (None: it was not running).
fn stop_qemu(dir: &VmDir, pid: u32, child: Option<&mut Child>) -> Option<String> {
    let qemu = match child {
        Some(_) => state::Tracked::of(pid),
        None => state::Tracked::ours(pid, dir),
    };
    let gone = qemu.map(|qemu| {
        if let Ok(mut q) = Qmp::connect(&dir.qmp()) {
            let _ = q.quit();
        }
        qemu.exited_within(Duration::from_secs(5))
            || {
                qemu.signal(Signal::SIGTERM);
                qemu.exited_within(Duration::from_secs(5))
            }
            || {
                qemu.signal(Signal::SIGKILL);
                qemu.exited_within(Duration::from_secs(10))
            }
    });
    if let Some(c) = child {
        // Reaped, so it leaves no zombie behind.
        let _ = c.try_wait();
    }
    match gone? {
        true => Some(format!("QEMU {pid}")),
        false => Some(format!(
            "QEMU {pid} NOT gone 20 s after quit, SIGTERM and SIGKILL"
        )),
    }
}

/// What `stop` did.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// QEMU was running.
    pub was_running: bool,
    /// What was removed (and anything that could not be).
    pub removed: Vec<String>,
}

/// Stops VM `name` under `root` and removes all it owned.
pub fn stop(root: &Path, name: &str) -> Result<Stopped> {
    crate::spec::check_name(name)?;
    let dir = VmDir::new(root, name);
    let st = State::load(&dir)?;
    let was_running = st.pid.is_some_and(|p| state::is_ours(p, &dir));
    let removed = teardown(&dir, &st, None);
    Ok(Stopped {
        was_running,
        removed,
    })
}

/// Waits until QEMU of `dir` exits or `interrupt` is set; on interrupt
/// stops the VM. For a launcher that stays in the foreground.
pub fn supervise(dir: &VmDir, mut child: Child, interrupt: &AtomicBool) -> Result<String> {
    loop {
        if let Some(status) = child.try_wait().ctx(|| "waiting for QEMU".into())? {
            let st = match State::load(dir) {
                Ok(st) => st,
                // Migrated to another machine (`--to HOST`), or stopped.
                Err(crate::Error::Missing(_)) => {
                    return Ok(format!(
                        "QEMU exited ({status}); the VM's state here is gone (migrated to another machine, or stopped)"
                    ))
                }
                Err(e) => return Err(e),
            };
            // Live-migrated: the guest runs on in another QEMU.
            if let Some(p) = st
                .pid
                .filter(|&p| p != child.id() && state::is_ours(p, dir))
            {
                return Ok(format!("migrated to QEMU {p}; it runs on detached"));
            }
            teardown(dir, &st, None);
            return Ok(format!("QEMU exited ({status})"));
        }
        if interrupt.load(Ordering::SeqCst) {
            let st = State::load(dir)?;
            teardown(dir, &st, Some(&mut child));
            return Ok("stopped on signal".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
