//! The source's side of a migration to another machine (`vnio vm migrate
//! NAME --to HOST`): the local migration's steps with the destination's
//! run on HOST as `vnio vm incoming` ([`super::incoming`]) over SSH
//! (`vnio_topo::ssh`: the user's keys and configuration, no prompts) and
//! a TCP transport.
//!
//! 0. Unless `--insecure`, check that this host has the TLS client
//!    certificates ([`super::tls`]): refused before anything else if not.
//! 1. Probe HOST over SSH: the address it is reached at (the server
//!    address of `$SSH_CONNECTION`, so SSH aliases work), its
//!    architecture, and its directory for vnio's copy with the copy there
//!    ([`super::helper`]: a private directory, the copy named and checked
//!    by this `vnio`'s SHA-256); copy it there unless it is there already.
//! 2. Start `vnio vm incoming` there (the copy, hashed once more just
//!    before it runs) and send it the [`Incoming`] description; it answers
//!    `ready` with its QEMU's listening port (on ADDR only, TLS unless
//!    `--insecure`).
//! 3. QMP `migrate tcp:ADDR:PORT` here (with the TLS client credentials),
//!    `query-migrate` until it completes, then wait for `done` (the guest
//!    runs there and its state is saved).
//! 4. Retire the source as the local migration does: its switch ports
//!    removed, QEMU quit, and its state directory removed (the VM lives on
//!    HOST now).
//!
//! Before `done` nothing here changes: a failure ends the SSH session (the
//! far side then removes all it made) and the guest runs on here. If the
//! migration had completed, the source QEMU is resumed (`cont`) only when
//! the far side said it failed; a silently lost session leaves it paused
//! (the guest may run there).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vnio_topo::ssh::{quote, Ssh};

use super::helper::{self, Survey, Verdict};
use super::incoming::{send_uri, Done, Incoming, IncomingNic, Line, Ready};
use super::tls::{self, End};
use super::{
    del_port, running_pid, source_argv, switch_nics, wait_gone, wait_migrated, Migration, SwitchNic,
};
use crate::error::{Context, Error, Result};
use crate::qmp::Qmp;
use crate::state::{Owned, State, VmDir};

/// How long the destination may take to listen (QEMU's start included).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the destination may take to save the state once the guest ran.
const DONE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the guest goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// A new QEMU on this host.
    Local,
    /// A QEMU on another machine.
    Host(Box<Target>),
}

/// Another machine, reached with `ssh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The SSH destination: an alias, a host or `user@host`.
    pub dest: String,
    /// `ssh -F FILE`.
    pub ssh_config: Option<String>,
    /// `ssh -o OPT` options.
    pub ssh_options: Vec<String>,
    /// The VMs' state root there [default: its `vnio`'s].
    pub state_dir: Option<PathBuf>,
    /// Its switch's control socket [default: the same path as here].
    pub control: Option<PathBuf>,
    /// Its image cache, where the guest's image is copied if missing
    /// ([`super::remote_image`]) [default: the image at the same paths].
    pub cache: Option<PathBuf>,
    /// The directory for vnio's copy there [default: [`helper::BIN_DIR`]].
    pub bin_dir: Option<PathBuf>,
    /// How the stream travels.
    pub transport: Transport,
}

/// How the migration stream travels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// TLS with the certificates in `dir` here and `remote_dir` on HOST.
    Tls {
        /// This host's directory (client certificate).
        dir: PathBuf,
        /// HOST's directory (server certificate).
        remote_dir: PathBuf,
    },
    /// Plain TCP, unauthenticated (`--insecure`).
    Insecure,
}

/// Live-migrates VM `name` under `root` to `to`.
pub fn migrate(root: &Path, name: &str, to: &Where) -> Result<Migration> {
    match to {
        Where::Local => super::migrate(root, name),
        Where::Host(t) => to_host(root, name, t),
    }
}

/// What the probe of HOST found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// HOST's address as this machine reaches it.
    pub addr: IpAddr,
    /// Its architecture (`uname -m`).
    pub arch: String,
    /// Its directory for vnio's copy, and the copy.
    pub survey: Survey,
}

/// The probe's shell script: `$SSH_CONNECTION`, `uname -m`, then the
/// survey of `dir` and the copy `file` there ([`helper::survey_script`]).
pub fn probe_script(dir: &str, file: &str) -> String {
    format!(
        "echo $SSH_CONNECTION; uname -m; {}",
        helper::survey_script(dir, file)
    )
}

