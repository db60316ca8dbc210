//! Starting a planned VM once its state directory exists: host interfaces
//! first (each recorded in the state before it is made), QEMU paused, its
//! monitor, vCPU pinning, taps up, then `cont`. Separate from the launch module,
//! which decides what to launch and undoes a failed start, because these
//! are the host-side steps, each of which can fail and must be undone.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sched::CpuSet;
use nix::unistd::Pid;

use super::{check_interrupt, LaunchOptions, RootLock};
use crate::error::{Context, Error, Result};
use crate::hostnet;
use crate::passthrough::{self, Passthrough};
use crate::plan::{self, Pinning, Plan};
use crate::qmp::Qmp;
use crate::spec::Backend;
use crate::state::{self, Owned, Phase, State, VmDir};
use vnio_topo::Entry;

/// The steps after the state directory exists; errors are undone by the
/// caller, which gets QEMU and its journal entry through `slots`.
pub(super) fn start(
    dir: &VmDir,
    st: &mut State,
    plan: &Plan,
    pt: &[(usize, Passthrough)],
    opts: &LaunchOptions,
    slots: (&mut Option<Child>, &mut Option<Entry>),
    lock: RootLock,
) -> Result<()> {
    let (child_slot, journal_slot) = slots;
    let mut net: Option<vnio_topo::Handle> = None;
    let HostInterfaces { pass, keep_open } = host_interfaces(dir, st, plan, opts, &mut net)?;
    let argv = passthrough::hand_over(dir, st, plan, pt)?;
    std::fs::write(dir.cmdline(), plan::shell_line(&argv) + "\n")
        .ctx(|| format!("writing {}", dir.cmdline().display()))?;
    let child = spawn_paused(dir, st, &argv, pass, opts, child_slot, journal_slot)?;
    // QEMU holds the macvtap devices now.
    drop(keep_open);

    let mut qmp = wait_for_qmp(dir, child, opts)?;
    // Cores are claimed once QEMU runs and its pinning is in the state.
    drop(lock);
    if let Some(p) = &plan.pinning {
        pin(&mut qmp, child.id(), p)?;
    }
    for n in &plan.nics {
        if let (
            Backend::Tap {
                bridge, host_ip, ..
            },
            Some(tap),
        ) = (&n.backend, &n.host_ifname)
        {
            let h = netlink(&mut net, dir)?;
            hostnet::attach_tap(h, tap, bridge.as_deref(), *host_ip)?;
        }
    }
    check_interrupt(opts)?;
    qmp.cont()?;
    st.phase = Phase::Running;
    st.save(dir)
}

/// What the host interfaces give QEMU.
struct HostInterfaces {
    /// The fds to hand QEMU, with their numbers there.
    pass: Vec<(RawFd, RawFd)>,
    /// Their files, open until QEMU holds them.
    keep_open: Vec<File>,
}

/// Host interfaces before QEMU: macvtaps (QEMU gets their fds) and
/// bridges, each recorded in the state before it is made; a vhost-user
/// server socket is recorded, a client's must be there.
fn host_interfaces(
    dir: &VmDir,
    st: &mut State,
    plan: &Plan,
    opts: &LaunchOptions,
    net: &mut Option<vnio_topo::Handle>,
) -> Result<HostInterfaces> {
    let mut pass = Vec::new();
    let mut keep_open: Vec<File> = Vec::new();
    for n in &plan.nics {
        check_interrupt(opts)?;
        match &n.backend {
            Backend::Macvtap { parent, mode } => {
                let name = n.host_ifname.clone().expect("macvtaps are named");
                st.owned.push(Owned::Link { name: name.clone() });
                st.save(dir)?;
                let h = netlink(net, dir)?;
                let f = hostnet::create_macvtap(h, &name, parent, *mode, n.mac)?;
                pass.push((f.as_raw_fd(), n.fd.expect("macvtaps have an fd number")));
                keep_open.push(f);
            }
            Backend::Tap {
                bridge: Some(b), ..
            } => {
                let h = netlink(net, dir)?;
                if !hostnet::exists(h, b)? {
                    st.owned.push(Owned::Bridge { name: b.clone() });
                    st.save(dir)?;
                    hostnet::create_bridge(h, b)?;
                }
            }
            Backend::VhostUser {
                socket,
                server: true,
                ..
            } => {
                st.owned.push(Owned::Socket {
                    path: socket.clone(),
                });
                st.save(dir)?;
            }
            Backend::VhostUser {
                socket,
                server: false,
                ..
            } => switch_socket_there(socket)?,
            _ => {}
        }
    }
    Ok(HostInterfaces { pass, keep_open })
}

