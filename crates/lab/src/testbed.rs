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
//!
//! Here: building and tearing down a configuration; [`crate::host`]:
//! starting and watching its processes; `testbed/description.rs`: the
//! record of what was built; `testbed/rings.rs`: the virtqueue layout the
//! vnio switch serves.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guest::{Guest, GuestKit};
use crate::scenario::{Configuration, HostKind, Knobs, Scenario, WireKind};
use vnio_topo::unique_id;
use vnio_topo::Journal;
use vnio_topo::Netns;
use vnio_topo::Process;
use vnio_topo::{Netem, RateLimit};

mod anchors;
mod cni;
mod guests;
mod own_cpu;
pub mod pods;
pub mod program;
mod rings;
pub mod span;
mod switch;
mod wires;
pub use crate::host::{
    log_tail, pin_process, pin_self, spawn, wait_log, wait_or_interrupt, wait_ready, BedError,
    Scratch, AGENT_PORT, SCRATCH_ROOT,
};
use crate::host::{setup, READY};
pub use crate::outcome::{BedDescription, GuestDescription, HostDescription};
pub use anchors::endpoints_listen;
pub use own_cpu::{per_iteration, CpuSample};
pub use rings::{
    describe as describe_virtqueues, mismatch as virtqueue_mismatch, virtqueue_offered, Served,
    HUGE_MB,
};

/// Prefix length of the testbed's subnet.
const PREFIX: u8 = 24;
/// How long a booted guest's agent may take to answer over the wire (the
/// first frames wait for ARP, under TCG slowly).
const AGENT_REACH: Duration = Duration::from_secs(60);
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

/// A built configuration. Drop (or [`Testbed::teardown`]) removes it.
#[derive(Debug)]
pub struct Testbed {
    // First: the other machines' sides go before anything here.
    span: Option<span::Span>,
    hosts: Vec<BedHost>,
    switch: Option<Process>,
    /// OVS-DPDK or testpmd (anchor wires), with its hugepages.
    anchor: Option<crate::anchor_switch::AnchorSwitch>,
    /// The CPU shield around the switch's CPUs (knob `shield`).
    shield: Option<vnio_topo::Shield>,
    /// The kernel's hugepage pool raised for the poll-mode endpoints
    /// (knob `endpoint_hugepages`); the DPDK endpoints' hugetlbfs.
    endpoint_pages: Option<vnio_topo::Hugepages>,
    /// The DPDK endpoint program, built (knob `endpoints = "dpdk"`).
    dpdk_program: Option<PathBuf>,
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
        let span = span::Span::connect(s, cfg.wire, ctx, &id, octet)?;
        let mut bed = Testbed {
            span,
            hosts: Vec::new(),
            switch: None,
            anchor: None,
            shield: None,
            endpoint_pages: None,
            dpdk_program: None,
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
            bed.add_host(cfg, ctx, &id, octet, i, h)?;
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
        bed.prepare_endpoints(ctx, &knobs)?;
        bed.wire(s, cfg, ctx, &knobs, &id, octet)?;
        bed.apply_knobs(&knobs)?;
        bed.start_agents(ctx)?;
        bed.start_machines(ctx, octet)?;
        let guests = bed.start_guests(ctx, cfg.wire, octet)?;
        bed.describe_hosts(&guests);
        Ok(bed)
    }

    /// Host `i` of the scenario, `h`, as it is in `cfg`: its namespace
    /// (a namespace host on this machine) and its address.
    fn add_host(
        &mut self,
        cfg: &Configuration,
        ctx: &BedContext,
        id: &str,
        octet: u8,
        i: usize,
        h: &crate::scenario::HostSpec,
    ) -> Result<(), BedError> {
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
        self.hosts.push(BedHost {
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
        Ok(())
    }

    /// The DPDK endpoint program (knob `endpoints = "dpdk"`), built, and
    /// the endpoints' hugepages (knob `endpoint_hugepages`), reserved.
    fn prepare_endpoints(&mut self, ctx: &BedContext, knobs: &Knobs) -> Result<(), BedError> {
        let dpdk = knobs.endpoints == Some(crate::scenario::Endpoints::Dpdk);
        if dpdk {
            let program = program::build(None).map_err(|e| setup("the DPDK endpoints", e))?;
            self.description.notes.push(format!(
                "poll-mode pair driven by the lab's DPDK program {} (one lcore, 16384 mbufs{}, {})",
                program.display(),
                if knobs.endpoint_hugepages == Some(true) {
                    " on hugepages"
                } else {
                    ", no hugepages"
                },
                virtqueue_offered(knobs.virtqueue.unwrap_or_default())
            ));
            self.dpdk_program = Some(program);
        }
        if knobs.endpoint_hugepages == Some(true) {
            // The DPDK program's memory (and a page to spare); else a 2 MiB
            // page for each of the pair's endpoints, one to spare.
            let pages = if dpdk { HUGE_MB / 2 + 8 } else { 3 };
            let pages = vnio_topo::Hugepages::reserve(
                &self.scratch().join("endpoint-hugepages"),
                pages,
                &ctx.journal,
            )?;
            self.endpoint_pages = Some(pages);
        }
        Ok(())
    }

    /// The wire `cfg` names, joining the hosts.
    fn wire(
        &mut self,
        s: &Scenario,
        cfg: &Configuration,
        ctx: &BedContext,
        knobs: &Knobs,
        id: &str,
        octet: u8,
    ) -> Result<(), BedError> {
        match cfg.wire {
            WireKind::Veth if self.span.is_some() => self.wire_plain(),
            WireKind::Veth => self.wire_veth(),
            WireKind::Bridge if knobs.attach == Some(crate::scenario::Attach::Cni) => {
                self.wire_bridge_cni(id, &ctx.journal)
            }
            WireKind::Bridge => self.wire_bridge(id, &ctx.journal),
            WireKind::Switch => {
                // A poll-mode host that is some workload's client is driven
                // by that workload's `vnio rr --via`; the others answer as
                // responders for the whole configuration.
                let clients: Vec<&str> = s.workloads.iter().map(|w| w.from.as_str()).collect();
                self.wire_switch(id, octet, ctx, knobs, &clients, &paired(s, cfg))
            }
            WireKind::OvsDpdk | WireKind::Testpmd => self.wire_anchor(cfg.wire, octet, ctx, knobs),
        }
    }

    /// The hosts as built, into the description.
    fn describe_hosts(&mut self, guests: &[(String, GuestDescription)]) {
        self.description.hosts = self
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

    /// The run's journal.
    pub fn journal(&self) -> &Journal {
        self.scratch.journal()
    }

    /// vnio's switch's control socket while it runs as this bed's wire;
    /// none on other wires.
    pub fn switch_control(&self) -> Option<PathBuf> {
        let running = self.description.wire == WireKind::Switch && self.switch.is_some();
        running.then(|| self.scratch.path().join("switch.sock"))
    }

    /// The DPDK endpoint program (knob `endpoints = "dpdk"`).
    pub fn dpdk_program(&self) -> Option<&Path> {
        self.dpdk_program.as_deref()
    }

    /// The hugetlbfs of the poll-mode endpoints (knob `endpoint_hugepages`).
    pub fn endpoint_huge_dir(&self) -> Option<&Path> {
        self.endpoint_pages.as_ref().map(|p| p.dir())
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
