//! The destination's steps of a migration to another machine, run there as
//! `vnio vm incoming` (over SSH, by [`super::to_host`]).
//!
//! Its standard input starts with one JSON line, an [`Incoming`]: the
//! source's QEMU command line and VM directory, the NICs to move and
//! HOST's switch control socket, and the source's state. It checks that
//! this host has what the command line needs (kernel, initrd, the control
//! socket), makes a port on this host's switch for each NIC (named and
//! placed as the local migration names them, beside the control socket),
//! starts QEMU with `-incoming defer` and its files in this host's state
//! directory of the VM, gives it the TLS credentials of
//! [`Incoming::tls`] ([`super::tls`]; none with `--insecure`), has it
//! listen with `migrate-incoming tcp:ADDR:0` on the one address the source
//! sends to (QEMU picks the port; `query-migrate` tells it), and says
//! [`Ready`]. Once the guest runs here it writes the VM's state (so
//! `vnio vm list`, `exec` and `stop` work here) and says [`Done`].
//!
//! If anything fails, or its input ends before the guest runs (the source
//! gave up, or the SSH session died), it kills its QEMU, removes the ports
//! and the directory it made: nothing stays.

use std::io::BufRead;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use vnio_switch::config::Latency;

use super::destination::{spawn_destination, with_qemu_log, Made};
use super::{destination_argv, make_port, next_port_name, port_names, wait_qmp};
use crate::error::{Context, Error, Result};
use crate::qmp::Qmp;
use crate::spec::Backend;
use crate::state::{Owned, Phase, State, VmDir};

/// What the destination host is told (one JSON line on its input).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incoming {
    /// The VM.
    pub name: String,
    /// The source machine's name (for the state's notes).
    pub source: String,
    /// The source QEMU's command line.
    pub argv: Vec<String>,
    /// The VM's directory on the source (its files in `argv` move to the
    /// VM's directory here).
    pub source_dir: PathBuf,
    /// This host's switch control socket.
    pub control: PathBuf,
    /// The NICs, each to a new port on this host's switch.
    pub nics: Vec<IncomingNic>,
    /// The source's state, recorded here once the guest runs.
    pub state: State,
    /// The address the source sends the stream to: QEMU listens on it only.
    pub listen: IpAddr,
    /// The TLS certificates' directory on this host; `None`: a plain-text
    /// stream (`--insecure`).
    pub tls: Option<PathBuf>,
}

/// A NIC to put on this host's switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingNic {
    /// Its index in the VM's NICs.
    pub index: usize,
    /// Its vhost-user socket on the source (in `argv`).
    pub socket: PathBuf,
    /// Its port on the source's switch (the new port's name derives from it).
    pub port: String,
    /// The switch listens on the socket (QEMU connects).
    pub switch_listens: bool,
    /// The source port's latency policy.
    pub latency: Latency,
    /// Queue pairs.
    pub queues: u16,
}

/// The destination listens: printed as `ready {json}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    /// The destination QEMU's pid.
    pub pid: u32,
    /// The TCP port it listens on for the migration stream.
    pub port: u16,
    /// The new switch ports, in NIC order.
    pub ports: Vec<String>,
}

/// The guest runs here and its state is saved: printed as `done {json}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// The QEMU now running the guest.
    pub pid: u32,
    /// The VM's state directory here.
    pub dir: PathBuf,
}

/// A line of `vnio vm incoming`'s output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `ready {json}`.
    Ready(Ready),
    /// `done {json}`.
    Done(Done),
    /// Anything else.
    Other(String),
}

impl Line {
    /// Parses one output line; a `ready`/`done` line whose JSON does not
    /// parse is `Other`.
    pub fn parse(line: &str) -> Line {
        let line = line.trim_end();
        if let Some(Ok(r)) = line.strip_prefix("ready ").map(serde_json::from_str) {
            return Line::Ready(r);
        }
        if let Some(Ok(d)) = line.strip_prefix("done ").map(serde_json::from_str) {
            return Line::Done(d);
        }
        Line::Other(line.to_string())
    }

    /// The line as printed (no newline).
    pub fn render(&self) -> String {
        let json =
            |r: std::result::Result<String, serde_json::Error>| r.expect("plain data serialises");
        match self {
            Line::Ready(r) => format!("ready {}", json(serde_json::to_string(r))),
            Line::Done(d) => format!("done {}", json(serde_json::to_string(d))),
            Line::Other(s) => s.clone(),
        }
    }
}

/// The URI the destination QEMU listens on: `addr`, a port QEMU picks.
pub fn listen_uri(addr: IpAddr) -> String {
    send_uri(addr, 0)
}

/// The URI the source's QEMU sends to: `tcp:ADDR:PORT` (IPv6 in brackets).
pub fn send_uri(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("tcp:{a}:{port}"),
        IpAddr::V6(a) => format!("tcp:[{a}]:{port}"),
    }
}