/// Reads the probe's answer.
pub fn parse_probe(out: &str) -> std::result::Result<Probe, String> {
    let mut lines = out.splitn(3, '\n');
    let (Some(conn), Some(arch), Some(rest)) = (lines.next(), lines.next(), lines.next()) else {
        return Err(format!("unexpected answer to the probe: {out:?}"));
    };
    let addr = conn
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("no $SSH_CONNECTION in the remote shell (got {conn:?})"))?;
    Ok(Probe {
        addr,
        arch: arch.trim().to_string(),
        survey: helper::parse_survey(rest)?,
    })
}

/// The command run on HOST: the copy `vnio` (if it still hashes to `hash`).
pub fn incoming_script(vnio: &str, hash: &str, state_dir: Option<&Path>) -> String {
    let dir = state_dir
        .map(|d| format!("--state-dir {} ", quote(&d.display().to_string())))
        .unwrap_or_default();
    helper::verified_exec(vnio, hash, &format!("vm {dir}incoming"))
}

/// The SSH session running `vnio vm incoming` on HOST.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    dest: String,
}

impl Session {
    fn start(ssh: &Ssh, script: &str, description: &Incoming) -> Result<Session> {
        let mut cmd = ssh.command(script);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .ctx(|| format!("{}: running ssh (is OpenSSH's client installed?)", ssh.dest))?;
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("piped");
        let keep = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = keep.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }
        });
        let mut s = Session {
            child,
            stdin: None,
            lines,
            stderr,
            dest: ssh.dest.clone(),
        };
        let mut stdin = s.child.stdin.take().expect("piped");
        let json = serde_json::to_string(description).expect("plain data serialises");
        stdin
            .write_all(format!("{json}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| s.failed(&format!("sending the description: {e}")))?;
        s.stdin = Some(stdin);
        Ok(s)
    }

    /// The next `ready`/`done` line within `limit`.
    fn next(&mut self, limit: Duration, what: &str) -> Result<Line> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => match Line::parse(&l) {
                    Line::Other(_) => continue,
                    line => return Ok(line),
                },
                Err(RecvTimeoutError::Timeout) => {
                    return Err(self.failed(&format!("no {what} within {} s", limit.as_secs())))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.failed(&format!("ended before {what}")))
                }
            }
        }
    }

    /// An error naming HOST and the far side's last line of error output.
    fn failed(&mut self, what: &str) -> Error {
        match self.far_line(Duration::from_secs(5)) {
            Some(l) => Error::Guest(format!("{}: {l}", self.dest)),
            None => Error::Guest(format!("{}: the destination {what}", self.dest)),
        }
    }

    /// An error this host's QEMU saw (`local`), with the far side's last
    /// line of error output if it wrote one.
    fn failed_here(&mut self, local: &str) -> Error {
        match self.far_line(Duration::from_secs(2)) {
            Some(l) => Error::Guest(format!("{}: {l} (here: {local})", self.dest)),
            None => Error::Guest(format!("{}: {local} (seen by this host's QEMU)", self.dest)),
        }
    }

    /// The far side's last line of error output, waiting up to `limit`
    /// for it (it arrives as the session ends).
    fn far_line(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            if !self.stderr.lock().map(|s| s.is_empty()).unwrap_or(true) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        let err = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let l = err.lines().rev().find(|l| !l.trim().is_empty())?.trim();
        Some(l.strip_prefix("vnio: error: ").unwrap_or(l).to_string())
    }

    /// Whether the far side reported its own failure (`vnio: error: ...`
    /// on its error output) rather than the session being lost.
    fn far_side_failed(&self) -> bool {
        self.stderr
            .lock()
            .map(|s| s.lines().any(|l| l.starts_with("vnio: error: ")))
            .unwrap_or(false)
    }

    /// Ends the session: the far side's input closes (before `done` it
    /// then removes what it made); waits for it to exit.
    fn end(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The SSH connection master's directory, removed (master ended) on drop.
struct Control {
    ssh: Ssh,
}

impl Drop for Control {
    fn drop(&mut self) {
        self.ssh.exit_master();
        let _ = std::fs::remove_dir_all(&self.ssh.control_dir);
    }
}

fn this_host() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.nodename().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "the source".into())
}

