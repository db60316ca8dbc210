//! The controller's half of a configuration that spans machines: connect
//! to every machine the configuration places hosts on, join the local
//! hosts (plain: a macvlan each) or the local switch (overlay: a VXLAN port
//! from a VTEP macvlan in the switch's namespace) to the physical network,
//! start each machine's far side, measure the clocks, and check that the
//! far agents answer across the wire.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{BedContext, BedError, BedHost, AGENT_PORT};
use crate::machine::remote::Remote;
use crate::machine::side::{self, SideHost, SideSpec, SideWire};
pub use crate::outcome::MachineDescription;
use crate::scenario::{HostKind, Scenario, WireKind};
use vnio_topo::{Handle, Journal, Netns};

/// Clock exchanges per machine (the shortest round trip is kept).
const CLOCK_EXCHANGES: u32 = 16;
/// How long a far agent may take to answer across the wire (ARP, learning).
const REACH: Duration = Duration::from_secs(15);
/// Prefix length of the VTEP subnet.
const VTEP_PREFIX: u8 = 24;

/// The machines of one configuration.
pub struct Span {
    remotes: Vec<Remote>,
    wire: WireKind,
    id: String,
    octet: u8,
    interface: String,
    binary: PathBuf,
    journal: Journal,
    /// What was used, in scenario order.
    pub machines: Vec<MachineDescription>,
    /// Notes for the testbed's description.
    pub notes: Vec<String>,
}

impl Span {
    /// Connect to the machines `cfg` places hosts on; None when it places
    /// none.
    pub fn connect(
        s: &Scenario,
        wire: WireKind,
        ctx: &BedContext,
        id: &str,
        octet: u8,
    ) -> Result<Option<Span>, BedError> {
        let mut names: Vec<&str> = Vec::new();
        for h in &s.hosts {
            if let Some(m) = h.machine.as_deref() {
                if !names.contains(&m) {
                    names.push(m);
                }
            }
        }
        if names.is_empty() {
            return Ok(None);
        }
        // The guests' static build runs on any Linux of this architecture;
        // without it, this binary (fine when the machines match this one).
        let binary = vnio_vm::image::find_guest_vnio(None).unwrap_or_else(|_| ctx.vnio.clone());
        let mut remotes = Vec::new();
        for name in names {
            let spec = s
                .machines
                .iter()
                .find(|m| m.name == name)
                .ok_or_else(|| fail(name, "not in the scenario's [[machine]] list"))?;
            remotes.push(Remote::connect(spec, id, &binary, &ctx.journal).map_err(across)?);
        }
        let local = remotes[0].probe.local;
        let interface = side::interface_with(local).map_err(|e| fail("this machine", e))?;
        Ok(Some(Span {
            remotes,
            wire,
            id: id.to_owned(),
            octet,
            interface,
            binary,
            journal: ctx.journal.clone(),
            machines: Vec::new(),
            notes: Vec::new(),
        }))
    }

    /// Plain wire: a macvlan of the physical interface moved into `host`.
    pub fn plain_local(&self, host: &BedHost, index: usize) -> Result<String, BedError> {
        let Some(ns) = host.netns() else {
            return Err(fail(
                &host.name,
                "a plain wire across machines joins namespaces",
            ));
        };
        let name = side::macvlan_name(&self.id, index);
        let mut root = Handle::root_with_journal(&self.journal)?;
        side::macvlan_into(&mut root, &self.journal, &name, &self.interface, ns)
            .map_err(|e| fail("this machine", e))?;
        Ok(name)
    }

    /// The VNI of this configuration's overlay.
    fn vni(&self) -> u32 {
        // Distinct per run and testbed on a shared physical network.
        ((std::process::id() << 8) | u32::from(self.octet)) & 0x00ff_ffff | 1
    }