/// The port a listening destination reports in `query-migrate`
/// (`socket-address`, QEMU 4.0 and later; the port is a string there).
pub fn listening_port(query_migrate: &Value) -> Option<u16> {
    query_migrate
        .get("socket-address")?
        .as_array()?
        .iter()
        .find_map(|a| match a.get("port")? {
            Value::String(s) => s.parse().ok(),
            Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
            _ => None,
        })
}

/// The files a command line needs on the host it runs on: (what, path)
/// for `-kernel`, `-initrd` and each `-drive`'s `file=`.
pub fn needed_files(argv: &[String]) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for w in argv.windows(2) {
        match w[0].as_str() {
            "-kernel" => out.push(("the guest's kernel", PathBuf::from(&w[1]))),
            "-initrd" => out.push(("the guest's initrd", PathBuf::from(&w[1]))),
            "-drive" => out.extend(
                w[1].split(',')
                    .filter_map(|kv| kv.strip_prefix("file="))
                    .map(|f| ("a disk image", PathBuf::from(f))),
            ),
            _ => {}
        }
    }
    out
}

/// The new ports' names and sockets on this host's switch (whose ports
/// are `taken`): each NIC's port with `-mN` (as a local migration names
/// it), its socket beside the control socket (the switch's default
/// socket directory).
pub fn new_ports(
    nics: &[IncomingNic],
    control: &Path,
    mut taken: Vec<String>,
) -> Vec<(String, PathBuf)> {
    let dir = control.parent().unwrap_or(Path::new("/"));
    nics.iter()
        .map(|n| {
            let name = next_port_name(&n.port, &taken);
            taken.push(name.clone());
            let socket = dir.join(format!("{name}.sock"));
            (name, socket)
        })
        .collect()
}

/// The VM's state here: the source's with this host's directory, sockets,
/// switch and ports, the new pid, no pinning; the new ports are the VM's
/// (stop removes them).
pub fn host_state(
    d: &Incoming,
    dir: &Path,
    ports: &[(String, PathBuf)],
    pid: u32,
    from: &str,
) -> State {
    let mut st = d.state.clone();
    let moved = |p: &Path| -> PathBuf {
        p.strip_prefix(&d.source_dir)
            .map(|rest| dir.join(rest))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    for (n, (_, socket)) in d.nics.iter().zip(ports) {
        if let Some(Backend::VhostUser {
            socket: s, control, ..
        }) = st.spec.nics.get_mut(n.index).map(|n| &mut n.backend)
        {
            s.clone_from(socket);
            *control = Some(d.control.clone());
        }
    }
    // The source's ports (and their latency to put back) stay there.
    st.owned.retain(|o| {
        !matches!(
            o,
            Owned::SwitchPort { .. }
                | Owned::MadePort { .. }
                | Owned::Link { .. }
                | Owned::Bridge { .. }
        )
    });
    for o in &mut st.owned {
        if let Owned::Socket { path } = o {
            match d.nics.iter().zip(ports).find(|(n, _)| n.socket == *path) {
                Some((_, (_, new))) => path.clone_from(new),
                None => *path = moved(path),
            }
        }
    }
    st.owned
        .extend(ports.iter().map(|(name, _)| Owned::MadePort {
            control: d.control.clone(),
            port: name.clone(),
        }));
    st.pid = Some(pid);
    st.phase = Phase::Running;
    st.pinning = None;
    st.notes
        .push(format!("live-migrated from {from} to QEMU {pid} here"));
    st
}

/// Runs the destination's steps with the VMs' state root `root`: reads
/// the [`Incoming`] line from `input`, calls `ready` once QEMU listens,
/// and returns once the guest runs here with its state saved. The rest of
/// `input` is watched: its end before then means the source gave up.
pub fn serve(
    root: &Path,
    mut input: impl BufRead + Send + 'static,
    ready: impl FnOnce(&Ready),
) -> Result<Done> {
    let mut first = String::new();
    input
        .read_line(&mut first)
        .ctx(|| "reading the destination's description".into())?;
    let d: Incoming = serde_json::from_str(&first)
        .map_err(|e| Error::Invalid(format!("the destination's description: {e}")))?;
    crate::spec::check_name(&d.name)?;
    // The source is gone when the input ends.
    let (tx, gone) = channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        while input.read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
        let _ = tx.send(());
    });
    let dir = VmDir::new(root, &d.name);
    if dir.path().exists() {
        return Err(Error::Invalid(format!(
            "VM {} already exists here ({})",
            d.name,
            dir.path().display()
        )));
    }
    for (what, f) in needed_files(&d.argv) {
        if !f.exists() {
            return Err(Error::Missing(format!(
                "{what} {} is not on this host (the same path as on the source is needed)",
                f.display()
            )));
        }
    }
    if let Some(t) = &d.tls {
        super::tls::check_destination(t)?;
    }
    if !d.control.exists() {
        return Err(Error::Missing(format!(
            "no switch control socket at {} on this host (is vnio's switch running here?)",
            d.control.display()
        )));
    }
    let ports = new_ports(&d.nics, &d.control, port_names(&d.control)?);
    let mut made = Made::default();
    let result = (|| {
        std::fs::create_dir_all(root).ctx(|| format!("creating {}", root.display()))?;
        std::fs::create_dir(dir.path()).ctx(|| format!("creating {}", dir.path().display()))?;
        made.dir = Some(dir.path().to_path_buf());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .ctx(|| format!("restricting {}", dir.path().display()))?;
        run(&d, &dir, &ports, &mut made, &gone, ready)
    })();
    match result {
        Ok(done) => Ok(done),
        Err(e) => {
            made.undo();
            Err(e)
        }
    }
}

