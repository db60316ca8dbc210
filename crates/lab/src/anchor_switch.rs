//! The anchor switches vnio's is measured against, started by hand as the
//! shared anchor harness does: OVS-DPDK 3.1 (`ovsdb-server` and
//! `ovs-vswitchd-dpdk` run directly, no service manager; a netdev bridge,
//! two `dpdkvhostuserclient` ports, port-to-port flows) and `dpdk-testpmd`
//! forwarding between two `net_vhost` ports in io mode.
//!
//! Both busy-poll one CPU (the first of the switch's CPUs), use 2 MiB
//! hugepages from a hugetlbfs mounted in the scratch directory
//! ([`vnio_topo::Hugepages`], journaled), run in memory without telemetry
//! (no DPDK runtime files under /var/run/dpdk), and are journaled children of the lab: dropping the
//! [`AnchorSwitch`] kills them and gives the hugepages back.
//!
//! Pitfalls this avoids (from the anchor harness): testpmd without a
//! terminal exits at end of input, so its stdin is a pipe kept open; it
//! needs two lcores (`--lcores 0@N,1@N` keeps both on one CPU); OVS run by
//! hand needs `--unixctl` and its run directory set explicitly.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use vnio_topo::{Hugepages, Journal, Process};

use crate::host::{log_tail, spawn, BedError};
use crate::scenario::WireKind;

pub use crate::probe::anchor_switch as missing;
pub use crate::scenario::capabilities::{not_installed, OVS_VSWITCHD_DPDK, TESTPMD};
/// OVS's database schema (package openvswitch-common).
const OVS_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
/// 2 MiB pages reserved: 1 GiB for the switch, as the anchor harness gives
/// it, with room for DPDK's own overhead.
const HUGEPAGES: u64 = 640;
/// How long a switch may take to come up (OVS initialises DPDK first).
const START: Duration = Duration::from_secs(60);

/// A running anchor switch. Fields drop in order: the switch's processes
/// first, then the hugepages they used.
#[derive(Debug)]
pub struct AnchorSwitch {
    /// testpmd's command input (kept open: it quits at end of input).
    stdin: Option<ChildStdin>,
    processes: Vec<Process>,
    _runtime: RuntimeDir,
    _hugepages: Hugepages,
    /// What was started, for the testbed's notes.
    pub note: String,
}

/// Where and how to start one.
#[derive(Debug, Clone)]
pub struct AnchorSpec<'a> {
    /// OvsDpdk or Testpmd.
    pub kind: WireKind,
    /// A scratch directory of the testbed (logs, OVS's database, sockets).
    pub dir: &'a Path,
    /// The two ports' vhost-user sockets.
    pub sockets: [&'a Path; 2],
    /// The CPU its forwarding thread busy-polls (None: any CPU).
    pub cpu: Option<usize>,
    /// Journal for everything created.
    pub journal: &'a Journal,
}

impl AnchorSwitch {
    /// Start the switch. testpmd creates the sockets (the endpoints
    /// connect); OVS connects to them (the endpoints listen, and OVS retries
    /// until they do).
    pub fn start(spec: &AnchorSpec<'_>) -> Result<AnchorSwitch, BedError> {
        if let Some(why) = missing(spec.kind) {
            return Err(fail(spec.kind, why));
        }
        let hugepages = Hugepages::reserve(&spec.dir.join("hugetlbfs"), HUGEPAGES, spec.journal)?;
        let runtime = RuntimeDir::new(spec)?;
        match spec.kind {
            WireKind::Testpmd => testpmd(spec, hugepages, runtime),
            WireKind::OvsDpdk => ovs(spec, hugepages, runtime),
            other => Err(fail(other, "not an anchor switch")),
        }
    }
}

impl Drop for AnchorSwitch {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\nquit\n");
        }
        // The daemon before its database (Process kills on drop).
        while let Some(p) = self.processes.pop() {
            let _ = p.kill();
        }
    }
}

/// DPDK's run-time directory (`/var/run/dpdk/PREFIX`, telemetry sockets
/// even in memory), named after the testbed's scratch directory so that
/// `vnio lab clean` may remove it; journaled, removed on drop. The lab's
/// DPDK endpoints (`crate::pair::dpdk`) take one too.
#[derive(Debug)]
pub(crate) struct RuntimeDir {
    /// DPDK's `--file-prefix`.
    pub(crate) prefix: String,
    journal: Journal,
}

