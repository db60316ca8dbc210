//! Live migration of a running guest to a new QEMU process on this host.
//!
//! The destination is the source's own command line (read from
//! `/proc/PID/cmdline`, so the machine is exactly the same) with its
//! sockets and logs in `DIR/incoming/`, each vhost-user NIC on a new
//! switch port created over the switch's control socket, and
//! `-incoming defer`. QEMU moves the guest over a Unix socket (QMP
//! `migrate-incoming` on the destination, `migrate` on the source): the
//! switch logs the guest pages it writes meanwhile (VHOST_F_LOG_ALL), and
//! once the guest runs on the destination it announces itself
//! (VIRTIO_NET_F_GUEST_ANNOUNCE, or QEMU's SEND_RARP to the switch), so
//! the switch's forwarding table follows at once. Then the source QEMU
//! quits, its ports are removed, the destination's files take the
//! standard names and the state records the new pid, sockets and ports.
//!
//! Until the switchover nothing of the source is touched: a failure kills
//! the destination, removes the new ports and leaves the guest running
//! where it was.
//!
//! `--to HOST` ([`to_host`]) is the same steps with a TCP transport: the
//! destination's steps run on HOST as `vnio vm incoming` ([`incoming`])
//! over SSH, and QEMU moves the guest over `tcp:HOST:PORT`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use vnio_switch::config::PortSpec;
use vnio_switch::control::{Client, Request};
use vnio_switch::port::SocketMode;

use self::destination::{spawn_destination, with_qemu_log, Made};
use crate::error::{Context, Error, Result};
use crate::qmp::Qmp;
use crate::spec::Backend;
use crate::state::{self, Owned, Phase, State, VmDir};
use crate::switchport;

pub mod certs;
mod destination;
pub mod helper;
pub mod incoming;
pub mod remote_image;
#[cfg(test)]
mod remote_tests;
pub mod tls;
pub mod to_host;

/// How long the whole migration may take before it is cancelled.
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(600);

/// What a migration did and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct Migration {
    /// The VM.
    pub name: String,
    /// The source QEMU's pid.
    pub old_pid: u32,
    /// The destination QEMU's pid (the VM's pid now).
    pub new_pid: u32,
    /// From `migrate` to completion, as QEMU counts it (ms).
    pub total_ms: u64,
    /// How long the guest was paused (QEMU's `downtime`, ms).
    pub downtime_ms: u64,
    /// QEMU's setup time (ms).
    pub setup_ms: Option<u64>,
    /// RAM bytes sent.
    pub ram_transferred: Option<u64>,
    /// The whole command, from start to the new state saved (ms).
    pub wall_ms: u64,
    /// Switch ports: (the source's, the destination's).
    pub ports: Vec<(String, String)>,
    /// The machine the guest moved to (`--to HOST`); none: this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Files copied to that machine (`vnio`, the image's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copied: Vec<String>,
}

/// A NIC to move: where it is, where it goes.
struct MovingNic {
    index: usize,
    control: PathBuf,
    old_port: String,
    old_socket: PathBuf,
    new_port: String,
    new_socket: PathBuf,
    /// The switch listens on the socket (QEMU connects).
    switch_listens: bool,
    /// The source port's latency policy, which the new port takes.
    latency: vnio_switch::config::Latency,
    /// The NIC's queue pairs, which the new port offers too.
    queues: u16,
}

pub(crate) fn switch(control: &Path) -> Result<Client> {
    Client::connect(control).ctx(|| format!("connecting to the switch at {}", control.display()))
}

pub(crate) fn del_port(control: &Path, name: &str) -> Result<()> {
    switch(control)?
        .request(&Request::PortDel { name: name.into() })
        .ctx(|| format!("removing switch port {name}"))
        .map(drop)
}

fn add_port(n: &MovingNic) -> Result<()> {
    make_port(
        &n.control,
        &n.new_port,
        &n.new_socket,
        n.switch_listens,
        n.latency,
        n.queues,
    )
}

/// Creates vhost-user port `name` on `socket` (the switch listens there if
/// `switch_listens`) with `queues` queue pairs and latency policy `latency`.
pub(crate) fn make_port(
    control: &Path,
    name: &str,
    socket: &Path,
    switch_listens: bool,
    latency: vnio_switch::config::Latency,
    queues: u16,
) -> Result<()> {
    let mode = if switch_listens {
        SocketMode::Server
    } else {
        SocketMode::Client
    };
    let mut port = PortSpec::vhost_user(name, socket, mode);
    if let (Some(v), Some(q)) = (
        port.kind.vhost_user_mut(),
        std::num::NonZeroUsize::new(usize::from(queues)),
    ) {
        v.queues = q;
    }
    switch(control)?
        .request(&Request::PortAdd { port })
        .ctx(|| format!("creating switch port {name} on {}", socket.display()))?;
    if latency != vnio_switch::config::Latency::Normal {
        switchport::set_latency(control, name, latency)?;
    }
    Ok(())
}

