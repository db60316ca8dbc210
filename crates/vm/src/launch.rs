//! Launching and stopping VMs. A launch either ends with QEMU running the
//! guest and `state.json` saying so, or with nothing left: no QEMU, no
//! interface, no socket, no state directory. Everything the launcher
//! creates is recorded in the state before it is created, so `stop` (or a
//! later launch of the same name after a crash) removes exactly that.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sched::CpuSet;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::accel::{self, AccelDecision, QEMU};
use crate::error::{Context, Error, Result};
use crate::host::HostFacts;
use crate::hostnet;
use crate::image::{self, Image};
use crate::passthrough::{self, Passthrough};
use crate::plan::{self, Pinning, Plan, PlanInput, SwitchAnswer};
use crate::qmp::Qmp;
use crate::spec::{Backend, VmSpec};
use crate::state::{self, Owned, Phase, State, VmDir};
use crate::switchport;
use vnio_switch::config::Latency as SwitchLatency;
use vnio_topo::{Entry, Journal};

/// How to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Where state directories live ([`state::runtime_root`]).
    pub root: PathBuf,
    /// The cache (images, probe verdicts).
    pub cache: PathBuf,
    /// An image directory instead of the current image.
    pub image: Option<PathBuf>,
    /// Probe KVM again instead of trusting the cached verdict.
    pub reprobe: bool,
    /// Set by the caller's SIGINT/SIGTERM handler: launching stops and
    /// undoes what it did.
    pub interrupt: Arc<AtomicBool>,
    /// How long QEMU may take to open its monitor (a vhost-user NIC in
    /// server mode waits there for the switch to connect).
    pub start_timeout: Duration,
    /// A crash journal (the lab's) to record QEMU in right after it is
    /// spawned, so `vnio lab clean` kills it if the launching process dies;
    /// a failed launch forgets it, a successful one hands the entry back in
    /// [`Launched::journaled`].
    pub journal: Option<Journal>,
}

impl LaunchOptions {
    /// Defaults: the runtime root, the default cache, the current image.
    pub fn new(interrupt: Arc<AtomicBool>) -> Self {
        Self {
            root: state::runtime_root(),
            cache: image::cache_root(),
            image: None,
            reprobe: false,
            interrupt,
            start_timeout: Duration::from_secs(60),
            journal: None,
        }
    }
}

/// A launched VM.
#[derive(Debug)]
pub struct Launched {
    /// Its state directory.
    pub dir: VmDir,
    /// Its state.
    pub state: State,
    /// The plan it was launched with.
    pub plan: Plan,
    /// QEMU (the caller may wait for it, or drop it: QEMU keeps running).
    pub child: Child,
    /// QEMU's entry in [`LaunchOptions::journal`], for the caller to forget
    /// once it has stopped the VM.
    pub journaled: Option<Entry>,
}

/// What a launch would do: image, accelerator, host facts and the plan.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The image.
    pub image: Image,
    /// KVM or TCG and why.
    pub accel: AccelDecision,
    /// The host.
    pub host: HostFacts,
    /// The plan.
    pub plan: Plan,
}

fn load_image(opts: &LaunchOptions) -> Result<Image> {
    match &opts.image {
        Some(d) => image::load(d),
        None => image::current(&opts.cache),
    }
}

/// Plans `spec` for this host without launching (`--print-qemu`,
/// `--print-libvirt`); `auto` may run the short KVM probe. Switch ports
/// are not asked: their latency-high requests show as "requested at launch".
pub fn prepare(spec: &VmSpec, opts: &LaunchOptions) -> Result<Prepared> {
    spec.validate()?;
    let image = load_image(opts)?;
    let accel = accel::decide(spec.accel, &image, &opts.cache, opts.reprobe)?;
    let (host, plan) = plan_for(spec, opts, &image, &accel, &[], Vec::new());
    Ok(Prepared {
        image,
        accel,
        host,
        plan,
    })
}

/// The host's facts and the plan, given the switch's answers and the cores
/// its latency-high workers took.
fn plan_for(
    spec: &VmSpec,
    opts: &LaunchOptions,
    image: &Image,
    accel: &AccelDecision,
    answers: &[Option<SwitchAnswer>],
    switch_cores: Vec<(String, Vec<usize>)>,
) -> (HostFacts, Plan) {
    let mut held = state::held_cpus(&opts.root, &spec.name);
    held.extend(switch_cores);
    let host = HostFacts::read(held);
    let dir = VmDir::new(&opts.root, &spec.name);
    let plan = plan::plan(&PlanInput {
        spec,
        kernel: &image.kernel,
        initrd: &image.initrd,
        accel,
        host: &host,
        dir: &dir,
        qemu: QEMU,
        switch_answers: answers,
    });
    (host, plan)
}

