//! What runs on a machine for one configuration (`vnio lab side`, started
//! by the controller over SSH): the machine's hosts as namespaces, joined
//! to the physical network by a macvlan each (a plain wire) or by tap and
//! vhost-user ports of a vnio switch whose VXLAN port reaches the other
//! machines' switches (the overlay); an agent in every namespace host and
//! a poll-mode endpoint for every poll-mode host.
//!
//! Everything is recorded in this machine's lab journal (the controller
//! points `VNIO_LAB_JOURNAL` into the run's scratch directory here) before
//! it is made, as the local lab does. The controller talks to it over the
//! SSH session's pipes, one line each way: `ready JSON` once built (or
//! `error MESSAGE`), then `clock` questions answered `clock NS` (see
//! [`super::clock`]); end of input means tear down.

use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::host::{log_tail, spawn, wait_log, AGENT_PORT};
use crate::scenario::HostKind;
use vnio_topo::{Entry, Handle, Journal, MacvlanMode, Netns, Process};

/// Inner MTU of hosts on the overlay: 1500 less the 50 bytes of outer
/// headers (the VXLAN port never fragments).
pub const OVERLAY_MTU: u32 = 1450;
/// How long a part may take to come up.
const READY: Duration = Duration::from_secs(10);

/// How this machine's hosts join the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SideWire {
    /// A macvlan of the physical interface in each host.
    Plain,
    /// A vnio switch with a VXLAN port.
    Overlay {
        /// The configuration's segment.
        vni: u32,
        /// This machine's VTEP address (on a macvlan in the switch's namespace).
        vtep: Ipv4Addr,
        /// The VTEP subnet's prefix length.
        prefix: u8,
        /// Every other machine's VTEP (the flood list).
        remotes: Vec<Ipv4Addr>,
    },
}

/// One host to build here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideHost {
    /// Scenario name.
    pub name: String,
    /// Namespace or poll-mode.
    pub kind: HostKind,
    /// Its address on the configuration's segment.
    pub addr: Ipv4Addr,
    /// The segment's prefix length.
    pub prefix: u8,
    /// MAC of a poll-mode endpoint.
    pub mac: String,
}

/// What the controller asks of this machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideSpec {
    /// The controller's testbed id (names here derive from it).
    pub id: String,
    /// This machine's name in the scenario.
    pub machine: String,
    /// The physical interface; empty: the one the SSH connection arrives
    /// on (`$SSH_CONNECTION`).
    #[serde(default)]
    pub interface: String,
    /// Plain or overlay.
    pub wire: SideWire,
    /// The hosts.
    pub hosts: Vec<SideHost>,
}

/// What was built, for the controller's description.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideReady {
    /// The physical interface used.
    pub interface: String,
    /// Notes on what was made.
    pub notes: Vec<String>,
}

/// Everything made here; dropped in order: processes, then namespaces.
struct Built {
    processes: Vec<Process>,
    namespaces: Vec<Netns>,
}

impl Drop for Built {
    fn drop(&mut self) {
        for p in self.processes.drain(..).rev() {
            let _ = p.kill();
        }
        for ns in self.namespaces.drain(..).rev() {
            let _ = ns.delete();
        }
    }
}

/// Run the far side: build, answer, tear down at end of input. `dir` is
/// the run's scratch directory here (the switch's files and the logs).
pub fn run(spec: &SideSpec, dir: &Path) -> Result<(), String> {
    let journal = Journal::default();
    let me = Entry::process(std::process::id() as i32);
    if let Some(me) = &me {
        journal.record(me).map_err(|e| e.to_string())?;
    }
    let mut out = std::io::stdout().lock();
    let result = build(spec, dir, &journal);
    let built = match result {
        Ok((built, ready)) => {
            let line = serde_json::to_string(&ready).map_err(|e| e.to_string())?;
            let _ = writeln!(out, "ready {line}").and_then(|()| out.flush());
            built
        }
        Err(e) => {
            let _ = writeln!(out, "error {e}").and_then(|()| out.flush());
            if let Some(me) = &me {
                let _ = journal.forget(me);
            }
            return Err(e);
        }
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "clock" {
            let now = super::clock::now_ns();
            if writeln!(out, "clock {now}")
                .and_then(|()| out.flush())
                .is_err()
            {
                break;
            }
        }
    }
    drop(built);
    if let Some(me) = &me {
        let _ = journal.forget(me);
    }
    Ok(())
}

