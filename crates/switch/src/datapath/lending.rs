//! Uplink receive queues given to vNICs: direct mode, and queues lent to
//! the worker of a latency-sensitive port.

use super::{Port, Slot, Table};
use crate::config::Policies;
use crate::forward::PortPolicy;
use crate::netqueue::QueueRequest;
use crate::port::uplink::UplinkPort;
use crate::PortId;

/// An uplink receive queue on its way to or from the worker of its owner.
#[derive(Debug)]
pub struct Lent {
    /// The uplink that lent it.
    pub uplink: PortId,
    /// Its name while held: the uplink's, then `:q` and its number.
    pub name: String,
    /// The uplink's forwarding policy (VLANs), which it keeps while held.
    pub policy: PortPolicy,
    /// The uplink's latency policies.
    pub policies: Policies,
    /// The queue with its own transmit sockets.
    pub port: UplinkPort,
}

impl Table {
    /// Whether a direct-mode port can be bound as its policy asks.
    pub fn check_direct(&self, policy: &PortPolicy) -> Result<(), String> {
        let Some(name) = &policy.direct else {
            return Ok(());
        };
        let Some(Slot {
            port: Port::Uplink(u),
            ..
        }) = self.find(name).and_then(|j| self.slot(j))
        else {
            return Err(format!("direct: no uplink port named {name}"));
        };
        if u.table().free_queue().is_none() {
            return Err(format!(
                "direct: uplink {name} has no receive queue to give (queues = {}, each held by a port that asked for it; raise `queues`)",
                u.queue_count()
            ));
        }
        Ok(())
    }

    /// Binds direct-mode slot `idx` to a receive queue of its uplink; false
    /// when the port is not in direct mode.
    pub(super) fn bind_direct(&mut self, idx: usize) -> bool {
        let Some(s) = self.slots[idx].as_ref() else {
            return false;
        };
        let Some(name) = s.policy.direct.clone() else {
            return false;
        };
        let (id, mac) = (s.id, s.mac);
        let Some(j) = self.find(&name) else {
            return true;
        };
        let Some(Slot {
            id: up_id,
            port: Port::Uplink(u),
            ..
        }) = self.slots[j].as_mut()
        else {
            return true;
        };
        let up_id = *up_id;
        let Some(q) = u.table().free_queue() else {
            return true;
        };
        u.update_queues(|t| t.join(id, QueueRequest::Index(q), mac).unwrap_or(false));
        if let Some(rx) = u.queue_mut(q) {
            rx.direct = Some(id);
        }
        if let Some(s) = self.slots[idx].as_mut() {
            s.direct_to = Some(up_id);
        }
        // The port leaves the switched ports: remembered decisions go.
        self.gen += 1;
        log::info!("port id {id}: direct on uplink {name}, receive queue {q}");
        true
    }

    /// Whether every uplink can give a new vNIC the receive queue it asks for.
    pub fn check_queue_request(&self, req: QueueRequest) -> Result<(), String> {
        for s in self.slots.iter().flatten() {
            if let Some(u) = s.port.uplink() {
                if u.lent().is_some() {
                    continue;
                }
                u.table()
                    .check(req)
                    .map_err(|e| format!("uplink {}: {e}", s.name))?;
            }
        }
        Ok(())
    }

    /// Lends vNIC `id`'s own receive queue on every uplink here to the
    /// worker it runs on (a latency-high port's, see [`UplinkPort::lend`]).
    /// The vNIC joins each uplink's table first (it is served elsewhere,
    /// so it did not join on arrival). Queues lent already are not lent
    /// again; a vNIC left on the shared queue gets nothing.
    pub fn lend_queues(
        &mut self,
        id: PortId,
        req: QueueRequest,
        mac: crate::wire::EthernetAddress,
    ) -> Vec<Lent> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            let Some(u) = s.port.uplink_mut() else {
                continue;
            };
            if u.lent().is_some() {
                continue;
            }
            u.update_queues(|t| match t.join(id, req, Some(mac)) {
                Ok(c) => c | t.set_mac(id, mac),
                Err(e) => {
                    log::warn!(
                        "uplink {}: port id {id} stays on the shared queue: {e}",
                        s.name
                    );
                    false
                }
            });
            let q = u.table().queue_of(id);
            if let Some(port) = u.lend(q) {
                log::info!(
                    "uplink {}: receive queue {q} lent to the worker of port id {id}",
                    s.name
                );
                // Its socket is no longer this worker's to watch.
                if !self.dirty.contains(&i) {
                    self.dirty.push(i);
                }
                out.push(Lent {
                    uplink: s.id,
                    name: format!("{}:q{q}", s.name),
                    policy: s.policy.clone(),
                    policies: s.policies,
                    port,
                });
            }
        }
        out
    }

    /// Takes back queues lent with [`Table::lend_queues`]; `leaving`: the
    /// vNIC they were lent for is gone (it leaves the tables too).
    pub fn restore(&mut self, lent: Vec<Lent>, leaving: Option<PortId>) {
        for l in lent {
            let at = self.slots.iter().position(|s| {
                s.as_ref()
                    .is_some_and(|s| s.id == l.uplink && s.port.uplink().is_some())
            });
            if let Some(i) = at {
                if let Some(u) = self.slots[i].as_mut().and_then(|s| s.port.uplink_mut()) {
                    u.take_back(l.port);
                }
                self.mark_dirty(i);
            }
        }
        if let Some(id) = leaving {
            for s in self.slots.iter_mut().flatten() {
                if let Some(u) = s.port.uplink_mut() {
                    u.update_queues(|t| t.leave(id));
                }
            }
        }
    }

    /// A new vNIC joins every uplink's queue table and every egress
    /// scheduler; a new uplink or VXLAN port takes in every vNIC, in the
    /// order they were added.
    pub(super) fn join_queues(&mut self, idx: usize) {
        let Some(new) = self.slots[idx].as_ref() else {
            return;
        };
        let members: Vec<_> = if new.is_vnic() {
            vec![(new.id, new.policy.uplink_queue, new.mac, new.policy.egress)]
        } else {
            self.slots
                .iter()
                .flatten()
                .filter(|s| s.is_vnic() && s.policy.direct.is_none())
                .map(|s| (s.id, s.policy.uplink_queue, s.mac, s.policy.egress))
                .collect()
        };
        let only = (!new.is_vnic()).then_some(idx);
        for (j, s) in self.slots.iter_mut().enumerate() {
            if let Some(Port::Vxlan(v)) = s.as_mut().map(|s| &mut s.port) {
                if only.map_or(true, |o| o == j) {
                    for &(id, _, _, egress) in &members {
                        v.sched.set_policy(id, egress);
                    }
                }
                continue;
            }
            let Some(Slot {
                port: Port::Uplink(u),
                name,
                ..
            }) = s
            else {
                continue;
            };
            if only.is_some_and(|o| o != j) {
                continue;
            }
            for &(id, _, _, egress) in &members {
                u.sched.set_policy(id, egress);
            }
            u.update_queues(|t| {
                let mut changed = false;
                for &(id, req, mac, _) in &members {
                    match t.join(id, req, mac) {
                        Ok(c) => changed |= c,
                        Err(e) => {
                            log::warn!("uplink {name}: port id {id} stays on the shared queue: {e}")
                        }
                    }
                }
                changed
            });
        }
    }
}