/// Holds the runtime root's lock: launches plan cores and claim names one
/// at a time.
struct RootLock(#[allow(dead_code)] nix::fcntl::Flock<File>);

fn lock_root(root: &Path) -> Result<RootLock> {
    std::fs::create_dir_all(root).ctx(|| format!("creating {}", root.display()))?;
    let f =
        File::create(root.join(".lock")).ctx(|| format!("creating {}/.lock", root.display()))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map(RootLock)
        .map_err(|(_, e)| Error::Io {
            what: format!("locking {}", root.display()),
            source: e.into(),
        })
}

fn needs_root(spec: &VmSpec) -> bool {
    spec.nics.iter().any(|n| {
        matches!(
            n.backend,
            Backend::Tap { .. }
                | Backend::Macvtap { .. }
                | Backend::Vfio { .. }
                | Backend::Sriov { .. }
        )
    })
}

/// Launches `spec`. On any failure, or on interrupt, everything created
/// so far is removed before returning the error.
pub fn launch(spec: &VmSpec, opts: &LaunchOptions) -> Result<Launched> {
    spec.validate()?;
    let pt = passthrough::plans(spec, &passthrough::Sysfs::host())?;
    if needs_root(spec) && !nix::unistd::geteuid().is_root() {
        return Err(Error::Missing(
            "tap, macvtap and passthrough NICs need root (CAP_NET_ADMIN, sysfs): run as root"
                .into(),
        ));
    }
    accel::qemu_version()?;
    let lock = lock_root(&opts.root)?;
    let dir = VmDir::new(&opts.root, &spec.name);
    if dir.path().exists() {
        match State::load(&dir) {
            Ok(s) if s.pid.is_some_and(|p| state::is_ours(p, &dir)) => {
                return Err(Error::Invalid(format!(
                    "VM {} is already running (pid {}): `vnio vm stop {}` first",
                    spec.name,
                    s.pid.unwrap_or_default(),
                    spec.name
                )));
            }
            // Left over from a crash: clean it up first.
            Ok(s) => {
                teardown(&dir, &s, None);
            }
            Err(_) => {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }
    let mut prepared = prepare(spec, opts)?;
    if spec.strict {
        if let Some(why) = prepared.plan.strict_refusal() {
            return Err(Error::Invalid(why));
        }
    }
    std::fs::create_dir_all(dir.path()).ctx(|| format!("creating {}", dir.path().display()))?;
    // Private: whoever reaches exec.sock runs commands as root in the guest.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .ctx(|| format!("restricting {}", dir.path().display()))?;
    }
    let mut st = State {
        spec: spec.clone(),
        phase: Phase::Starting,
        pid: None,
        accel: prepared.accel.clone(),
        settings: prepared.plan.settings.clone(),
        pinning: prepared.plan.pinning.clone(),
        host_ifnames: prepared
            .plan
            .nics
            .iter()
            .map(|n| n.host_ifname.clone())
            .collect(),
        addrs: spec
            .nics
            .iter()
            .filter_map(|n| n.ip.map(|c| c.addr.to_string()))
            .collect(),
        agent_port: spec.agent_port,
        agent_token: spec.agent_token.clone(),
        image: prepared.image.manifest.key.clone(),
        owned: Vec::new(),
        launched_ns: state::monotonic_ns(),
        notes: prepared.plan.notes.clone(),
    };
    st.save(&dir)?;
    // Switch ports first: a latency-high port's worker takes a core, which
    // the vCPUs must then leave alone.
    match ask_switch(&dir, &mut st, &prepared.plan) {
        Ok(Some((answers, cores))) => {
            let (host, plan) = plan_for(
                spec,
                opts,
                &prepared.image,
                &prepared.accel,
                &answers,
                cores,
            );
            prepared.host = host;
            prepared.plan = plan;
            st.settings = prepared.plan.settings.clone();
            st.pinning = prepared.plan.pinning.clone();
            st.notes = prepared.plan.notes.clone();
            let refused = if spec.strict {
                prepared.plan.strict_refusal()
            } else {
                None
            };
            if let Err(e) = st.save(&dir) {
                teardown(&dir, &st, None);
                return Err(e);
            }
            if let Some(why) = refused {
                teardown(&dir, &st, None);
                return Err(Error::Invalid(why));
            }
        }
        Ok(None) => {}
        Err(e) => {
            teardown(&dir, &st, None);
            return Err(e);
        }
    }
    let mut child = None;
    let mut journaled = None;
    let result = start(
        &dir,
        &mut st,
        &prepared.plan,
        &pt,
        opts,
        (&mut child, &mut journaled),
        lock,
    );
    match result {
        Ok(()) => Ok(Launched {
            dir,
            state: st,
            plan: prepared.plan,
            child: child.expect("a started VM has a QEMU"),
            journaled,
        }),
        Err(e) => {
            let e = match (e, &mut child) {
                // Say why QEMU gave up, from its own log.
                (Error::Guest(msg), Some(_)) | (Error::Qmp(msg), Some(_)) => {
                    let log = std::fs::read_to_string(dir.qemu_log()).unwrap_or_default();
                    let tail = crate::tool::tail(log.as_bytes());
                    Error::Guest(if tail.is_empty() {
                        msg
                    } else {
                        format!("{msg}: QEMU said: {tail}")
                    })
                }
                (e, _) => e,
            };
            teardown(&dir, &st, child.as_mut());
            if let (Some(j), Some(entry)) = (&opts.journal, &journaled) {
                let _ = j.forget(entry);
            }
            Err(e)
        }
    }
}

/// Asks the switch to make each planned latency-high port so; returns the
/// answers by NIC index and the cores the switch dedicated (`None`: no port
/// to ask). Each port is recorded in the state first, so stop puts it back.
#[allow(clippy::type_complexity)]
fn ask_switch(
    dir: &VmDir,
    st: &mut State,
    plan: &Plan,
) -> Result<Option<(Vec<Option<SwitchAnswer>>, Vec<(String, Vec<usize>)>)>> {
    let mut answers = vec![None; plan.nics.len()];
    let mut cores = Vec::new();
    let mut asked = false;
    for (i, n) in plan.nics.iter().enumerate() {
        let (
            Backend::VhostUser {
                control: Some(c),
                socket,
                ..
            },
            true,
        ) = (&n.backend, n.switch_latency_high)
        else {
            continue;
        };
        asked = true;
        let port = switchport::port_for_socket(c, socket)?;
        st.owned.push(Owned::SwitchPort {
            control: c.clone(),
            port: port.name.clone(),
            latency: port.latency,
        });
        st.save(dir)?;
        answers[i] = Some(
            match switchport::set_latency(c, &port.name, SwitchLatency::High) {
                Ok(()) => {
                    let now = switchport::port_for_socket(c, socket)?;
                    if let Some(core) = now.core {
                        cores.push((format!("switch port {}", now.name), vec![core]));
                    }
                    SwitchAnswer::Dedicated {
                        port: now.name,
                        core: now.core,
                    }
                }
                Err(e) => SwitchAnswer::Refused {
                    port: port.name,
                    why: error_chain(&e),
                },
            },
        );
    }
    Ok(asked.then_some((answers, cores)))
}

fn check_interrupt(opts: &LaunchOptions) -> Result<()> {
    if opts.interrupt.load(Ordering::SeqCst) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// The steps after the state directory exists; errors are undone by the
/// caller, which gets QEMU and its journal entry through `slots`.
fn start(
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
    // Host interfaces before QEMU: macvtaps (QEMU gets their fds) and bridges.
    let mut pass = Vec::new();
    let mut keep_open: Vec<File> = Vec::new();
    for n in &plan.nics {
        check_interrupt(opts)?;
        match &n.backend {
            Backend::Macvtap { parent, mode } => {
                let name = n.host_ifname.clone().expect("macvtaps are named");
                st.owned.push(Owned::Link { name: name.clone() });
                st.save(dir)?;
                let h = netlink(&mut net, dir)?;
                let f = hostnet::create_macvtap(h, &name, parent, *mode, n.mac)?;
                pass.push((f.as_raw_fd(), n.fd.expect("macvtaps have an fd number")));
                keep_open.push(f);
            }
            Backend::Tap {
                bridge: Some(b), ..
            } => {
                let h = netlink(&mut net, dir)?;
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
            // QEMU redials a restarted switch (`reconnect=1`), so it would
            // also wait forever for a socket that is not there at all.
            Backend::VhostUser {
                socket,
                server: false,
                ..
            } => {
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
            }
            _ => {}
        }
    }
    let argv = passthrough::hand_over(dir, st, plan, pt)?;
    std::fs::write(dir.cmdline(), plan::shell_line(&argv) + "\n")
        .ctx(|| format!("writing {}", dir.cmdline().display()))?;

    // QEMU, paused (-S) until pinning and interfaces are in place.
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

/// An error with its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// Stops QEMU if it runs and removes everything listed in the state, then
/// the state directory. Returns what it removed. Never fails: each step is
/// attempted, and leftovers are reported.
pub fn teardown(dir: &VmDir, st: &State, child: Option<&mut Child>) -> Vec<String> {
    let mut done = Vec::new();
    if let Some(pid) = st.pid {
        if stop_qemu(dir, pid, child) {
            done.push(format!("QEMU {pid}"));
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

/// Ends QEMU: `quit` over QMP, then SIGTERM, then SIGKILL. Returns whether
/// it was running.
fn stop_qemu(dir: &VmDir, pid: u32, mut child: Option<&mut Child>) -> bool {
    let gone = |child: &mut Option<&mut Child>| match child {
        Some(c) => c.try_wait().ok().flatten().is_some(),
        None => !state::is_ours(pid, dir),
    };
    if gone(&mut child) {
        return false;
    }
    let wait = |child: &mut Option<&mut Child>, limit: Duration| {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if gone(child) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        gone(child)
    };
    if let Ok(mut q) = Qmp::connect(&dir.qmp()) {
        let _ = q.quit();
    }
    if wait(&mut child, Duration::from_secs(5)) {
        return true;
    }
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    if wait(&mut child, Duration::from_secs(5)) {
        return true;
    }
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    wait(&mut child, Duration::from_secs(5));
    true
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
            let st = State::load(dir)?;
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
