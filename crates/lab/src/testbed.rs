//! One configuration of a scenario built for real: a namespace per host,
//! the wire joining them (veth, Linux bridge, or the vnio switch with tap
//! and vhost-user ports), knobs applied, a `vnio agent` in every namespace
//! host, a poll-mode endpoint process for every poll-mode host, and a QEMU
//! guest (with its own agent) for every VM host: on a vhost-user port of
//! the switch, or on a tap enslaved to the Linux bridge.
//!
//! Everything is journaled before (namespaces, scratch directory) or right
//! after (processes, QEMU) it exists, and dropping the [`Testbed`] removes
//! it all: guests first, then processes, then namespaces (which take their
//! interfaces along).

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::guest::{Guest, GuestKit, BOOT_TIMEOUT};
use crate::scenario::{Configuration, HostKind, Knobs, PortPolicy, Scenario, WireKind};
use vnio_topo::unique_id;
use vnio_topo::Netns;
use vnio_topo::Process;
use vnio_topo::{Entry, Journal, SCRATCH_PREFIX};
use vnio_topo::{Netem, RateLimit};

mod anchors;
pub use anchors::endpoints_listen;

/// Port every agent listens on.
pub const AGENT_PORT: u16 = 7700;
/// Prefix length of the testbed's subnet.
const PREFIX: u8 = 24;
/// How long a part may take to come up.
const READY: Duration = Duration::from_secs(10);
/// How long a booted guest's agent may take to answer over the wire (the
/// first frames wait for ARP, under TCG slowly).
const AGENT_REACH: Duration = Duration::from_secs(60);
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
    /// On another machine (built there, `crate::machine`).
    pub machine: Option<String>,
    /// Its IPv4 address.
    pub addr: Ipv4Addr,
    /// Its interface inside its namespace (namespace hosts).
    pub ifname: Option<String>,
    /// Poll-mode hosts: the switch port's vhost-user socket and the
    /// endpoint's MAC, for `vnio rr --via` when the host is a client.
    pub vhost_user: Option<(PathBuf, String)>,
    // The guest, then processes, then the namespace: fields drop in order,
    // and a namespace goes away only once nothing runs in it.
    guest: Option<Guest>,
    agent: Option<Process>,
    endpoint: Option<Process>,
    netns: Option<Netns>,
}

impl BedHost {
    /// The namespace (namespace hosts only).
    pub fn netns(&self) -> Option<&Netns> {
        self.netns.as_ref()
    }

    /// The agent's address (namespace and VM hosts).
    pub fn agent_addr(&self) -> SocketAddr {
        SocketAddr::from((self.addr, AGENT_PORT))
    }

    /// The guest (VM hosts only).
    pub fn guest(&self) -> Option<&Guest> {
        self.guest.as_ref()
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
    /// The other machines hosts were placed on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<crate::machine::span::MachineDescription>,
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
    /// The machine it is on (absent: this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Address.
    pub addr: Ipv4Addr,
    /// Interface in the namespace.
    pub ifname: Option<String>,
    /// VM hosts: the guest as launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<GuestDescription>,
}

/// A VM host as launched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestDescription {
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Its NIC on the host side (`vhost-user port hN`, `tap NAME on br0`).
    pub nic: String,
    /// Seconds from QEMU's start to the guest's agent listening.
    pub ready_s: f64,
}

/// A built configuration. Drop (or [`Testbed::teardown`]) removes it.
#[derive(Debug)]
pub struct Testbed {
    // First: the other machines' sides go before anything here.
    span: Option<crate::machine::span::Span>,
    hosts: Vec<BedHost>,
    switch: Option<Process>,
    /// OVS-DPDK or testpmd (anchor wires), with its hugepages.
    anchor: Option<crate::anchor_switch::AnchorSwitch>,
    /// The CPU shield around the switch's CPUs (knob `shield`).
    shield: Option<vnio_topo::Shield>,
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
    /// Image and accelerator for VM hosts (None: VM hosts are refused).
    pub guests: Option<GuestKit>,
    /// Set on Ctrl-C: a guest still booting is given up (and removed).
    pub stop: Arc<AtomicBool>,
}