fn to_host(root: &Path, name: &str, t: &Target) -> Result<Migration> {
    crate::spec::check_name(name)?;
    let started = Instant::now();
    let dir = VmDir::new(root, name);
    let st = State::load(&dir)?;
    let old_pid = running_pid(&st, &dir, name)?;
    let nics = switch_nics(&st)?;
    let control = switch_control(name, t, &nics)?;
    let tls_dirs = match &t.transport {
        Transport::Tls { dir, remote_dir } => {
            tls::check_source(dir)?;
            Some((dir.clone(), remote_dir.clone()))
        }
        Transport::Insecure => None,
    };
    // Outside the VM's directory, which goes before the master ends; a
    // fresh private directory (mkdtemp), never one found in place.
    let control_dir = vnio_topo::ssh::control_dir(&format!("vnio-migrate-{}-", std::process::id()))
        .map_err(Error::Guest)?;
    let ssh = Control {
        ssh: Ssh::new(
            &t.dest,
            t.ssh_config.clone(),
            t.ssh_options.clone(),
            &control_dir,
        ),
    };
    let ssh = &ssh.ssh;
    let there = helper_there(ssh, t)?;
    let mut copied = there.copied;
    let argv = destination_argv(ssh, t, old_pid, &mut copied)?;
    let description = Incoming {
        name: name.to_string(),
        source: this_host(),
        argv,
        source_dir: dir.path().to_path_buf(),
        control,
        nics: nics.iter().map(incoming_nic).collect(),
        state: st.clone(),
        listen: there.probe.addr,
        tls: tls_dirs.as_ref().map(|(_, remote)| remote.clone()),
    };
    let script = incoming_script(&there.copy, &there.hash, t.state_dir.as_deref());
    let mut session = Session::start(ssh, &script, &description)?;
    let local_tls = tls_dirs.as_ref().map(|(here, _)| here.as_path());
    let (ready, stats, src, done) =
        match switch_over(&mut session, &dir, there.probe.addr, local_tls) {
            Ok(r) => r,
            Err(e) => {
                session.end();
                return Err(e);
            }
        };
    retire_source(&nics, session, src, &dir, old_pid, &st);
    let ports = nics
        .iter()
        .zip(&ready.ports)
        .map(|(n, new)| (n.port.name.clone(), new.clone()))
        .collect();
    Ok(Migration {
        host: Some(t.dest.clone()),
        copied,
        ..Migration::completed(name, (old_pid, done.pid), &stats, started, ports)
    })
}

/// The switch control socket on HOST: `--remote-control`, else the one
/// the first NIC's switch has here.
fn switch_control(name: &str, t: &Target, nics: &[SwitchNic]) -> Result<PathBuf> {
    match (&t.control, nics.first()) {
        (Some(c), _) => Ok(c.clone()),
        (None, Some(n)) => Ok(n.control.clone()),
        (None, None) => Err(Error::Invalid(format!(
            "VM {name} has no NIC: --to HOST moves guests on a vnio switch"
        ))),
    }
}

/// This vnio on HOST: what the probe found, and where its copy is.
struct HelperThere {
    probe: Probe,
    /// The copy's path on HOST.
    copy: String,
    /// This vnio's SHA-256, the copy's name and check.
    hash: String,
    /// What was copied to HOST (the copy, when it was not there).
    copied: Vec<String>,
}

/// Probes HOST (its address, architecture and directory for vnio's copy)
/// and copies this vnio there unless its verified copy is there already.
fn helper_there(ssh: &Ssh, t: &Target) -> Result<HelperThere> {
    let exe = std::env::current_exe().ctx(|| "finding this vnio".into())?;
    let hash = helper::sha256_file(&exe)?;
    let bin_dir = t
        .bin_dir
        .as_ref()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|| helper::BIN_DIR.to_string());
    let copy = helper::copy_path(&bin_dir, &hash);
    let probe = ssh
        .run(&probe_script(&bin_dir, &copy), "probing")
        .and_then(|out| parse_probe(&out).map_err(|e| format!("{}: {e}", t.dest)))
        .map_err(Error::Guest)?;
    if probe.arch != std::env::consts::ARCH {
        return Err(Error::Invalid(format!(
            "{} is {}, this vnio is built for {}",
            t.dest,
            probe.arch,
            std::env::consts::ARCH
        )));
    }
    let mut copied = Vec::new();
    let verdict = helper::judge(&bin_dir, &probe.survey, &hash)
        .map_err(|e| Error::Invalid(format!("{}: {e}", t.dest)))?;
    if verdict == Verdict::Install {
        ssh.install(&exe, &copy, "installing vnio")
            .map_err(Error::Guest)?;
        copied.push(copy.clone());
    }
    Ok(HelperThere {
        probe,
        copy,
        hash,
        copied,
    })
}