impl RuntimeDir {
    fn new(spec: &AnchorSpec<'_>) -> Result<RuntimeDir, BedError> {
        RuntimeDir::named(spec.dir, spec.kind.as_str(), spec.journal)
    }

    /// The directory of a DPDK program called `what`, started by the
    /// testbed whose scratch directory is `scratch`.
    pub(crate) fn named(
        scratch: &Path,
        what: &str,
        journal: &Journal,
    ) -> Result<RuntimeDir, BedError> {
        let scratch = scratch
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = RuntimeDir {
            prefix: format!("{scratch}-{what}"),
            journal: journal.clone(),
        };
        journal.record(&vnio_topo::Entry::Dir(dir.path()))?;
        Ok(dir)
    }

    fn path(&self) -> PathBuf {
        Path::new("/var/run/dpdk").join(&self.prefix)
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.path());
        let _ = self.journal.forget(&vnio_topo::Entry::Dir(self.path()));
    }
}

fn fail(kind: WireKind, detail: impl std::fmt::Display) -> BedError {
    BedError::Setup {
        what: format!("starting the {} switch", kind.as_str()),
        detail: detail.to_string(),
    }
}

/// `taskset -c CPU` before `program`, or `program` alone.
fn pinned(program: &str, cpu: Option<usize>) -> Command {
    match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string(), program]);
            cmd
        }
        None => Command::new(program),
    }
}

fn testpmd(
    spec: &AnchorSpec<'_>,
    hugepages: Hugepages,
    runtime: RuntimeDir,
) -> Result<AnchorSwitch, BedError> {
    let kind = spec.kind;
    let log = spec.dir.join("testpmd.log");
    let lcores = match spec.cpu {
        Some(c) => format!("0@{c},1@{c}"),
        None => "(0,1)@(0-1023)".to_owned(),
    };
    // Line-buffered, so the prompt reaches the log while it waits.
    let mut cmd = pinned("stdbuf", spec.cpu);
    cmd.args(["-oL", "-eL", TESTPMD, "--lcores", &lcores, "--no-pci"])
        .args([
            "--in-memory",
            "--no-telemetry",
            "--single-file-segments",
            "-m",
            "1024",
        ])
        .args(["--file-prefix", &runtime.prefix])
        .arg("--huge-dir")
        .arg(hugepages.dir());
    for (i, sock) in spec.sockets.iter().enumerate() {
        cmd.arg("--vdev")
            .arg(format!("net_vhost{i},iface={},queues=1", sock.display()));
    }
    cmd.args(["--", "-i", "--nb-cores=1", "--forward-mode=io"])
        .arg("--total-num-mbufs=32768");
    let out = std::fs::File::create(&log).map_err(|e| fail(kind, e))?;
    let err = out.try_clone().map_err(|e| fail(kind, e))?;
    // Its own process group (a Ctrl-C reaches only the runner), and a
    // command pipe kept open: testpmd quits at the end of its input.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(err);
    let mut p = Process::spawn_with_journal(&mut cmd, spec.journal)?;
    let stdin = p.child_mut().stdin.take();
    wait_for(kind, &mut p, &log, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("testpmd>"))
    })?;
    let mut switch = AnchorSwitch {
        stdin,
        processes: vec![p],
        _runtime: runtime,
        _hugepages: hugepages,
        note: format!(
            "dpdk-testpmd io forwarding between two net_vhost ports, lcores {lcores}, hugepages"
        ),
    };
    if let Some(stdin) = switch.stdin.as_mut() {
        stdin
            .write_all(b"start\n")
            .map_err(|e| fail(kind, format!("sending start: {e}")))?;
    }
    Ok(switch)
}