impl Testbed {
    /// Build configuration `cfg` of `s`.
    pub fn build(s: &Scenario, cfg: &Configuration, ctx: &BedContext) -> Result<Testbed, BedError> {
        let knobs = s.knobs.layered(&cfg.knobs);
        let scratch = Scratch::create(&ctx.journal)?;
        let (id, n) = unique_id();
        let octet = (n % 256) as u8;
        let span = crate::machine::span::Span::connect(s, cfg.wire, ctx, &id, octet)?;
        let mut bed = Testbed {
            span,
            hosts: Vec::new(),
            switch: None,
            anchor: None,
            shield: None,
            wire_ns: None,
            outside_ns: None,
            scratch,
            description: BedDescription {
                configuration: cfg.name.clone(),
                wire: cfg.wire,
                knobs: knobs.clone(),
                hosts: Vec::new(),
                notes: Vec::new(),
                machines: Vec::new(),
            },
        };
        for (i, h) in s.hosts.iter().enumerate() {
            let kind = cfg.hosts.get(&h.name).copied().unwrap_or(h.kind);
            if kind == HostKind::Vm && ctx.guests.is_none() {
                return Err(setup(
                    format!("host {}", h.name),
                    "a VM host needs the guest image and QEMU, which this run did not prepare",
                ));
            }
            let netns = match kind {
                HostKind::Namespace if h.machine.is_none() => Some(Netns::create_with_journal(
                    &format!("vnio-{id}-h-{}", h.name),
                    &ctx.journal,
                )?),
                _ => None,
            };
            bed.hosts.push(BedHost {
                name: h.name.clone(),
                kind,
                remote: h.remote,
                machine: h.machine.clone(),
                // Hosts are numbered from 1 in scenario order.
                addr: Ipv4Addr::new(10, 77, octet, i as u8 + 1),
                ifname: None,
                vhost_user: None,
                guest: None,
                agent: None,
                endpoint: None,
                netns,
            });
        }
        if let Some(cpus) = &knobs.shield {
            // Before anything starts: what the runner starts from now on
            // stays in the root cpuset, everything else moves off `cpus`.
            let shield = vnio_topo::Shield::raise(cpus, &ctx.journal)?;
            bed.description.notes.push(format!(
                "CPUs {cpus:?} shielded: {} other tasks moved off them for the configuration",
                shield.moved()
            ));
            bed.shield = Some(shield);
        }
        match cfg.wire {
            WireKind::Veth if bed.span.is_some() => bed.wire_plain()?,
            WireKind::Veth => bed.wire_veth()?,
            WireKind::Bridge => bed.wire_bridge(&id, &ctx.journal)?,
            WireKind::Switch => {
                // A poll-mode host that is some workload's client is driven
                // by that workload's `vnio rr --via`; the others answer as
                // responders for the whole configuration.
                let clients: Vec<&str> = s.workloads.iter().map(|w| w.from.as_str()).collect();
                bed.wire_switch(&id, octet, ctx, &knobs, &clients, &paired(s, cfg))?
            }
            WireKind::OvsDpdk | WireKind::Testpmd => {
                bed.wire_anchor(cfg.wire, octet, ctx, &knobs)?
            }
        }
        bed.apply_knobs(&knobs)?;
        bed.start_agents(ctx)?;
        bed.start_machines(ctx, octet)?;
        let guests = bed.start_guests(ctx, cfg.wire, octet)?;
        bed.description.hosts = bed
            .hosts
            .iter()
            .map(|h| HostDescription {
                name: h.name.clone(),
                kind: h.kind,
                netns: h.netns.as_ref().map(|n| n.name().to_owned()),
                machine: h.machine.clone(),
                addr: h.addr,
                ifname: h.ifname.clone(),
                guest: guests
                    .iter()
                    .find(|(n, _)| *n == h.name)
                    .map(|(_, g)| g.clone()),
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
        if let Some(span) = self.span.take() {
            if let Err(e) = span.finish() {
                first = Some(e);
            }
        }
        // Guests first: QEMU is stopped before the switch it is plugged into.
        for h in &mut self.hosts {
            drop(h.guest.take());
        }
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
        drop(self.anchor.take());
        drop(self.shield.take());
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

    /// Hosts on other machines, on a plain wire: each local host's `eth0`
    /// is a macvlan of the physical interface (the far hosts get theirs
    /// from their machine's side).
    fn wire_plain(&mut self) -> Result<(), BedError> {
        let Some(span) = &self.span else {
            return Ok(());
        };
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.machine.is_some() {
                continue;
            }
            let name = span.plain_local(host, i)?;
            address(host, &name)?;
        }
        self.description
            .notes
            .push("plain wire: every host on a macvlan of its machine's interface".into());
        Ok(())
    }

    /// Build the other machines' sides, measure their clocks, and wait
    /// until their agents answer across the wire.
    fn start_machines(&mut self, ctx: &BedContext, octet: u8) -> Result<(), BedError> {
        let Some(mut span) = self.span.take() else {
            return Ok(());
        };
        let started = span.start(&self.hosts, &|i| host_mac(octet, i), ctx);
        let from = self.hosts.iter().find_map(|h| h.netns());
        let reached = match (&started, from) {
            (Ok(()), Some(ns)) => span.reach(ns, &self.hosts),
            _ => Ok(()),
        };
        self.description.notes.append(&mut span.notes);
        self.description.machines = span.machines.clone();
        self.span = Some(span);
        started.and(reached)
    }

    fn wire_bridge(&mut self, id: &str, journal: &Journal) -> Result<(), BedError> {
        let wire = Netns::create_with_journal(&format!("vnio-{id}-wire"), journal)?;
        let mut sw = wire.handle()?;
        let _ = sw.add_bridge("br0")?.keep();
        sw.set_up("br0")?;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            // Guests join with their tap once launched (start_guests).
            if host.remote || host.kind == HostKind::Vm {
                continue;
            }
            let Some(ns) = &host.netns else {
                return Err(setup(
                    format!("host {}", host.name),
                    "a bridge port needs a namespace or VM host",
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
        paired: &[&str],
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
            if host.remote || host.machine.is_some() {
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
            let client = clients.contains(&host.name.as_str());
            match knobs.port_policy {
                Some(PortPolicy::LatencyHigh) if client => {
                    port.latency = vnio_switch::config::Latency::High;
                }
                // The studies' DirectPath: the client's vNIC bound to a
                // queue of the uplink (its MAC selects the queue), no
                // switching on the way. Validation keeps it to vhost-user
                // ports and scenarios with an uplink.
                Some(PortPolicy::Direct) if client && host.kind != HostKind::Namespace => {
                    port.direct = Some(UPLINK_PORT.into());
                    port.mac = Some(host_mac(octet, i));
                }
                _ => {}
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
            let mut up = PortSpec::uplink(UPLINK_PORT, "up0");
            up.queues = knobs.uplink_queues;
            if knobs.port_policy == Some(PortPolicy::Direct) {
                // Queue 0 stays shared; a direct port takes one of its own.
                up.queues = Some(up.queues.unwrap_or(1).max(2));
            }
            // First: a direct port names its uplink, which must exist
            // when the port is added.
            ports.insert(0, up);
            self.outside_ns = Some(out);
            self.description.notes.push(format!(
                "switch uplink on a veth to the outside bridge, {} receive queue(s)",
                knobs.uplink_queues.unwrap_or(1)
            ));
        }
        if let Some(span) = &self.span {
            ports.push(span.overlay_port(&wire)?);
        }
        if let Some(p) = knobs.port_policy {
            self.description.notes.push(format!(
                "switch port policy {} on the clients' ports",
                p.as_str()
            ));
        }
        let mut switch_config = SwitchConfig {
            control: dir.join("switch.sock"),
            ..Default::default()
        };
        if knobs.switch_busy_poll == Some(true) {
            // Never sleep, as the DPDK switches' poll-mode threads.
            switch_config.idle_polls = u32::MAX;
            self.description
                .notes
                .push("switch workers busy-poll (idle_polls at its maximum)".into());
        }
        if let Some(prio) = knobs.switch_rt_priority {
            switch_config.dedicated_rt_priority = Some(prio);
            self.description
                .notes
                .push(format!("dedicated switch workers under SCHED_FIFO {prio}"));
        }
        let config = Config {
            switch: switch_config,
            ports,
        };
        let path = dir.join("switch.toml");
        let text =
            toml::to_string(&config).map_err(|e| setup("writing the switch configuration", e))?;
        std::fs::write(&path, text).map_err(|e| setup(format!("writing {}", path.display()), e))?;
        let log = dir.join("switch.log");
        let binary = knobs.switch_binary.as_ref().unwrap_or(&ctx.vnio);
        if let Some(b) = &knobs.switch_binary {
            self.description
                .notes
                .push(format!("switch run by {}", b.display()));
        }
        let mut cmd = wire.command(binary);
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
            if host.remote || host.machine.is_some() {
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
                    if self.span.is_some() {
                        // Room for the overlay's 50 bytes of outer headers.
                        ns.handle()?
                            .set_mtu(&tap, crate::machine::side::OVERLAY_MTU)?;
                    }
                    address(host, &tap)?;
                }
                _ => {
                    let sock = dir.join(format!("h{}.sock", i + 1));
                    let mac = host_mac(octet, i);
                    host.vhost_user = Some((sock.clone(), mac.clone()));
                    // Guests connect once launched (start_guests).
                    if clients.contains(&host.name.as_str())
                        || paired.contains(&host.name.as_str())
                        || host.kind == HostKind::Vm
                    {
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

    /// Launch a guest for every VM host, all at once (booting is most of
    /// the time: tens of seconds each under TCG), put its NIC on the wire,
    /// and wait until every guest's agent listens. Returns each guest's
    /// description by host name.
    fn start_guests(
        &mut self,
        ctx: &BedContext,
        wire: WireKind,
        octet: u8,
    ) -> Result<Vec<(String, GuestDescription)>, BedError> {
        if !self.hosts.iter().any(|h| h.kind == HostKind::Vm) {
            return Ok(Vec::new());
        }
        let Some(kit) = &ctx.guests else {
            return Err(setup(
                "VM hosts",
                "the guest image and QEMU were not prepared for this run",
            ));
        };
        let root = self.scratch.path().join("vm");
        let mut launched = Vec::new();
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.kind != HostKind::Vm {
                continue;
            }
            let what = format!("VM host {}", host.name);
            let mac = host_mac(octet, i);
            let (nic, place) = match wire {
                WireKind::Switch => {
                    let Some((sock, _)) = &host.vhost_user else {
                        return Err(setup(what, "no switch port was made for it"));
                    };
                    (
                        format!("vhost-user:{},mac={mac}", sock.display()),
                        format!("vhost-user port h{}", i + 1),
                    )
                }
                WireKind::Bridge => {
                    // QEMU creates the tap (in the root namespace, where
                    // the launcher runs); it moves to the bridge below.
                    let (tap_id, _) = unique_id();
                    let tap = format!("vnio{tap_id}v");
                    (format!("tap:{tap},mac={mac}"), format!("tap {tap} on br0"))
                }
                WireKind::Veth | WireKind::OvsDpdk | WireKind::Testpmd => {
                    return Err(setup(what, "a VM host needs wire = bridge or switch"))
                }
            };
            let nic = format!("{nic},ip={}/{PREFIX}", host.addr)
                .parse()
                .map_err(|e: String| setup(&what, e))?;
            let guest = Guest::launch(kit, &root, &host.name, nic, &ctx.journal, &ctx.stop)
                .map_err(|e| setup(&what, e))?;
            let tap = guest.host_ifname().map(str::to_owned);
            host.guest = Some(guest);
            if let (WireKind::Bridge, Some(tap), Some(wire_ns)) = (wire, tap, &self.wire_ns) {
                let mut root_ns = vnio_topo::Handle::root_with_journal(&ctx.journal)?;
                root_ns.move_to(&tap, wire_ns)?;
                let mut w = wire_ns.handle()?;
                w.set_controller(&tap, "br0")?;
                w.set_up(&tap)?;
            }
            launched.push((i, place));
        }
        let mut out = Vec::new();
        for (i, place) in launched {
            let host = &mut self.hosts[i];
            let Some(guest) = host.guest.as_mut() else {
                continue;
            };
            let ready = guest
                .wait_ready(BOOT_TIMEOUT, &ctx.stop)
                .map_err(|e| setup(format!("VM host {}", host.name), e))?;
            out.push((
                host.name.clone(),
                GuestDescription {
                    accel: guest.accel().to_string(),
                    nic: place,
                    ready_s: ready.as_secs_f64(),
                },
            ));
        }
        // The agents answer over the wire, seen from a namespace host on it
        // (guests on their own are checked by their first workload).
        if let Some(ns) = self
            .hosts
            .iter()
            .find(|h| !h.remote && h.netns.is_some())
            .and_then(|h| h.netns.as_ref())
        {
            for host in self.hosts.iter().filter(|h| h.kind == HostKind::Vm) {
                let addr = host.agent_addr();
                let stop = ctx.stop.clone();
                let reached = ns.run(move || {
                    let deadline = Instant::now() + AGENT_REACH;
                    while Instant::now() < deadline
                        && !stop.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                            return true;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    false
                })?;
                if !reached {
                    return Err(setup(
                        format!("VM host {}", host.name),
                        format!(
                            "its agent at {addr} does not answer from {} within {} s",
                            ns.name(),
                            AGENT_REACH.as_secs()
                        ),
                    ));
                }
            }
        }
        self.description.notes.push(format!(
            "guests: accel {} ({})",
            kit.accel().accel,
            kit.accel().why
        ));
        Ok(out)
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

/// Poll-mode hosts served by a poll-mode client's own thread (the far
/// endpoint of a pair: `vnio rr --via-echo`, the pair's rate receiver),
/// which therefore get no `vnio endpoint` process of their own.
fn paired<'a>(s: &'a Scenario, cfg: &Configuration) -> Vec<&'a str> {
    let poll = |h: &str| crate::scenario::kind_in(s, cfg, h) == HostKind::PollMode;
    s.workloads
        .iter()
        .filter(|w| poll(&w.from))
        .flat_map(|w| w.to.iter())
        .filter(|t| poll(t))
        .map(String::as_str)
        .collect()
}

/// The switch's uplink port (toward the remote hosts' outside bridge).
const UPLINK_PORT: &str = "up";

/// The MAC of host `i` (from 0) on a vhost-user port: poll-mode endpoints
/// and guests use it, and a direct port needs it to pick its uplink queue.
fn host_mac(octet: u8, i: usize) -> String {
    format!("52:54:00:77:{octet:02x}:{:02x}", i + 1)
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