fn run(
    d: &Incoming,
    dir: &VmDir,
    ports: &[(String, PathBuf)],
    made: &mut Made,
    gone: &Receiver<()>,
    ready: impl FnOnce(&Ready),
) -> Result<Done> {
    let sockets: Vec<(PathBuf, PathBuf)> = d
        .nics
        .iter()
        .zip(ports)
        .map(|(n, (_, s))| (n.socket.clone(), s.clone()))
        .collect();
    let argv = destination_argv(&d.argv, &d.source_dir, dir.path(), &sockets);
    let add = |made: &mut Made, listens: bool| -> Result<()> {
        for (n, (name, socket)) in d.nics.iter().zip(ports) {
            if n.switch_listens == listens {
                made.ports.push((d.control.clone(), name.clone()));
                make_port(&d.control, name, socket, listens, n.latency, n.queues)?;
            }
        }
        Ok(())
    };
    // A port the switch listens on must exist before QEMU connects to it.
    add(made, true)?;
    let log_path = dir.qemu_log();
    let pid = spawn_destination(&argv, &log_path, made)?;
    // A port that connects to QEMU: QEMU listens (and waits for it) now.
    add(made, false)?;
    let with_log = |e: Error| with_qemu_log(e, &log_path);
    let child = made.child.as_mut().expect("spawned");
    let mut qmp = wait_qmp(&dir.qmp(), child, Duration::from_secs(60)).map_err(with_log)?;
    if let Some(t) = &d.tls {
        super::tls::enable(&mut qmp, t, super::tls::End::Server, None).map_err(with_log)?;
    }
    qmp.execute(
        "migrate-incoming",
        Some(json!({ "uri": listen_uri(d.listen) })),
    )
    .map_err(with_log)?;
    let status = qmp.execute("query-migrate", None).map_err(with_log)?;
    let port = listening_port(&status).ok_or_else(|| {
        Error::Qmp(format!(
            "query-migrate names no listening port (QEMU 4.0 or later is needed): {status}"
        ))
    })?;
    ready(&Ready {
        pid,
        port,
        ports: ports.iter().map(|(n, _)| n.clone()).collect(),
    });
    wait_guest(&mut qmp, child, gone, super::MIGRATION_TIMEOUT).map_err(with_log)?;
    let from = format!("{}'s QEMU {}", d.source, d.state.pid.unwrap_or(0));
    let st = host_state(d, dir.path(), ports, pid, &from);
    st.save(dir)?;
    let _ = std::fs::write(dir.cmdline(), crate::plan::shell_line(&argv) + "\n");
    // From here the guest is this host's: nothing is undone.
    made.child = None;
    made.ports.clear();
    made.dir = None;
    Ok(Done {
        pid,
        dir: dir.path().to_path_buf(),
    })
}

/// Waits until the guest runs in `qmp`'s QEMU; fails if the migration
/// fails, QEMU exits, the source goes (`gone`) or `limit` passes.
fn wait_guest(
    qmp: &mut Qmp,
    child: &mut Child,
    gone: &Receiver<()>,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    // A monitor that fails is most often a QEMU that died: say that.
    let exited = |child: &mut Child, e: Error| {
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            if let Ok(Some(s)) = child.try_wait() {
                return Error::Guest(format!(
                    "the destination QEMU exited during the migration ({s})"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        e
    };
    loop {
        if let Some(s) = child.try_wait().ctx(|| "waiting for QEMU".into())? {
            return Err(Error::Guest(format!(
                "the destination QEMU exited during the migration ({s})"
            )));
        }
        if !matches!(gone.try_recv(), Err(TryRecvError::Empty)) {
            return Err(Error::Guest(
                "the source gave up (its session ended) before the guest ran here".into(),
            ));
        }
        let r = qmp
            .execute("query-status", None)
            .map_err(|e| exited(child, e))?;
        if r.get("status").and_then(Value::as_str) == Some("running") {
            return Ok(());
        }
        let m = qmp
            .execute("query-migrate", None)
            .map_err(|e| exited(child, e))?;
        if let Some(s @ ("failed" | "cancelled")) = m.get("status").and_then(Value::as_str) {
            return Err(Error::Guest(format!("the incoming migration {s}")));
        }
        if Instant::now() > deadline {
            return Err(Error::Guest(format!(
                "the guest did not arrive within {} s",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