/// Poll `ready` until it holds, failing when the process exits or
/// [`START`] passes.
fn wait_for(
    kind: WireKind,
    p: &mut Process,
    log: &Path,
    mut ready: impl FnMut() -> bool,
) -> Result<(), BedError> {
    let deadline = Instant::now() + START;
    while !ready() {
        if let Ok(Some(status)) = p.child_mut().try_wait() {
            return Err(fail(
                kind,
                format!("it exited ({status}): {}", log_tail(log)),
            ));
        }
        if Instant::now() > deadline {
            return Err(fail(
                kind,
                format!("not ready after {START:?}: {}", log_tail(log)),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// OVS's tools with their run, log, database and configuration
/// directories in `dir` (nothing under /var/run/openvswitch).
fn ovs_command(program: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
        cmd.env(var, dir);
    }
    cmd
}

/// Run one OVS tool to completion.
fn ovs_tool(kind: WireKind, dir: &Path, program: &str, args: &[&str]) -> Result<(), BedError> {
    let out = ovs_command(program, dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(kind, format!("running {program}: {e}")))?;
    if !out.status.success() {
        return Err(fail(
            kind,
            format!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}

fn ovs(
    spec: &AnchorSpec<'_>,
    hugepages: Hugepages,
    runtime: RuntimeDir,
) -> Result<AnchorSwitch, BedError> {
    let kind = spec.kind;
    let dir = spec.dir.join("ovs");
    std::fs::create_dir_all(&dir).map_err(|e| fail(kind, e))?;
    let db = dir.join("conf.db");
    let db_sock = dir.join("db.sock");
    let s = |p: &Path| p.display().to_string();
    ovs_tool(kind, &dir, "ovsdb-tool", &["create", &s(&db), OVS_SCHEMA])?;
    let log = dir.join("ovsdb-server.log");
    let mut cmd = ovs_command("ovsdb-server", &dir);
    cmd.arg(&db)
        .arg(format!("--remote=punix:{}", db_sock.display()))
        .arg(format!(
            "--unixctl={}",
            dir.join("ovsdb-server.ctl").display()
        ))
        .stdout(Stdio::null());
    let mut server = spawn(&mut cmd, spec.journal, &log)?;
    wait_for(kind, &mut server, &log, || db_sock.exists())?;
    let mut processes = vec![server];
    let db_arg = format!("--db=unix:{}", db_sock.display());
    let vsctl = |args: &[&str]| -> Result<(), BedError> {
        let mut all = vec![db_arg.as_str(), "--timeout=30"];
        all.extend_from_slice(args);
        ovs_tool(kind, &dir, "ovs-vsctl", &all)
    };
    vsctl(&["--no-wait", "init"])?;
    let pmd_mask = spec
        .cpu
        .map_or("0x1".to_owned(), |c| format!("{:#x}", 1u128 << c));
    // OVS 3.1 adds --in-memory itself: no DPDK runtime files.
    let extra = format!(
        "other_config:dpdk-extra=--huge-dir {} --single-file-segments --no-pci --no-telemetry --file-prefix {}",
        hugepages.dir().display(),
        runtime.prefix
    );
    vsctl(&[
        "--no-wait",
        "set",
        "Open_vSwitch",
        ".",
        "other_config:dpdk-init=true",
        "other_config:dpdk-socket-mem=1024",
        &extra,
        &format!("other_config:pmd-cpu-mask={pmd_mask}"),
    ])?;
    let log = dir.join("ovs-vswitchd.log");
    let mut cmd = pinned(OVS_VSWITCHD_DPDK, spec.cpu);
    for var in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"] {
        cmd.env(var, &dir);
    }
    cmd.arg(format!("unix:{}", db_sock.display()))
        .arg(format!(
            "--unixctl={}",
            dir.join("ovs-vswitchd.ctl").display()
        ))
        .args(["-vconsole:off", "-vfile:info"])
        .arg(format!("--log-file={}", log.display()))
        .stdout(Stdio::null());
    processes.push(spawn(&mut cmd, spec.journal, &log)?);
    let bridge = |r: Result<(), BedError>| {
        r.map_err(|e| fail(kind, format!("{e} (log: {})", log_tail(&log))))
    };
    bridge(vsctl(&[
        "add-br",
        "br0",
        "--",
        "set",
        "bridge",
        "br0",
        "datapath_type=netdev",
    ]))?;
    for (i, sock) in spec.sockets.iter().enumerate() {
        let port = format!("p{}", i + 1);
        bridge(vsctl(&[
            "add-port",
            "br0",
            &port,
            "--",
            "set",
            "Interface",
            &port,
            "type=dpdkvhostuserclient",
            &format!("options:vhost-server-path={}", sock.display()),
            &format!("ofport_request={}", i + 1),
        ]))?;
    }
    let ofctl = |args: &[&str]| ovs_tool(kind, &dir, "ovs-ofctl", args);
    ofctl(&["del-flows", "br0"])?;
    ofctl(&["add-flow", "br0", "in_port=1,actions=output:2"])?;
    ofctl(&["add-flow", "br0", "in_port=2,actions=output:1"])?;
    Ok(AnchorSwitch {
        stdin: None,
        processes,
        _runtime: runtime,
        _hugepages: hugepages,
        note: format!(
            "OVS-DPDK netdev bridge, two dpdkvhostuserclient ports, port-to-port flows, PMD mask {pmd_mask}, hugepages"
        ),
    })
}