fn build(spec: &SideSpec, dir: &Path, journal: &Journal) -> Result<(Built, SideReady), String> {
    let e = |e: vnio_topo::Error| e.to_string();
    let vnio = std::env::current_exe().map_err(|e| format!("finding vnio: {e}"))?;
    let mut built = Built {
        processes: Vec::new(),
        namespaces: Vec::new(),
    };
    let mut spec = spec.clone();
    if spec.interface.is_empty() {
        let conn = std::env::var("SSH_CONNECTION").unwrap_or_default();
        let server = conn
            .split_whitespace()
            .nth(2)
            .and_then(|a| a.parse::<IpAddr>().ok())
            .ok_or("no physical interface given and no $SSH_CONNECTION to find it")?;
        spec.interface = interface_with(server)?;
    }
    let spec = &spec;
    let mut ready = SideReady {
        interface: spec.interface.clone(),
        notes: Vec::new(),
    };
    let mut root = Handle::root_with_journal(journal).map_err(e)?;
    // One namespace per namespace host.
    let mut host_ns: Vec<Option<usize>> = Vec::new();
    for h in &spec.hosts {
        if h.kind == HostKind::Namespace {
            let name = format!("vnio-{}-{}-{}", spec.id, spec.machine, h.name);
            built
                .namespaces
                .push(Netns::create_with_journal(&name, journal).map_err(e)?);
            host_ns.push(Some(built.namespaces.len() - 1));
        } else {
            host_ns.push(None);
        }
    }
    match &spec.wire {
        SideWire::Plain => {
            for (i, h) in spec.hosts.iter().enumerate() {
                let Some(n) = host_ns[i] else {
                    return Err(format!("host {}: a plain wire joins namespaces", h.name));
                };
                let ns = &built.namespaces[n];
                let name = macvlan_name(&spec.id, i);
                macvlan_into(&mut root, journal, &name, &spec.interface, ns)?;
                address(ns, &name, h.addr, h.prefix, None)?;
            }
            ready.notes.push(format!(
                "{}: hosts on macvlans of {}",
                spec.machine, spec.interface
            ));
        }
        SideWire::Overlay {
            vni,
            vtep,
            prefix,
            remotes,
        } => {
            let wire = Netns::create_with_journal(
                &format!("vnio-{}-{}-wire", spec.id, spec.machine),
                journal,
            )
            .map_err(e)?;
            let vtep_if = macvlan_name(&spec.id, 9);
            macvlan_into(&mut root, journal, &vtep_if, &spec.interface, &wire)?;
            address(&wire, &vtep_if, *vtep, *prefix, None)?;
            built.namespaces.push(wire);
            let wire_at = built.namespaces.len() - 1;
            let switch = start_switch(spec, dir, journal, &vnio, wire_at, &host_ns, &mut built)?;
            built.processes.push(switch);
            ready.notes.push(format!(
                "{}: vnio switch, VXLAN VNI {vni} from {vtep} (macvlan of {}) to {}",
                spec.machine,
                spec.interface,
                remotes
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    // Agents.
    for (i, h) in spec.hosts.iter().enumerate() {
        let Some(n) = host_ns[i] else { continue };
        let ns = &built.namespaces[n];
        let addr = SocketAddr::from((h.addr, AGENT_PORT));
        let log = dir.join(format!("agent-{}.log", h.name));
        let mut cmd = ns.command(&vnio);
        cmd.args(["agent", "--listen", &addr.to_string()])
            .stdout(Stdio::null());
        let mut agent = spawn(&mut cmd, journal, &log).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + READY;
        loop {
            let up = ns
                .run(move || TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())
                .map_err(e)?;
            if up {
                break;
            }
            if agent.child_mut().try_wait().ok().flatten().is_some() || Instant::now() > deadline {
                return Err(format!("agent in {}: {}", h.name, log_tail(&log)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        built.processes.push(agent);
    }
    Ok((built, ready))
}

/// The switch in the wire namespace: a tap per namespace host (moved into
/// it), a vhost-user port and an endpoint per poll-mode host, the VXLAN port.
fn start_switch(
    spec: &SideSpec,
    dir: &Path,
    journal: &Journal,
    vnio: &Path,
    wire_at: usize,
    host_ns: &[Option<usize>],
    built: &mut Built,
) -> Result<Process, String> {
    use vnio_switch::config::{Config, PortSpec, SwitchConfig};
    use vnio_switch::port::SocketMode;
    let e = |e: vnio_topo::Error| e.to_string();
    let SideWire::Overlay {
        vni, vtep, remotes, ..
    } = &spec.wire
    else {
        return Err("not an overlay".into());
    };
    let mut ports = Vec::new();
    for (i, h) in spec.hosts.iter().enumerate() {
        ports.push(match h.kind {
            HostKind::Namespace => PortSpec::tap(&format!("h{}", i + 1), &format!("t{}", i + 1)),
            _ => PortSpec::vhost_user(&format!("h{}", i + 1), sock(dir, i), SocketMode::Server),
        });
    }
    ports.push(PortSpec::vxlan("vx", *vni, *vtep, remotes));
    let config = Config {
        switch: SwitchConfig {
            control: dir.join("switch.sock"),
            ..Default::default()
        },
        ports,
    };
    let path = dir.join("switch.toml");
    let text = toml::to_string(&config).map_err(|e| format!("switch configuration: {e}"))?;
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    let log = dir.join("switch.log");
    let mut cmd = built.namespaces[wire_at].command(vnio);
    cmd.arg("switch")
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null());
    let mut switch = spawn(&mut cmd, journal, &log).map_err(|e| e.to_string())?;
    let mut handle = built.namespaces[wire_at].handle().map_err(e)?;
    let deadline = Instant::now() + READY;
    for (i, h) in spec.hosts.iter().enumerate() {
        match host_ns[i] {
            Some(n) => {
                let tap = format!("t{}", i + 1);
                while handle.link(&tap).map_err(e)?.is_none() {
                    if switch.child_mut().try_wait().ok().flatten().is_some()
                        || Instant::now() > deadline
                    {
                        let _ = switch.kill();
                        return Err(format!("vnio switch: {}", log_tail(&log)));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                handle.move_to(&tap, &built.namespaces[n]).map_err(e)?;
                address(
                    &built.namespaces[n],
                    &tap,
                    h.addr,
                    h.prefix,
                    Some(OVERLAY_MTU),
                )?;
            }
            None => {
                let log = dir.join(format!("endpoint-{}.log", h.name));
                let mut cmd = built.namespaces[wire_at].command(vnio);
                cmd.arg("endpoint")
                    .arg(format!(
                        "vhost-user:{},ip={},mac={}",
                        sock(dir, i).display(),
                        h.addr,
                        h.mac
                    ))
                    .stdout(Stdio::null());
                let mut p = spawn(&mut cmd, journal, &log).map_err(|e| e.to_string())?;
                wait_log(
                    &mut p,
                    &format!("poll-mode endpoint {}", h.name),
                    &log,
                    "vnio endpoint: ",
                )
                .map_err(|e| e.to_string())?;
                built.processes.push(p);
            }
        }
    }
    Ok(switch)
}

fn sock(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("h{}.sock", i + 1))
}

/// Make macvlan `name` (bridge mode) of `parent` in `root`'s namespace
/// (journalled first) and move it into `ns`, whose deletion then takes it.
pub fn macvlan_into(
    root: &mut Handle,
    journal: &Journal,
    name: &str,
    parent: &str,
    ns: &Netns,
) -> Result<(), String> {
    let e = |e: vnio_topo::Error| e.to_string();
    let _ = root
        .add_macvlan(name, parent, MacvlanMode::Bridge)
        .map_err(e)?
        .keep();
    root.move_to(name, ns).map_err(e)?;
    let _ = journal.forget(&Entry::Link(name.to_owned()));
    Ok(())
}

/// A macvlan's name in the machine's own namespace (unique per testbed).
pub fn macvlan_name(id: &str, i: usize) -> String {
    format!("vnio{id}m{i}")
}

/// Address `ifname` in `ns`, bring it up, optionally set its MTU.
pub fn address(
    ns: &Netns,
    ifname: &str,
    addr: Ipv4Addr,
    prefix: u8,
    mtu: Option<u32>,
) -> Result<(), String> {
    let e = |e: vnio_topo::Error| e.to_string();
    let mut h = ns.handle().map_err(e)?;
    if let Some(mtu) = mtu {
        h.set_mtu(ifname, mtu).map_err(e)?;
    }
    h.add_address(ifname, IpAddr::V4(addr), prefix).map_err(e)?;
    h.set_up(ifname).map_err(e)?;
    h.set_up("lo").map_err(e)?;
    Ok(())
}

/// The interface of this namespace holding `addr` (the SSH connection's
/// end: the machine's interface on the network joining the machines).
pub fn interface_with(addr: IpAddr) -> Result<String, String> {
    let e = |e: vnio_topo::Error| e.to_string();
    let mut h = Handle::root().map_err(e)?;
    for link in h.links().map_err(e)? {
        if h.addresses(&link.name)
            .map_err(e)?
            .iter()
            .any(|c| c.addr == addr)
        {
            return Ok(link.name);
        }
    }
    Err(format!("no interface holds {addr}"))
}
