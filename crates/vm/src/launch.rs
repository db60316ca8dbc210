//! Launching and stopping VMs. A launch either ends with QEMU running the
//! guest and `state.json` saying so, or with nothing left: no QEMU, no
//! interface, no socket, no state directory. Everything the launcher
//! creates is recorded in the state before it is created, so `stop` (or a
//! later launch of the same name after a crash) removes exactly that.
//!
//! This module decides what to launch (options, plan, the switch's
//! answers) and undoes a failed launch; `launch/start.rs` runs the
//! host-side steps and QEMU; `launch/stop.rs` ends a VM and removes what
//! it owned.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::accel::{self, AccelDecision, QEMU};
use crate::error::{Context, Error, Result};
use crate::host::HostFacts;
use crate::image::{self, Image};
use crate::passthrough;
use crate::plan::{self, Plan, PlanInput, SwitchAnswer};
use crate::spec::{Backend, VmSpec};
use crate::state::{self, Owned, Phase, State, VmDir};
use crate::switchport;
use vnio_switch::config::Latency as SwitchLatency;
use vnio_topo::{Entry, Journal};

mod start;
mod stop;

use self::start::start;
pub use self::stop::{stop, supervise, teardown, Stopped};

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
    clear_leftover(spec, &dir)?;
    let mut prepared = prepare(spec, opts)?;
    if spec.strict {
        if let Some(why) = prepared.plan.strict_refusal() {
            return Err(Error::Invalid(why));
        }
    }
    make_private_dir(&dir)?;
    let mut st = first_state(spec, &prepared);
    st.save(&dir)?;
    // Switch ports first: a latency-high port's worker takes a core, which
    // the vCPUs must then leave alone.
    if let Err(e) = replan_with_switch(spec, opts, &dir, &mut st, &mut prepared) {
        teardown(&dir, &st, None);
        return Err(e);
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
            let e = if child.is_some() {
                with_qemu_log(e, &dir)
            } else {
                e
            };
            teardown(&dir, &st, child.as_mut());
            if let (Some(j), Some(entry)) = (&opts.journal, &journaled) {
                let _ = j.forget(entry);
            }
            Err(e)
        }
    }
}

/// Refuses a VM of that name that runs; removes what a crashed one left.
fn clear_leftover(spec: &VmSpec, dir: &VmDir) -> Result<()> {
    if dir.path().exists() {
        match State::load(dir) {
            Ok(s) if s.pid.is_some_and(|p| state::is_ours(p, dir)) => {
                return Err(Error::Invalid(format!(
                    "VM {} is already running (pid {}): `vnio vm stop {}` first",
                    spec.name,
                    s.pid.unwrap_or_default(),
                    spec.name
                )));
            }
            // Left over from a crash: clean it up first.
            Ok(s) => {
                teardown(dir, &s, None);
            }
            Err(_) => {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }
    Ok(())
}

/// Makes the VM's directory, private: whoever reaches exec.sock runs
/// commands as root in the guest.
fn make_private_dir(dir: &VmDir) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.path()).ctx(|| format!("creating {}", dir.path().display()))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .ctx(|| format!("restricting {}", dir.path().display()))
}

/// The VM's state before anything is made on the host: starting, as planned.
fn first_state(spec: &VmSpec, prepared: &Prepared) -> State {
    State {
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
    }
}

/// Asks the switch for the planned latency-high ports and plans again with
/// its answers and the cores it took, saving the state; refuses a plan
/// `--strict` cannot accept. On an error the caller tears down.
fn replan_with_switch(
    spec: &VmSpec,
    opts: &LaunchOptions,
    dir: &VmDir,
    st: &mut State,
    prepared: &mut Prepared,
) -> Result<()> {
    let Some((answers, cores)) = ask_switch(dir, st, &prepared.plan)? else {
        return Ok(());
    };
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
    st.save(dir)?;
    match refused {
        Some(why) => Err(Error::Invalid(why)),
        None => Ok(()),
    }
}

/// A guest or QMP error `e` of a QEMU that ran, with why QEMU gave up from
/// its own log.
fn with_qemu_log(e: Error, dir: &VmDir) -> Error {
    match e {
        Error::Guest(msg) | Error::Qmp(msg) => {
            let log = std::fs::read_to_string(dir.qemu_log()).unwrap_or_default();
            let tail = crate::tool::tail(log.as_bytes());
            Error::Guest(if tail.is_empty() {
                msg
            } else {
                format!("{msg}: QEMU said: {tail}")
            })
        }
        e => e,
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