    fn vtep(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 78, self.octet, k as u8 + 1)
    }

    /// Overlay: the local switch's VXLAN port, its VTEP a macvlan of the
    /// physical interface moved into the switch's namespace `wire`.
    pub fn overlay_port(&self, wire: &Netns) -> Result<vnio_switch::config::PortSpec, BedError> {
        let name = side::macvlan_name(&self.id, 9);
        let mut root = Handle::root_with_journal(&self.journal)?;
        side::macvlan_into(&mut root, &self.journal, &name, &self.interface, wire)
            .map_err(|e| fail("this machine", e))?;
        side::address(wire, &name, self.vtep(0), VTEP_PREFIX, None)
            .map_err(|e| fail("this machine", e))?;
        let remotes: Vec<Ipv4Addr> = (1..=self.remotes.len()).map(|k| self.vtep(k)).collect();
        Ok(vnio_switch::config::PortSpec::vxlan(
            "vx",
            self.vni(),
            self.vtep(0),
            &remotes,
        ))
    }

    /// Build every machine's far side for `hosts` (all of the testbed's,
    /// with their machines), then measure each machine's clock.
    pub fn start(
        &mut self,
        hosts: &[BedHost],
        macs: &dyn Fn(usize) -> String,
        ctx: &BedContext,
    ) -> Result<(), BedError> {
        let all: Vec<Ipv4Addr> = (0..=self.remotes.len()).map(|k| self.vtep(k)).collect();
        let vni = self.vni();
        for (k, remote) in self.remotes.iter_mut().enumerate() {
            let wire = match self.wire {
                WireKind::Switch => SideWire::Overlay {
                    vni,
                    vtep: all[k + 1],
                    prefix: VTEP_PREFIX,
                    remotes: all.iter().copied().filter(|a| *a != all[k + 1]).collect(),
                },
                _ => SideWire::Plain,
            };
            let spec = SideSpec {
                id: self.id.clone(),
                machine: remote.name.clone(),
                // Found there, from the SSH connection.
                interface: String::new(),
                wire,
                hosts: hosts
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.machine.as_deref() == Some(remote.name.as_str()))
                    .map(|(i, h)| SideHost {
                        name: h.name.clone(),
                        kind: h.kind,
                        addr: h.addr,
                        prefix: 24,
                        mac: macs(i),
                    })
                    .collect(),
            };
            let ready = remote.start(&spec, &ctx.journal).map_err(across)?;
            self.notes.extend(ready.notes.iter().cloned());
            let clock = remote.clock(CLOCK_EXCHANGES).map_err(across)?;
            self.machines.push(MachineDescription {
                name: remote.name.clone(),
                ssh: remote.ssh_dest().to_owned(),
                address: remote.probe.remote.to_string(),
                interface: ready.interface.clone(),
                local_address: remote.probe.local.to_string(),
                binary: self.binary.display().to_string(),
                clock: Some(clock),
            });
        }
        Ok(())
    }

    /// Wait until every far agent answers from `from` (a local namespace).
    pub fn reach(&self, from: &Netns, hosts: &[BedHost]) -> Result<(), BedError> {
        for h in hosts
            .iter()
            .filter(|h| h.machine.is_some() && h.kind == HostKind::Namespace)
        {
            let addr = SocketAddr::from((IpAddr::V4(h.addr), AGENT_PORT));
            let deadline = Instant::now() + REACH;
            loop {
                let up = from.run(move || {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
                })?;
                if up {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(fail(
                        &h.name,
                        format!("its agent at {addr} does not answer across the wire"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Tear every machine's side down and clean it.
    pub fn finish(self) -> Result<(), BedError> {
        let mut first = None;
        for r in self.remotes {
            if let Err(e) = r.finish() {
                first.get_or_insert(across(e));
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Span")
            .field("machines", &self.machines)
            .finish_non_exhaustive()
    }
}

/// A [`Remote`]'s error (it names its machine already).
fn across(detail: String) -> BedError {
    BedError::Setup {
        what: "across machines".into(),
        detail,
    }
}

fn fail(what: &str, why: impl std::fmt::Display) -> BedError {
    BedError::Setup {
        what: format!("machine {what}"),
        detail: why.to_string(),
    }
}