/// QEMU redials a restarted switch (`reconnect=1`), so it would also wait
/// forever for a socket that is not there at all: refuses one that is not.
fn switch_socket_there(socket: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::metadata(socket).map(|m| m.file_type().is_socket());
    if !matches!(is_socket, Ok(true)) {
        return Err(Error::Invalid(format!(
            "vhost-user NIC: nothing for QEMU to connect to at {} ({}): start the switch and its port first",
            socket.display(),
            match is_socket {
                Ok(_) => "not a socket".to_string(),
                Err(e) => e.to_string(),
            }
        )));
    }
    Ok(())
}

/// QEMU, paused (-S) until pinning and interfaces are in place, its output
/// in its log, `pass` handed over; its pid in the state and the journal.
fn spawn_paused<'a>(
    dir: &VmDir,
    st: &mut State,
    argv: &[String],
    pass: Vec<(RawFd, RawFd)>,
    opts: &LaunchOptions,
    child_slot: &'a mut Option<Child>,
    journal_slot: &mut Option<Entry>,
) -> Result<&'a mut Child> {
    let log =
        File::create(dir.qemu_log()).ctx(|| format!("creating {}", dir.qemu_log().display()))?;
    let log2 = log.try_clone().ctx(|| "duplicating the log file".into())?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .arg("-S")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    crate::sys::detach_and_pass_fds(&mut cmd, pass);
    check_interrupt(opts)?;
    let child = cmd.spawn().ctx(|| format!("starting {}", argv[0]))?;
    st.pid = Some(child.id());
    st.launched_ns = state::monotonic_ns();
    let child = child_slot.insert(child);
    if let Some(j) = &opts.journal {
        if let Some(entry) = Entry::process(child.id() as i32) {
            j.record(&entry)
                .ctx(|| "recording QEMU in the journal".into())?;
            *journal_slot = Some(entry);
        }
    }
    st.save(dir)?;
    Ok(child)
}

/// One netlink handle per launch, opened on first use.
fn netlink<'a>(
    slot: &'a mut Option<vnio_topo::Handle>,
    dir: &VmDir,
) -> Result<&'a mut vnio_topo::Handle> {
    if slot.is_none() {
        *slot = Some(hostnet::handle(dir.path())?);
    }
    Ok(slot.as_mut().expect("just set"))
}

fn wait_for_qmp(dir: &VmDir, child: &mut Child, opts: &LaunchOptions) -> Result<Qmp> {
    let started = Instant::now();
    loop {
        check_interrupt(opts)?;
        if let Some(status) = child.try_wait().ctx(|| "waiting for QEMU".into())? {
            return Err(Error::Guest(format!("QEMU exited at start ({status})")));
        }
        if dir.qmp().exists() {
            if let Ok(q) = Qmp::connect(&dir.qmp()) {
                return Ok(q);
            }
        }
        if started.elapsed() > opts.start_timeout {
            let waiting = st_waiting_hint(dir);
            return Err(Error::Guest(format!(
                "QEMU did not open its monitor within {} s{waiting}",
                opts.start_timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// QEMU's own account of what it waits for (e.g. a vhost-user backend).
fn st_waiting_hint(dir: &VmDir) -> String {
    let log = std::fs::read_to_string(dir.qemu_log()).unwrap_or_default();
    match log.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => format!(" (QEMU: {l})"),
        None => String::new(),
    }
}

fn cpuset(cpus: &[usize]) -> Result<CpuSet> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).ctx(|| format!("CPU {c} in a CPU set"))?;
    }
    Ok(set)
}

/// Pins each vCPU thread to its core and every other QEMU thread to the
/// housekeeping cores (threads QEMU starts later inherit the main
/// thread's mask).
fn pin(qmp: &mut Qmp, pid: u32, p: &Pinning) -> Result<()> {
    let vcpus = qmp.vcpus()?;
    let mut vcpu_tids = Vec::new();
    for v in &vcpus {
        let Some(&core) = p.vcpus.get(v.index) else {
            continue;
        };
        nix::sched::sched_setaffinity(Pid::from_raw(v.thread_id), &cpuset(&[core])?).ctx(|| {
            format!(
                "pinning vCPU {} (thread {}) to CPU {core}",
                v.index, v.thread_id
            )
        })?;
        vcpu_tids.push(v.thread_id);
    }
    let housekeeping = cpuset(&p.housekeeping)?;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ctx(|| format!("listing QEMU {pid}'s threads"))?;
    for t in tasks.filter_map(|e| e.ok()) {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if !vcpu_tids.contains(&tid) {
            // A thread may have ended meanwhile; that is fine.
            let _ = nix::sched::sched_setaffinity(Pid::from_raw(tid), &housekeeping);
        }
    }
    Ok(())
}
