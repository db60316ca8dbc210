//! The wires between hosts without a switch: a veth pair, a plain
//! interface of the machine, a Linux bridge, and the namespace outside.

use super::*;
use crate::scenario::HostKind;
use vnio_topo::Journal;
use vnio_topo::Netns;

impl Testbed {
    pub(super) fn wire_veth(&mut self) -> Result<(), BedError> {
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
    pub(super) fn wire_plain(&mut self) -> Result<(), BedError> {
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
    pub(super) fn start_machines(&mut self, ctx: &BedContext, octet: u8) -> Result<(), BedError> {
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

    pub(super) fn wire_bridge(&mut self, id: &str, journal: &Journal) -> Result<(), BedError> {
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
    pub(super) fn outside(
        &mut self,
        id: &str,
        journal: &Journal,
    ) -> Result<Option<Netns>, BedError> {
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
}