/// The destination port's name: the source's without a previous
/// migration's `-mN`, then `-mN` with the first N the switch has free.
pub fn next_port_name(old: &str, taken: &[String]) -> String {
    let base = match old.rsplit_once("-m") {
        Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => old,
    };
    (1..)
        .map(|n| format!("{base}-m{n}"))
        .find(|c| !taken.iter().any(|t| t == c))
        .expect("a free name")
}

pub(crate) fn port_names(control: &Path) -> Result<Vec<String>> {
    let list = switch(control)?
        .request(&Request::PortList)
        .ctx(|| "listing the switch's ports".into())?;
    Ok(list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

/// The destination's argv: the source's with every file of the VM's
/// directory in `incoming/`, each moving NIC's socket replaced, no `-S`
/// (the guest runs as soon as it arrived), and `-incoming defer`.
pub fn destination_argv(
    source: &[String],
    dir: &Path,
    incoming: &Path,
    sockets: &[(PathBuf, PathBuf)],
) -> Vec<String> {
    let from = format!("{}/", dir.display());
    let to = format!("{}/", incoming.display());
    let mut out: Vec<String> = source
        .iter()
        .filter(|a| *a != "-S")
        .map(|a| {
            a.split(',')
                .map(|kv| {
                    for (old, new) in sockets {
                        if kv == format!("path={}", old.display()) {
                            return format!("path={}", new.display());
                        }
                    }
                    kv.replace(&from, &to)
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    out.extend(["-incoming".to_string(), "defer".to_string()]);
    out
}

pub(crate) fn source_argv(pid: u32) -> Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ctx(|| format!("reading QEMU {pid}'s command line"))?;
    Ok(raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect())
}

/// A vhost-user NIC of the VM on a switch port: its index, socket, whether
/// QEMU listens on it (`server`), the switch's control socket and port.
pub(crate) struct SwitchNic {
    pub index: usize,
    pub socket: PathBuf,
    pub server: bool,
    pub control: PathBuf,
    pub port: switchport::Port,
    pub queues: u16,
}

/// The VM's NICs, each on a switch port, or why the VM cannot migrate.
pub(crate) fn switch_nics(st: &State) -> Result<Vec<SwitchNic>> {
    let mut out = Vec::new();
    for (index, n) in st.spec.nics.iter().enumerate() {
        let Backend::VhostUser {
            socket,
            server,
            control,
        } = &n.backend
        else {
            return Err(Error::Invalid(format!(
                "NIC {index} of VM {} is not a vhost-user NIC: only guests whose NICs are all on a vnio switch migrate",
                st.spec.name
            )));
        };
        let Some(control) = control else {
            return Err(Error::Invalid(format!(
                "NIC {index} of VM {} has no control= socket: the destination's switch port cannot be arranged",
                st.spec.name
            )));
        };
        out.push(SwitchNic {
            index,
            socket: socket.clone(),
            server: *server,
            control: control.clone(),
            port: switchport::port_for_socket(control, socket)?,
            queues: n.queues,
        });
    }
    Ok(out)
}

fn nics_to_move(st: &State) -> Result<Vec<MovingNic>> {
    let mut out = Vec::new();
    for n in switch_nics(st)? {
        let taken = port_names(&n.control)?;
        let new_port = next_port_name(&n.port.name, &taken);
        let new_socket = n
            .socket
            .parent()
            .unwrap_or(Path::new("/"))
            .join(format!("{new_port}.sock"));
        out.push(MovingNic {
            index: n.index,
            control: n.control,
            old_port: n.port.name,
            old_socket: n.socket,
            new_port,
            new_socket,
            switch_listens: !n.server,
            latency: n.port.latency,
            queues: n.queues,
        });
    }
    Ok(out)
}

pub(crate) fn wait_qmp(path: &Path, child: &mut Child, limit: Duration) -> Result<Qmp> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().ctx(|| "waiting for QEMU".into())? {
            return Err(Error::Guest(format!(
                "the destination QEMU exited at start ({s})"
            )));
        }
        if path.exists() {
            if let Ok(q) = Qmp::connect(path) {
                return Ok(q);
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Guest(format!(
                "the destination QEMU did not open its monitor within {} s",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls the source's `query-migrate` until the migration ends; returns
/// its final answer.
pub(crate) fn wait_migrated(src: &mut Qmp, limit: Duration) -> Result<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let r = src.execute("query-migrate", None)?;
        match r.get("status").and_then(Value::as_str) {
            Some("completed") => return Ok(r),
            Some(s @ ("failed" | "cancelled")) => {
                let why = r
                    .get("error-desc")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                return Err(Error::Guest(format!("migration {s}: {why}")));
            }
            _ => {}
        }
        if Instant::now() > deadline {
            let _ = src.execute("migrate_cancel", None);
            return Err(Error::Guest(format!(
                "migration did not complete within {} s (cancelled)",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The running pid of VM `name` in `dir`, or why there is nothing to migrate.
pub(crate) fn running_pid(st: &State, dir: &VmDir, name: &str) -> Result<u32> {
    match st.pid {
        Some(p) if st.phase == Phase::Running && state::is_ours(p, dir) => Ok(p),
        _ => Err(Error::Invalid(format!(
            "VM {name} is not running: nothing to migrate"
        ))),
    }
}

fn wait_running(dst: &mut Qmp, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let r = dst.execute("query-status", None)?;
        if r.get("status").and_then(Value::as_str) == Some("running") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Guest(format!(
                "the destination did not run the guest within {} s (status {r})",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `pid` (a QEMU of `dir`) to exit; SIGKILL after `limit`, then
/// as long again for the exit itself.
pub(crate) fn wait_gone(dir: &VmDir, pid: u32, limit: Duration) {
    let Some(qemu) = state::Tracked::ours(pid, dir) else {
        return;
    };
    if !qemu.exited_within(limit) {
        qemu.signal(nix::sys::signal::Signal::SIGKILL);
        qemu.exited_within(limit);
    }
}

/// Live-migrates VM `name` under `root` to a new QEMU on this host.
pub fn migrate(root: &Path, name: &str) -> Result<Migration> {
    crate::spec::check_name(name)?;
    let started = Instant::now();
    let dir = VmDir::new(root, name);
    let mut st = State::load(&dir)?;
    let old_pid = running_pid(&st, &dir, name)?;
    let nics = nics_to_move(&st)?;
    let incoming = dir.path().join("incoming");
    let _ = std::fs::remove_dir_all(&incoming);
    std::fs::create_dir_all(&incoming).ctx(|| format!("creating {}", incoming.display()))?;
    let mut made = Made {
        dir: Some(incoming.clone()),
        ..Made::default()
    };
    let result = run(&dir, &incoming, old_pid, &nics, &mut made);
    let (new_pid, stats, mut src) = match result {
        Ok(r) => r,
        Err(e) => {
            made.undo();
            return Err(e);
        }
    };
    // The guest runs on the destination: the rest cannot be undone, only
    // done. The source's ports go first: the switch forgets the addresses
    // learned there, so frames for the guest flood to its new port until
    // its announce (or any frame it sends) teaches the switch again.
    let mut notes = Vec::new();
    for n in &nics {
        if let Err(e) = del_port(&n.control, &n.old_port) {
            notes.push(format!("switch port {} not removed: {e}", n.old_port));
        }
    }
    // The new pid is recorded before the source quits, so a launcher
    // supervising the source sees a move, not an exit.
    st.pid = Some(new_pid);
    let _ = st.save(&dir);
    // The source is paused for good ("postmigrate").
    let _ = src.quit();
    drop(src);
    st.notes.extend(notes);
    finish(&dir, &incoming, &mut st, old_pid, new_pid, &nics);
    let ports = nics
        .iter()
        .map(|n| (n.old_port.clone(), n.new_port.clone()))
        .collect();
    Ok(Migration::completed(
        name,
        (old_pid, new_pid),
        &stats,
        started,
        ports,
    ))
}

impl Migration {
    /// A completed migration of `name` from pid `pids.0` to `pids.1`, its
    /// times from the source's final `query-migrate` (`stats`), its ports
    /// (old, new); on this host (set `host` and `copied` for another).
    fn completed(
        name: &str,
        pids: (u32, u32),
        stats: &Value,
        started: Instant,
        ports: Vec<(String, String)>,
    ) -> Migration {
        let ms = |k: &str| stats.get(k).and_then(Value::as_u64);
        Migration {
            name: name.into(),
            old_pid: pids.0,
            new_pid: pids.1,
            total_ms: ms("total-time").unwrap_or(0),
            downtime_ms: ms("downtime").unwrap_or(0),
            setup_ms: ms("setup-time"),
            ram_transferred: stats
                .get("ram")
                .and_then(|r| r.get("transferred"))
                .and_then(Value::as_u64),
            wall_ms: started.elapsed().as_millis() as u64,
            ports,
            host: None,
            copied: Vec::new(),
        }
    }
}

/// Starts the destination and migrates; returns its pid, the source's
/// final `query-migrate` and the source's monitor.
fn run(
    dir: &VmDir,
    incoming: &Path,
    old_pid: u32,
    nics: &[MovingNic],
    made: &mut Made,
) -> Result<(u32, Value, Qmp)> {
    let sockets: Vec<(PathBuf, PathBuf)> = nics
        .iter()
        .map(|n| (n.old_socket.clone(), n.new_socket.clone()))
        .collect();
    let argv = destination_argv(&source_argv(old_pid)?, dir.path(), incoming, &sockets);
    // A port the switch listens on must exist before QEMU connects to it.
    for n in nics.iter().filter(|n| n.switch_listens) {
        made.ports.push((n.control.clone(), n.new_port.clone()));
        add_port(n)?;
    }
    let log_path = incoming.join("qemu.log");
    let new_pid = spawn_destination(&argv, &log_path, made)?;
    // A port that connects to QEMU: QEMU listens (and waits for it) now.
    for n in nics.iter().filter(|n| !n.switch_listens) {
        made.ports.push((n.control.clone(), n.new_port.clone()));
        add_port(n)?;
    }
    let with_log = |e: Error| with_qemu_log(e, &log_path);
    let child = made.child.as_mut().expect("spawned");
    let mut dst =
        wait_qmp(&incoming.join("qmp.sock"), child, Duration::from_secs(60)).map_err(with_log)?;
    let uri = format!("unix:{}", incoming.join("migrate.sock").display());
    dst.execute("migrate-incoming", Some(json!({ "uri": uri })))
        .map_err(with_log)?;
    let mut src = Qmp::connect(&dir.qmp())?;
    src.execute("migrate", Some(json!({ "uri": uri })))?;
    let stats = wait_migrated(&mut src, MIGRATION_TIMEOUT).map_err(with_log)?;
    wait_running(&mut dst, Duration::from_secs(30)).map_err(with_log)?;
    Ok((new_pid, stats, src))
}

/// After the switchover and the source's quit: the source gone, the
/// destination's files under the standard names, the state saved.
fn finish(
    dir: &VmDir,
    incoming: &Path,
    st: &mut State,
    old_pid: u32,
    new_pid: u32,
    nics: &[MovingNic],
) {
    wait_gone(dir, old_pid, Duration::from_secs(10));
    // The source removed its sockets on exit; the destination's take their names.
    if let Ok(entries) = std::fs::read_dir(incoming) {
        for e in entries.flatten() {
            let _ = std::fs::rename(e.path(), dir.path().join(e.file_name()));
        }
    }
    let _ = std::fs::remove_dir_all(incoming);
    let _ = std::fs::remove_file(dir.path().join("migrate.sock"));
    if let Ok(line) = source_argv(new_pid) {
        let _ = std::fs::write(dir.cmdline(), crate::plan::shell_line(&line) + "\n");
    }
    st.pid = Some(new_pid);
    // The destination's threads are not pinned: its vCPUs float.
    st.pinning = None;
    for n in nics {
        if let Backend::VhostUser { socket, .. } = &mut st.spec.nics[n.index].backend {
            *socket = n.new_socket.clone();
        }
        for o in &mut st.owned {
            if let Owned::Socket { path } = o {
                if *path == n.old_socket {
                    path.clone_from(&n.new_socket);
                }
            }
        }
        // The source's port is gone (nothing to put back); the new one is
        // the VM's: stop removes it.
        st.owned.retain(|o| {
            !matches!(o, Owned::SwitchPort { control, port, .. } | Owned::MadePort { control, port }
                if *control == n.control && *port == n.old_port)
        });
        st.owned.push(Owned::MadePort {
            control: n.control.clone(),
            port: n.new_port.clone(),
        });
    }
    st.notes.push(format!(
        "live-migrated from QEMU {old_pid} to QEMU {new_pid}"
    ));
    let _ = st.save(dir);
}

#[cfg(test)]
mod tests;