/// The destination QEMU's command line: the source's, booting from HOST's
/// cache (`--remote-cache`, the image carried there, its files added to
/// `copied`) when one is given.
fn destination_argv(
    ssh: &Ssh,
    t: &Target,
    old_pid: u32,
    copied: &mut Vec<String>,
) -> Result<Vec<String>> {
    let mut argv = source_argv(old_pid)?;
    if let Some(cache) = &t.cache {
        let (rebased, carried) = super::remote_image::carry(ssh, &argv, cache)?;
        argv = rebased;
        copied.extend(
            carried
                .copied
                .iter()
                .map(|f| carried.dir.join(f).display().to_string()),
        );
    }
    Ok(argv)
}

/// What HOST needs of a switch NIC to serve it.
fn incoming_nic(n: &SwitchNic) -> IncomingNic {
    IncomingNic {
        index: n.index,
        socket: n.socket.clone(),
        port: n.port.name.clone(),
        switch_listens: !n.server,
        latency: n.port.latency,
        queues: n.queues,
    }
}

/// The guest runs on HOST: the source retires as in a local migration,
/// its ports first (until they go, this switch sends the guest's frames
/// to the stopped source), then the session, QEMU and its state.
fn retire_source(
    nics: &[SwitchNic],
    session: Session,
    mut src: Qmp,
    dir: &VmDir,
    old_pid: u32,
    st: &State,
) {
    for n in nics {
        let _ = del_port(&n.control, &n.port.name);
    }
    session.end();
    let _ = src.quit();
    drop(src);
    wait_gone(dir, old_pid, Duration::from_secs(10));
    retire(dir, st);
}

/// `ready`, the migration, `done`; the source's final `query-migrate` and
/// monitor. After a completed migration without `done` the source resumes.
fn switch_over(
    session: &mut Session,
    dir: &VmDir,
    addr: IpAddr,
    tls_dir: Option<&Path>,
) -> Result<(Ready, Value, Qmp, Done)> {
    let ready = match session.next(READY_TIMEOUT, "ready line")? {
        Line::Ready(r) => r,
        other => return Err(session.failed(&format!("said {:?} before ready", other.render()))),
    };
    let mut src = Qmp::connect(&dir.qmp())?;
    if let Some(t) = tls_dir {
        // The destination's certificate must name the address sent to.
        if let Err(e) = tls::enable(&mut src, t, End::Client, Some(&addr.to_string())) {
            tls::disable(&mut src);
            return Err(Error::Invalid(format!(
                "this host's QEMU refused the TLS credentials in {}: {e}",
                t.display()
            )));
        }
    }
    let sent = (|| {
        src.execute(
            "migrate",
            Some(json!({ "uri": send_uri(addr, ready.port) })),
        )?;
        wait_migrated(&mut src, super::MIGRATION_TIMEOUT)
    })();
    let stats = match sent {
        Ok(s) => s,
        Err(e) => {
            // The guest runs on here: no TLS left for a later migration.
            if tls_dir.is_some() {
                tls::disable(&mut src);
            }
            return Err(session.failed_here(&e.to_string()));
        }
    };
    let e = match session.next(DONE_TIMEOUT, "done line") {
        Ok(Line::Done(d)) => return Ok((ready, stats, src, d)),
        Ok(other) => session.failed(&format!("said {:?} instead of done", other.render())),
        Err(e) => e,
    };
    // The guest is paused here for good unless resumed; resume it only if
    // the far side said it failed (and so removed its QEMU). A session
    // lost without a word may have left the guest running there: running
    // it here too would run it twice.
    if session.far_side_failed() {
        let _ = src.execute("cont", None);
        if tls_dir.is_some() {
            tls::disable(&mut src);
        }
        return Err(e);
    }
    Err(Error::Guest(format!(
        "{e}; the migration had completed, so the guest may run on {} (see vnio vm list there): this QEMU stays paused (vnio vm stop removes it)",
        session.dest
    )))
}

/// Removes the source's state: its sockets outside the directory, then the
/// directory (the VM's state lives on HOST now).
fn retire(dir: &VmDir, st: &State) {
    for o in &st.owned {
        if let Owned::Socket { path } = o {
            let _ = std::fs::remove_file(path);
        }
    }
    let _ = std::fs::remove_dir_all(dir.path());
}
