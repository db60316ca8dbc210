//! One configuration of a scenario built for real: a namespace per host,
//! the wire joining them (veth, Linux bridge, or the vnio switch with tap
//! and vhost-user ports), knobs applied, a `vnio agent` in every namespace
//! host and a poll-mode endpoint process for every poll-mode host.
//!
//! Everything is journaled before (namespaces, scratch directory) or right
//! after (processes) it exists, and dropping the [`Testbed`] removes it all:
//! processes first, then namespaces (which take their interfaces along).

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::scenario::{Configuration, HostKind, Knobs, PortPolicy, Scenario, WireKind};
use vnio_topo::unique_id;
use vnio_topo::Netns;
use vnio_topo::Process;
use vnio_topo::{Entry, Journal, SCRATCH_PREFIX};
use vnio_topo::{Netem, RateLimit};

/// Port every agent listens on.
pub const AGENT_PORT: u16 = 7700;
/// Prefix length of the testbed's subnet.
const PREFIX: u8 = 24;
/// How long a part may take to come up.
const READY: Duration = Duration::from_secs(10);
/// Where scratch directories go (sockets, the switch's configuration, logs).
pub const SCRATCH_ROOT: &str = "/run/vnio/lab";

/// Why a testbed could not be built. One line.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// A netlink, namespace or journal operation failed.
    #[error(transparent)]
    Topology(#[from] crate::Error),
    /// A process or part did not come up.
    #[error("{what}: {detail}")]
    Setup {
        /// What was being done.
        what: String,
        /// What went wrong.
        detail: String,
    },
}

fn setup(what: impl Into<String>, detail: impl std::fmt::Display) -> BedError {
    BedError::Setup {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// A scratch directory under [`SCRATCH_ROOT`], journaled, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    journal: Journal,
}

impl Scratch {
    /// Create `SCRATCH_ROOT/vnio-lab-ID`.
    pub fn create(journal: &Journal) -> Result<Scratch, BedError> {
        let (id, _) = unique_id();
        let path = Path::new(SCRATCH_ROOT).join(format!("{SCRATCH_PREFIX}{id}"));
        journal.record(&Entry::Dir(path.clone()))?;
        std::fs::create_dir_all(&path)
            .map_err(|e| setup(format!("creating {}", path.display()), e))?;
        Ok(Scratch {
            path,
            journal: journal.clone(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = self.journal.forget(&Entry::Dir(self.path.clone()));
    }
}

/// Start `cmd` as a journaled child in its own process group (so a Ctrl-C
/// at the terminal reaches only the runner, which then stops it in order),
/// stdin closed, stderr appended to `log`.
pub fn spawn(cmd: &mut Command, journal: &Journal, log: &Path) -> Result<Process, BedError> {
    let log_file = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| setup(format!("opening {}", log.display()), e))?;
    cmd.process_group(0).stdin(Stdio::null()).stderr(log_file);
    Ok(Process::spawn_with_journal(cmd, journal)?)
}

/// The last lines of a log, for error messages.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(2)..].join(" | ");
    if tail.is_empty() {
        "(no output)".into()
    } else {
        tail
    }
}

/// One endpoint as built.
#[derive(Debug)]
pub struct BedHost {
    /// Scenario name.
    pub name: String,
    /// What it is in this configuration.
    pub kind: HostKind,
    /// Behind the uplink.
    pub remote: bool,
    /// Its IPv4 address.
    pub addr: Ipv4Addr,
    /// Its interface inside its namespace (namespace hosts).
    pub ifname: Option<String>,
    /// Poll-mode hosts: the switch port's vhost-user socket and the
    /// endpoint's MAC, for `vnio rr --via` when the host is a client.
    pub vhost_user: Option<(PathBuf, String)>,
    // Processes before the namespace: fields drop in order, and a namespace
    // goes away only once nothing runs in it.
    agent: Option<Process>,
    endpoint: Option<Process>,
    netns: Option<Netns>,
}

impl BedHost {
    /// The namespace (namespace hosts only).
    pub fn netns(&self) -> Option<&Netns> {
        self.netns.as_ref()
    }

    /// The agent's address (namespace hosts only).
    pub fn agent_addr(&self) -> SocketAddr {
        SocketAddr::from((self.addr, AGENT_PORT))
    }
}

/// What was built, for the store and the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BedDescription {
    /// Configuration name.
    pub configuration: String,
    /// Wire kind.
    pub wire: WireKind,
    /// Knobs in force.
    pub knobs: Knobs,
    /// The hosts.
    pub hosts: Vec<HostDescription>,
    /// Notes on what was applied.
    pub notes: Vec<String>,
}

/// One host as built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostDescription {
    /// Scenario name.
    pub name: String,
    /// Kind in this configuration.
    pub kind: HostKind,
    /// Namespace name (namespace hosts).
    pub netns: Option<String>,
    /// Address.
    pub addr: Ipv4Addr,
    /// Interface in the namespace.
    pub ifname: Option<String>,
}

