//! The vnio switch as the wire: its process, its ports (tap, vhost-user,
//! VXLAN toward other machines) and the hosts' places on it.
//!
//! In steps: the hosts' ports and the notes on their knobs, the uplink to
//! the outside segment, the switch's own settings, its configuration file
//! and process, then each host's place (a tap moved into its namespace,
//! or a vhost-user socket with a poll-mode endpoint on it).

use super::*;
use crate::scenario::{HostKind, Knobs, PortPolicy};
use std::num::NonZeroUsize;
use std::process::Stdio;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, KindSpec, PortSpec, SwitchConfig, UplinkSpec};
use vnio_switch::port::SocketMode;
use vnio_topo::Netns;

/// What a host's port on the switch is built from.
struct PortKnobs<'a> {
    knobs: &'a Knobs,
    policy_hosts: &'a [&'a str],
    coalesce: Option<vnio_switch::coalesce::Coalesce>,
    octet: u8,
}

/// What placing the hosts on the running switch needs.
struct Placing<'a> {
    ctx: &'a BedContext,
    knobs: &'a Knobs,
    wire: &'a Netns,
    dir: &'a Path,
    log: &'a Path,
    octet: u8,
    clients: &'a [&'a str],
    paired: &'a [&'a str],
    overlay: bool,
    /// Attach through `vnio cni` (knob `attach = "cni"`): the testbed's id
    /// and the reference plugins' directory (host-local).
    cni: Option<(&'a str, &'static str)>,
}

