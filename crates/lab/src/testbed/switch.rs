//! The vnio switch as the wire: its process, its ports (tap, vhost-user,
//! VXLAN toward other machines) and the hosts' places on it.

use super::*;
use crate::scenario::{HostKind, Knobs, PortPolicy};
use std::process::Stdio;
use std::time::{Duration, Instant};
use vnio_topo::Netns;

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
        use vnio_switch::config::{Config, PortSpec, SwitchConfig};
        use vnio_switch::port::SocketMode;

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
            // policy goes to the workloads' clients' ports, or the hosts
            // the knobs name (each takes a dedicated core; 2 vCPUs have
            // one to give).
            let client = policy_hosts.contains(&host.name.as_str());
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
            if host.kind != HostKind::Namespace {
                port.lro = knobs.lro;
            }
            port.share = knobs
                .egress_share
                .as_ref()
                .and_then(|m| m.get(&host.name).copied());
            port.offloads = knobs
                .port_offloads
                .as_ref()
                .and_then(|m| m.get(&host.name).copied());
            port.limit_mbps = knobs
                .egress_limit_mbit
                .as_ref()
                .and_then(|m| m.get(&host.name).copied());
            ports.push(port);
        }
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
            up.capacity_mbps = knobs.uplink_capacity_mbit;
            if knobs.port_policy == Some(PortPolicy::Direct) {
                // Queue 0 stays shared; a direct port takes one of its own.
                up.queues = Some(up.queues.unwrap_or(1).max(2));
            }
            // First: a direct port names its uplink, which must exist
            // when the port is added.
            ports.insert(0, up);
            self.outside_ns = Some(out);
            self.description.notes.push(format!(
                "switch uplink on a veth to the outside bridge, {} receive queue(s){}",
                knobs.uplink_queues.unwrap_or(1),
                knobs
                    .uplink_capacity_mbit
                    .map(|c| format!(", egress capacity {c} Mbit/s"))
                    .unwrap_or_default()
            ));
        }
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
}

/// `a = 1, b = 2` with a unit.
fn fmt_map<V: std::fmt::Display>(m: &std::collections::BTreeMap<String, V>, unit: &str) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}{unit}"))
        .collect::<Vec<_>>()
        .join(", ")
}