/// A built configuration. Drop (or [`Testbed::teardown`]) removes it.
#[derive(Debug)]
pub struct Testbed {
    hosts: Vec<BedHost>,
    switch: Option<Process>,
    wire_ns: Option<Netns>,
    outside_ns: Option<Netns>,
    scratch: Scratch,
    description: BedDescription,
}

/// What building needs besides the scenario.
#[derive(Debug, Clone)]
pub struct BedContext {
    /// The `vnio` binary (agents, switch, endpoints).
    pub vnio: PathBuf,
    /// Journal for everything created.
    pub journal: Journal,
}

impl Testbed {
    /// Build configuration `cfg` of `s`.
    pub fn build(s: &Scenario, cfg: &Configuration, ctx: &BedContext) -> Result<Testbed, BedError> {
        let knobs = s.knobs.layered(&cfg.knobs);
        if knobs.port_policy == Some(PortPolicy::Direct) {
            return Err(setup(
                format!("configuration {}", cfg.name),
                "port_policy \"direct\" is not supported by this build's vnio switch",
            ));
        }
        let scratch = Scratch::create(&ctx.journal)?;
        let (id, n) = unique_id();
        let octet = (n % 256) as u8;
        let mut bed = Testbed {
            hosts: Vec::new(),
            switch: None,
            wire_ns: None,
            outside_ns: None,
            scratch,
            description: BedDescription {
                configuration: cfg.name.clone(),
                wire: cfg.wire,
                knobs: knobs.clone(),
                hosts: Vec::new(),
                notes: Vec::new(),
            },
        };
        for (i, h) in s.hosts.iter().enumerate() {
            let kind = cfg.hosts.get(&h.name).copied().unwrap_or(h.kind);
            if kind == HostKind::Vm {
                return Err(setup(
                    format!("host {}", h.name),
                    "VM hosts are not built by the lab yet (vnio vm run exists; the lab does not launch guests)",
                ));
            }
            let netns = match kind {
                HostKind::Namespace => Some(Netns::create_with_journal(
                    &format!("vnio-{id}-h-{}", h.name),
                    &ctx.journal,
                )?),
                _ => None,
            };
            bed.hosts.push(BedHost {
                name: h.name.clone(),
                kind,
                remote: h.remote,
                // Hosts are numbered from 1 in scenario order.
                addr: Ipv4Addr::new(10, 77, octet, i as u8 + 1),
                ifname: None,
                vhost_user: None,
                agent: None,
                endpoint: None,
                netns,
            });
        }
        match cfg.wire {
            WireKind::Veth => bed.wire_veth()?,
            WireKind::Bridge => bed.wire_bridge(&id, &ctx.journal)?,
            WireKind::Switch => {
                // A poll-mode host that is some workload's client is driven
                // by that workload's `vnio rr --via`; the others answer as
                // responders for the whole configuration.
                let clients: Vec<&str> = s.workloads.iter().map(|w| w.from.as_str()).collect();
                bed.wire_switch(&id, octet, ctx, &knobs, &clients)?
            }
        }
        bed.apply_knobs(&knobs)?;
        bed.start_agents(ctx)?;
        bed.description.hosts = bed
            .hosts
            .iter()
            .map(|h| HostDescription {
                name: h.name.clone(),
                kind: h.kind,
                netns: h.netns.as_ref().map(|n| n.name().to_owned()),
                addr: h.addr,
                ifname: h.ifname.clone(),
            })
            .collect();
        Ok(bed)
    }