impl Testbed {
    pub(super) fn wire_switch(
        &mut self,
        id: &str,
        octet: u8,
        ctx: &BedContext,
        knobs: &Knobs,
        clients: &[&str],
        paired: &[&str],
    ) -> Result<(), BedError> {
        let policy_hosts = knobs.policy_hosts(clients);
        let wire = Netns::create_with_journal(&format!("vnio-{id}-wire"), &ctx.journal)?;
        let dir = self.scratch.path().to_path_buf();
        let coalesce = match &knobs.coalesce {
            Some(text) => Some(
                text.parse::<vnio_switch::coalesce::Coalesce>()
                    .map_err(|e| setup("coalesce knob", e))?,
            ),
            None => None,
        };
        let pk = PortKnobs {
            knobs,
            policy_hosts: &policy_hosts,
            coalesce,
            octet,
        };
        let cni = match knobs.attach {
            Some(crate::scenario::Attach::Cni) => Some((id, super::cni::plugin_dir()?)),
            _ => None,
        };
        let mut ports: Vec<PortSpec> = (self.hosts.iter().enumerate())
            .filter(|(_, host)| !host.remote && host.machine.is_none() && cni.is_none())
            .map(|(i, host)| host_port(&pk, &dir, i, host))
            .collect();
        self.note_port_knobs(knobs);
        self.uplink(id, ctx, &wire, knobs, &mut ports)?;
        if let Some(span) = &self.span {
            ports.push(span.overlay_port(&wire)?);
        }
        if let Some(p) = knobs.port_policy {
            self.description.notes.push(format!(
                "switch port policy {} on the ports of {}",
                p.as_str(),
                policy_hosts.join(", ")
            ));
        }
        let config = Config {
            switch: self.switch_config(&dir, knobs),
            ports,
        };
        let log = dir.join("switch.log");
        let mut switch = self.start_switch(&wire, ctx, knobs, &config, &log)?;
        let placing = Placing {
            ctx,
            knobs,
            wire: &wire,
            dir: &dir,
            log: &log,
            octet,
            clients,
            paired,
            overlay: self.span.is_some(),
            cni,
        };
        let deadline = Instant::now() + READY;
        if cni.is_some() {
            wait_control(&placing, &mut switch, &config.switch.control, deadline)?;
            self.description.notes.push(
                "hosts attached by `vnio cni` (tap, vhost-user for poll-mode hosts; host-local IPAM)"
                    .into(),
            );
        }
        let mut handle = wire.handle()?;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.remote || host.machine.is_some() {
                continue;
            }
            place_host(&placing, &mut handle, &mut switch, deadline, i, host)?;
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

    /// The notes on the knobs the hosts' ports take.
    fn note_port_knobs(&mut self, knobs: &Knobs) {
        if let Some(lro) = knobs.lro {
            self.description.notes.push(format!(
                "switch LRO {} on the vhost-user ports",
                if lro { "on" } else { "off" }
            ));
        }
        for (what, map) in [
            (
                "egress shares",
                knobs.egress_share.as_ref().map(|m| fmt_map(m, "")),
            ),
            (
                "offloads",
                knobs.port_offloads.as_ref().map(|m| fmt_map(m, "")),
            ),
            (
                "egress limits",
                knobs
                    .egress_limit_mbit
                    .as_ref()
                    .map(|m| fmt_map(m, " Mbit/s")),
            ),
        ] {
            if let Some(text) = map {
                self.description
                    .notes
                    .push(format!("switch {what}: {text}"));
            }
        }
        if let Some(c) = &knobs.coalesce {
            self.description
                .notes
                .push(format!("switch ports coalesce = {c}"));
        }
    }

    /// Remote hosts: the outside segment, joined by a veth whose wire end
    /// `up0` is the switch's uplink port (AF_PACKET), created before the
    /// switch starts so the port can bind to it. First among `ports`: a
    /// direct port names its uplink, which must exist when the port is
    /// added.
    fn uplink(
        &mut self,
        id: &str,
        ctx: &BedContext,
        wire: &Netns,
        knobs: &Knobs,
        ports: &mut Vec<PortSpec>,
    ) -> Result<(), BedError> {
        let Some(out) = self.outside(id, &ctx.journal)? else {
            return Ok(());
        };
        let mut w = wire.handle()?;
        let _ = w.add_veth("up0", "up", Some(&out))?.keep();
        w.set_up("up0")?;
        let mut o = out.handle()?;
        o.set_controller("up", "br0")?;
        o.set_up("up")?;
        let mut keys = UplinkSpec::new("up0");
        if let Some(q) = knobs.uplink_queues.and_then(NonZeroUsize::new) {
            keys.queues = q;
        }
        keys.capacity_mbps = knobs.uplink_capacity_mbit;
        if knobs.port_policy == Some(PortPolicy::Direct) {
            // Queue 0 stays shared; a direct port takes one of its own.
            keys.queues = keys.queues.max(NonZeroUsize::MIN.saturating_add(1));
        }
        let queues = keys.queues;
        ports.insert(0, PortSpec::new(UPLINK_PORT, KindSpec::Uplink(keys)));
        self.outside_ns = Some(out);
        self.description.notes.push(format!(
            "switch uplink on a veth to the outside bridge, {} receive queue(s){}",
            queues,
            knobs
                .uplink_capacity_mbit
                .map(|c| format!(", egress capacity {c} Mbit/s"))
                .unwrap_or_default()
        ));
        Ok(())
    }

    /// The switch's own settings, from the knobs, with their notes.
    fn switch_config(&mut self, dir: &Path, knobs: &Knobs) -> SwitchConfig {
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
        if knobs.time_in_switch == Some(false) {
            switch_config.time_in_switch = false;
            self.description
                .notes
                .push("time in the switch not recorded".into());
        }
        if let Some(budget) = knobs.switch_budget {
            switch_config.budget = budget;
            self.description
                .notes
                .push(format!("switch budget {budget} frames per queue per round"));
        }
        if let Some(prio) = knobs.switch_rt_priority {
            switch_config.dedicated_rt_priority = Some(prio);
            self.description
                .notes
                .push(format!("dedicated switch workers under SCHED_FIFO {prio}"));
        }
        switch_config
    }

    /// `config` written to the scratch directory, and the switch started
    /// on it in the wire namespace, logging to `log`.
    fn start_switch(
        &mut self,
        wire: &Netns,
        ctx: &BedContext,
        knobs: &Knobs,
        config: &Config,
        log: &Path,
    ) -> Result<Process, BedError> {
        let path = self.scratch.path().join("switch.toml");
        let text =
            toml::to_string(config).map_err(|e| setup("writing the switch configuration", e))?;
        std::fs::write(&path, text).map_err(|e| setup(format!("writing {}", path.display()), e))?;
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
        spawn(&mut cmd, &ctx.journal, log)
    }
}

/// Host `i`'s port on the switch: a tap for a namespace, a vhost-user
/// socket (the switch its server) otherwise, with the knobs it takes.
fn host_port(pk: &PortKnobs, dir: &Path, i: usize, host: &BedHost) -> PortSpec {
    let knobs = pk.knobs;
    let mut port = match host.kind {
        HostKind::Namespace => PortSpec::tap(&format!("h{}", i + 1), &format!("t{}", i + 1)),
        _ => PortSpec::vhost_user(
            &format!("h{}", i + 1),
            dir.join(format!("h{}.sock", i + 1)),
            SocketMode::Server,
        ),
    };
    // The studies make the measured VM latency-sensitive: the policy goes
    // to the workloads' clients' ports, or the hosts the knobs name (each
    // takes a dedicated core; 2 vCPUs have one to give).
    let client = pk.policy_hosts.contains(&host.name.as_str());
    match knobs.port_policy {
        Some(PortPolicy::LatencyHigh) if client => {
            port.latency = vnio_switch::config::Latency::High;
        }
        // The studies' DirectPath: the client's vNIC bound to a queue of
        // the uplink (its MAC selects the queue), no switching on the way.
        // Validation keeps it to vhost-user ports and scenarios with an
        // uplink.
        Some(PortPolicy::Direct) if client && host.kind != HostKind::Namespace => {
            if let Some(v) = port.kind.vhost_user_mut() {
                v.direct = Some(UPLINK_PORT.into());
            }
            port.mac = Some(host_mac(pk.octet, i));
        }
        _ => {}
    }
    port.coalesce = pk.coalesce;
    if host.kind != HostKind::Namespace {
        port.lro = knobs.lro;
    }
    port.egress.share = for_host(&knobs.egress_share, host);
    if let Some(on) = for_host(&knobs.port_offloads, host) {
        match &mut port.kind {
            KindSpec::VhostUser(v) => v.offloads = on,
            KindSpec::Tap(t) => t.offloads = on,
            _ => {}
        }
    }
    port.egress.limit_mbps = for_host(&knobs.egress_limit_mbit, host);
    port
}

/// A per-host knob's value for `host`.
fn for_host<V: Copy>(
    m: &Option<std::collections::BTreeMap<String, V>>,
    host: &BedHost,
) -> Option<V> {
    m.as_ref().and_then(|m| m.get(&host.name).copied())
}

/// Host `i` on the running switch. The switch creates the taps in its own
/// (the wire) namespace; each is then moved into its host, where it gets
/// the host's address. A vhost-user host gets its socket, and a poll-mode
/// endpoint on it unless a workload drives it or a guest connects later.
fn place_host(
    p: &Placing,
    handle: &mut vnio_topo::Handle,
    switch: &mut Process,
    deadline: Instant,
    i: usize,
    host: &mut BedHost,
) -> Result<(), BedError> {
    if let Some((id, plugins)) = p.cni {
        return place_by_cni(p, id, plugins, i, host);
    }
    let tap = format!("t{}", i + 1);
    if host.kind == HostKind::Namespace {
        while handle.link(&tap)?.is_none() {
            if let Ok(Some(status)) = switch.child_mut().try_wait() {
                return Err(setup(
                    "starting the vnio switch",
                    format!("it exited ({status}): {}", log_tail(p.log)),
                ));
            }
            if Instant::now() > deadline {
                return Err(setup(
                    "starting the vnio switch",
                    format!("tap {tap} did not appear: {}", log_tail(p.log)),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let Some(ns) = &host.netns else {
            return Ok(());
        };
        handle.move_to(&tap, ns)?;
        if p.overlay {
            // Room for the overlay's 50 bytes of outer headers.
            ns.handle()?
                .set_mtu(&tap, crate::machine::side::OVERLAY_MTU)?;
        }
        return address(host, &tap);
    }
    place_vhost_user(p, i, host, p.dir.join(format!("h{}.sock", i + 1)))
}

/// A vhost-user host on its socket: a poll-mode endpoint on it unless a
/// workload drives it or a guest connects later.
fn place_vhost_user(
    p: &Placing,
    i: usize,
    host: &mut BedHost,
    sock: PathBuf,
) -> Result<(), BedError> {
    let mac = host_mac(p.octet, i);
    host.vhost_user = Some((sock.clone(), mac.clone()));
    // Guests connect once launched (start_guests).
    if p.clients.contains(&host.name.as_str())
        || p.paired.contains(&host.name.as_str())
        || host.kind == HostKind::Vm
    {
        return Ok(());
    }
    host.endpoint = Some(start_endpoint(p, host, &sock, &mac)?);
    Ok(())
}

/// Host `i` attached by `vnio cni` as a runtime attaches a pod: a tap in
/// a namespace host, a vhost-user socket for the others.
fn place_by_cni(
    p: &Placing,
    id: &str,
    plugins: &'static str,
    i: usize,
    host: &mut BedHost,
) -> Result<(), BedError> {
    let data = p.dir.join("cni");
    let mut conf = serde_json::json!({
        "cniVersion": "1.1.0",
        "name": format!("lab-{id}"),
        "type": "vnio-cni",
        "control": p.dir.join("switch.sock"),
        "dataDir": data.join("records"),
        "ipam": super::cni::ipam(host.addr, &data.join("ipam")),
    });
    let vhost_user = host.kind != HostKind::Namespace;
    if vhost_user {
        conf["kind"] = "vhost-user".into();
        conf["socketDir"] = data.join("pods").display().to_string().into();
        conf["mac"] = host_mac(p.octet, i).into();
    } else {
        conf["kind"] = "tap".into();
    }
    let mut plugin = std::process::Command::new(&p.ctx.vnio);
    plugin.arg("cni");
    let result = super::cni::add(super::cni::Call {
        plugin,
        container: &format!("{id}-{}", host.name),
        // A poll-mode host has no namespace of its own; its endpoint runs
        // in the wire's, which stands in for its pod's (host-local wants one).
        netns: host.netns.as_ref().unwrap_or(p.wire).path(),
        cni_path: plugins,
        conf,
    })?;
    if !vhost_user {
        host.ifname = Some(super::cni::POD_IFNAME.into());
        return Ok(());
    }
    let sock = super::cni::socket_of(&result)
        .ok_or_else(|| setup(format!("host {}", host.name), "vnio cni gave no socketPath"))?;
    place_vhost_user(p, i, host, sock)
}

/// Waits until the switch answers on its control socket.
fn wait_control(
    p: &Placing,
    switch: &mut Process,
    control: &Path,
    deadline: Instant,
) -> Result<(), BedError> {
    while std::os::unix::net::UnixStream::connect(control).is_err() {
        if let Ok(Some(status)) = switch.child_mut().try_wait() {
            return Err(setup(
                "starting the vnio switch",
                format!("it exited ({status}): {}", log_tail(p.log)),
            ));
        }
        if Instant::now() > deadline {
            return Err(setup(
                "starting the vnio switch",
                format!("{} does not answer: {}", control.display(), log_tail(p.log)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A `vnio endpoint` on `host`'s vhost-user socket, up once it says so.
fn start_endpoint(
    p: &Placing,
    host: &BedHost,
    sock: &Path,
    mac: &str,
) -> Result<Process, BedError> {
    let log = p.dir.join(format!("endpoint-{}.log", host.name));
    let mut cmd = p.wire.command(&p.ctx.vnio);
    cmd.arg("endpoint")
        .arg(format!(
            "vhost-user:{},ip={},mac={mac}{}",
            sock.display(),
            host.addr,
            if p.knobs.poll_mode_wait == Some(true) {
                ",wait"
            } else {
                ""
            }
        ))
        .stdout(Stdio::null());
    let mut proc = spawn(&mut cmd, &p.ctx.journal, &log)?;
    // `vnio endpoint` says it is up on stderr once connected.
    wait_log(
        &mut proc,
        &format!("poll-mode endpoint {}", host.name),
        &log,
        "vnio endpoint: ",
    )?;
    Ok(proc)
}

/// `a = 1, b = 2` with a unit.
fn fmt_map<V: std::fmt::Display>(m: &std::collections::BTreeMap<String, V>, unit: &str) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}{unit}"))
        .collect::<Vec<_>>()
        .join(", ")
}