    /// The host called `name`.
    pub fn host(&self, name: &str) -> Option<&BedHost> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// What was built.
    pub fn description(&self) -> &BedDescription {
        &self.description
    }

    /// The scratch directory (logs of every process started).
    pub fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// Remove everything now, reporting the first failure.
    pub fn teardown(mut self) -> Result<(), BedError> {
        let mut first: Option<BedError> = None;
        for h in self.hosts.drain(..) {
            let BedHost {
                agent,
                endpoint,
                netns,
                ..
            } = h;
            for p in [agent, endpoint].into_iter().flatten() {
                if let Err(e) = p.kill() {
                    first.get_or_insert(e.into());
                }
            }
            if let Some(ns) = netns {
                if let Err(e) = ns.delete() {
                    first.get_or_insert(e.into());
                }
            }
        }
        if let Some(p) = self.switch.take() {
            if let Err(e) = p.kill() {
                first.get_or_insert(e.into());
            }
        }
        if let Some(ns) = self.outside_ns.take() {
            if let Err(e) = ns.delete() {
                first.get_or_insert(e.into());
            }
        }
        if let Some(ns) = self.wire_ns.take() {
            if let Err(e) = ns.delete() {
                first.get_or_insert(e.into());
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn wire_veth(&mut self) -> Result<(), BedError> {
        let [a, b] = &mut self.hosts[..] else {
            return Err(setup("veth wire", "needs exactly two hosts"));
        };
        let (Some(ns_a), Some(ns_b)) = (&a.netns, &b.netns) else {
            return Err(setup("veth wire", "both hosts must be namespaces"));
        };
        let mut h = ns_a.handle()?;
        // Created across the two namespaces: it never exists in the root one.
        let _ = h.add_veth("eth0", "eth0", Some(ns_b))?.keep();
        for host in [a, b] {
            address(host, "eth0")?;
        }
        Ok(())
    }

    fn wire_bridge(&mut self, id: &str, journal: &Journal) -> Result<(), BedError> {
        let wire = Netns::create_with_journal(&format!("vnio-{id}-wire"), journal)?;
        let mut sw = wire.handle()?;
        let _ = sw.add_bridge("br0")?.keep();
        sw.set_up("br0")?;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.remote {
                continue;
            }
            let Some(ns) = &host.netns else {
                return Err(setup(
                    format!("host {}", host.name),
                    "a bridge port needs a namespace host",
                ));
            };
            let port = format!("p{}", i + 1);
            let _ = sw.add_veth(&port, "eth0", Some(ns))?.keep();
            sw.set_controller(&port, "br0")?;
            sw.set_up(&port)?;
            address(host, "eth0")?;
        }
        if let Some(out) = self.outside(id, journal)? {
            // The uplink is one more bridge port.
            let _ = sw.add_veth("up", "up", Some(&out))?.keep();
            sw.set_controller("up", "br0")?;
            sw.set_up("up")?;
            let mut o = out.handle()?;
            o.set_controller("up", "br0")?;
            o.set_up("up")?;
            self.outside_ns = Some(out);
        }
        self.wire_ns = Some(wire);
        Ok(())
    }

    /// The outside segment for remote hosts, if any: a namespace with a
    /// Linux bridge `br0` (the physical network), a veth to each remote
    /// host. The caller joins it to the wire with the uplink veth `up`.
    fn outside(&mut self, id: &str, journal: &Journal) -> Result<Option<Netns>, BedError> {
        if !self.hosts.iter().any(|h| h.remote) {
            return Ok(None);
        }
        let out = Netns::create_with_journal(&format!("vnio-{id}-out"), journal)?;
        let mut o = out.handle()?;
        let _ = o.add_bridge("br0")?.keep();
        o.set_up("br0")?;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if !host.remote {
                continue;
            }
            let Some(ns) = &host.netns else {
                return Err(setup(
                    format!("host {}", host.name),
                    "a remote host needs a namespace",
                ));
            };
            let port = format!("p{}", i + 1);
            let _ = o.add_veth(&port, "eth0", Some(ns))?.keep();
            o.set_controller(&port, "br0")?;
            o.set_up(&port)?;
            address(host, "eth0")?;
        }
        self.description.notes.push(format!(
            "remote hosts on an outside bridge behind the uplink: {}",
            self.hosts
                .iter()
                .filter(|h| h.remote)
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        Ok(Some(out))
    }

    fn wire_switch(
        &mut self,
        id: &str,
        octet: u8,
        ctx: &BedContext,
        knobs: &Knobs,
        clients: &[&str],
    ) -> Result<(), BedError> {
        use vnio_switch::config::{Config, PortSpec, SwitchConfig};
        use vnio_switch::port::SocketMode;

        let wire = Netns::create_with_journal(&format!("vnio-{id}-wire"), &ctx.journal)?;
        let dir = self.scratch.path().to_path_buf();
        let coalesce = match &knobs.coalesce {
            Some(text) => Some(
                text.parse::<vnio_switch::coalesce::Coalesce>()
                    .map_err(|e| setup("coalesce knob", e))?,
            ),
            None => None,
        };
        let mut ports = Vec::new();
        for (i, host) in self.hosts.iter().enumerate() {
            if host.remote {
                continue;
            }
            let mut port = match host.kind {
                HostKind::Namespace => {
                    PortSpec::tap(&format!("h{}", i + 1), &format!("t{}", i + 1))
                }
                _ => PortSpec::vhost_user(
                    &format!("h{}", i + 1),
                    dir.join(format!("h{}.sock", i + 1)),
                    SocketMode::Server,
                ),
            };
            // The studies make the measured VM latency-sensitive: the
            // policy goes to the workloads' clients' ports (each takes a
            // dedicated core; 2 vCPUs have one to give).
            if knobs.port_policy == Some(PortPolicy::LatencyHigh)
                && clients.contains(&host.name.as_str())
            {
                port.latency = vnio_switch::config::Latency::High;
            }
            port.coalesce = coalesce;
            ports.push(port);
        }
        if let Some(c) = &knobs.coalesce {
            self.description
                .notes
                .push(format!("switch ports coalesce = {c}"));
        }
        // Remote hosts: the outside segment, joined by a veth whose wire end
        // `up0` is the switch's uplink port (AF_PACKET), created before the
        // switch starts so the port can bind to it.
        if let Some(out) = self.outside(id, &ctx.journal)? {
            let mut w = wire.handle()?;
            let _ = w.add_veth("up0", "up", Some(&out))?.keep();
            w.set_up("up0")?;
            let mut o = out.handle()?;
            o.set_controller("up", "br0")?;
            o.set_up("up")?;
            let mut up = PortSpec::uplink("up", "up0");
            up.queues = knobs.uplink_queues;
            ports.push(up);
            self.outside_ns = Some(out);
            self.description.notes.push(format!(
                "switch uplink on a veth to the outside bridge, {} receive queue(s)",
                knobs.uplink_queues.unwrap_or(1)
            ));
        }
        if let Some(p) = knobs.port_policy {
            self.description.notes.push(format!(
                "switch port policy {} on the clients' ports",
                p.as_str()
            ));
        }
        let config = Config {
            switch: SwitchConfig {
                control: dir.join("switch.sock"),
                ..Default::default()
            },
            ports,
        };
        let path = dir.join("switch.toml");
        let text =
            toml::to_string(&config).map_err(|e| setup("writing the switch configuration", e))?;
        std::fs::write(&path, text).map_err(|e| setup(format!("writing {}", path.display()), e))?;
        let log = dir.join("switch.log");
        let mut cmd = wire.command(&ctx.vnio);
        cmd.arg("switch")
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null());
        let mut switch = spawn(&mut cmd, &ctx.journal, &log)?;

        // The switch creates the taps in its own (the wire) namespace; each
        // is then moved into its host, where it gets the host's address.
        let mut handle = wire.handle()?;
        let deadline = Instant::now() + READY;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.remote {
                continue;
            }
            let tap = format!("t{}", i + 1);
            match host.kind {
                HostKind::Namespace => {
                    while handle.link(&tap)?.is_none() {
                        if let Ok(Some(status)) = switch.child_mut().try_wait() {
                            return Err(setup(
                                "starting the vnio switch",
                                format!("it exited ({status}): {}", log_tail(&log)),
                            ));
                        }
                        if Instant::now() > deadline {
                            return Err(setup(
                                "starting the vnio switch",
                                format!("tap {tap} did not appear: {}", log_tail(&log)),
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let Some(ns) = &host.netns else { continue };
                    handle.move_to(&tap, ns)?;
                    address(host, &tap)?;
                }
                _ => {
                    let sock = dir.join(format!("h{}.sock", i + 1));
                    let mac = format!("52:54:00:77:{octet:02x}:{:02x}", i + 1);
                    host.vhost_user = Some((sock.clone(), mac.clone()));
                    if clients.contains(&host.name.as_str()) {
                        continue;
                    }
                    let log = dir.join(format!("endpoint-{}.log", host.name));
                    let mut cmd = wire.command(&ctx.vnio);
                    cmd.arg("endpoint")
                        .arg(format!(
                            "vhost-user:{},ip={},mac={mac}{}",
                            sock.display(),
                            host.addr,
                            if knobs.poll_mode_wait == Some(true) {
                                ",wait"
                            } else {
                                ""
                            }
                        ))
                        .stdout(Stdio::null());
                    let mut p = spawn(&mut cmd, &ctx.journal, &log)?;
                    // `vnio endpoint` says it is up on stderr once connected.
                    wait_log(
                        &mut p,
                        &format!("poll-mode endpoint {}", host.name),
                        &log,
                        "vnio endpoint: ",
                    )?;
                    host.endpoint = Some(p);
                }
            }
        }
        if let Some(cpus) = &knobs.switch_cpus {
            pin_process(switch.id() as i32, cpus)
                .map_err(|e| setup("pinning the vnio switch", e))?;
            self.description
                .notes
                .push(format!("switch threads pinned to CPUs {cpus:?}"));
        }
        self.switch = Some(switch);
        self.wire_ns = Some(wire);
        Ok(())
    }

    fn apply_knobs(&mut self, knobs: &Knobs) -> Result<(), BedError> {
        for host in &self.hosts {
            let (Some(ns), Some(ifname)) = (&host.netns, &host.ifname) else {
                continue;
            };
            let mut h = ns.handle()?;
            if let Some(mbit) = knobs.rate_limit_mbit {
                h.set_rate_limit(ifname, RateLimit::hard(mbit * 1_000_000))?;
            }
            if let Some(us) = knobs.netem_delay_us {
                h.set_netem(
                    ifname,
                    &Netem {
                        delay: Duration::from_micros(us),
                        ..Default::default()
                    },
                )?;
            }
        }
        if let Some(mbit) = knobs.rate_limit_mbit {
            self.description
                .notes
                .push(format!("htb {mbit} Mbit/s on every host interface"));
        }
        if let Some(us) = knobs.netem_delay_us {
            self.description
                .notes
                .push(format!("netem +{us} us on every host interface"));
        }
        Ok(())
    }

    fn start_agents(&mut self, ctx: &BedContext) -> Result<(), BedError> {
        let dir = self.scratch.path().to_path_buf();
        for host in &mut self.hosts {
            let Some(ns) = &host.netns else { continue };
            let log = dir.join(format!("agent-{}.log", host.name));
            let mut cmd = ns.command(&ctx.vnio);
            cmd.args(["agent", "--listen", &host.agent_addr().to_string()])
                .stdout(Stdio::null());
            host.agent = Some(spawn(&mut cmd, &ctx.journal, &log)?);
        }
        // Probe each agent from inside its own namespace.
        for host in &mut self.hosts {
            let addr = host.agent_addr();
            let (Some(ns), Some(agent)) = (&host.netns, &mut host.agent) else {
                continue;
            };
            let deadline = Instant::now() + READY;
            loop {
                let up = ns.run(move || {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                })?;
                if up {
                    break;
                }
                let log = dir.join(format!("agent-{}.log", host.name));
                if let Ok(Some(status)) = agent.child_mut().try_wait() {
                    return Err(setup(
                        format!("starting the agent in {}", host.name),
                        format!("it exited ({status}): {}", log_tail(&log)),
                    ));
                }
                if Instant::now() > deadline {
                    return Err(setup(
                        format!("starting the agent in {}", host.name),
                        format!("no answer on {addr}: {}", log_tail(&log)),
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

/// Give `host` its address on `ifname` and bring it up.
fn address(host: &mut BedHost, ifname: &str) -> Result<(), BedError> {
    let Some(ns) = &host.netns else {
        return Ok(());
    };
    let mut h = ns.handle()?;
    h.add_address(ifname, host.addr.into(), PREFIX)?;
    h.set_up(ifname)?;
    host.ifname = Some(ifname.to_owned());
    Ok(())
}

/// Wait for a child to print its first line ("ready"): it has bound its
/// sockets or connected its port. Its stdout must be piped.
pub fn wait_ready(p: &mut Process, what: &str, log: &Path) -> Result<(), BedError> {
    use std::io::BufRead;
    let Some(stdout) = p.child_mut().stdout.take() else {
        return Err(setup(what, "stdout is not piped"));
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        let got = reader.read_line(&mut line).map(|_| line);
        let _ = tx.send((got, reader));
    });
    match rx.recv_timeout(READY) {
        Ok((Ok(line), reader)) if line.trim() == "ready" => {
            // Hand the rest of the output back to the child's owner.
            p.child_mut().stdout = Some(reader.into_inner());
            Ok(())
        }
        Ok((Ok(line), _)) if line.is_empty() => {
            Err(setup(what, format!("it exited: {}", log_tail(log))))
        }
        Ok((Ok(line), _)) => Err(setup(what, format!("unexpected output {:?}", line.trim()))),
        Ok((Err(e), _)) => Err(setup(what, e)),
        Err(_) => Err(setup(
            what,
            format!("not ready after {READY:?}: {}", log_tail(log)),
        )),
    }
}

/// Wait until a child's log (its stderr) contains `needle`.
pub fn wait_log(p: &mut Process, what: &str, log: &Path, needle: &str) -> Result<(), BedError> {
    let deadline = Instant::now() + READY;
    loop {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(needle)) {
            return Ok(());
        }
        if let Ok(Some(status)) = p.child_mut().try_wait() {
            return Err(setup(
                what,
                format!("it exited ({status}): {}", log_tail(log)),
            ));
        }
        if Instant::now() > deadline {
            return Err(setup(
                what,
                format!("not ready after {READY:?}: {}", log_tail(log)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pin every thread of process `pid` to `cpus`.
pub fn pin_process(pid: i32, cpus: &[usize]) -> Result<(), String> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| format!("CPU {c}: {e}"))?;
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
    for task in tasks.flatten() {
        if let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        {
            sched_setaffinity(Pid::from_raw(tid), &set)
                .map_err(|e| format!("thread {tid}: {e}"))?;
        }
    }
    Ok(())
}

/// Pin the calling thread (and the threads it starts afterwards) to `cpus`.
pub fn pin_self(cpus: &[usize]) -> Result<(), String> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| format!("CPU {c}: {e}"))?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("pinning to CPUs {cpus:?}: {e}"))
}
