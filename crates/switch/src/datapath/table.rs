//! The port table: adding, finding, changing and removing ports, the one
//! path by which a port is reset, and what BGP EVPN says about a VXLAN
//! port in EVPN mode, applied between polling rounds: remote addresses
//! pinned in the FDB behind their VTEP, the port's flood list and the
//! VTEPs it hears (see [`crate::evpn`]).

use super::{Datapath, LroCtx, Port, PortRuntime, Slot};
use crate::config::Policies;
use crate::evpn::Change;
use crate::fdb::Fdb;
use crate::forward::PortPolicy;
use crate::lro::place::InPlace;
use crate::port::Watched;
use crate::stats::PortStats;
use crate::vlan::Tagging;
use crate::PortId;
use std::sync::Arc;
use std::time::Instant;

/// What breaks ports outside a frame's path, looked at once a round.
pub(super) struct Faults {
    /// The SIGBUS handler's epoch last seen ([`crate::sys::sigbus::epoch`]).
    sigbus_epoch: u64,
    /// A queue failed to signal its call eventfd this round.
    pub(super) call_failed: bool,
}

impl Faults {
    pub(super) fn new() -> Self {
        Self {
            sigbus_epoch: crate::sys::sigbus::epoch(),
            call_failed: false,
        }
    }

    /// Whether anything broke since the last look (one load of the
    /// handler's epoch and one flag); then, whether guest memory was lost.
    #[inline]
    fn take(&mut self) -> Option<bool> {
        let epoch = crate::sys::sigbus::epoch();
        let lost = epoch != self.sigbus_epoch;
        let failed = std::mem::take(&mut self.call_failed);
        if !lost && !failed {
            return None;
        }
        self.sigbus_epoch = epoch;
        Some(lost)
    }
}

impl Slot {
    /// A virtual NIC (vhost-user or tap), as opposed to an uplink.
    pub fn is_vnic(&self) -> bool {
        self.port.is_vnic()
    }
}

impl Datapath {
    /// Adds a port; returns its slot index.
    pub fn add(
        &mut self,
        id: PortId,
        name: String,
        policy: PortPolicy,
        policies: Policies,
        port: Port,
    ) -> usize {
        let mac = policy.mac;
        let mut slot = Slot {
            id,
            name,
            policy,
            port,
            stats: Arc::new(PortStats::default()),
            rt: PortRuntime::new(&policies),
            policies,
            mac,
            needs_mac: false,
            direct_to: None,
            routed: false,
        };
        slot.needs_mac = slot.is_vnic() && mac.is_none();
        if slot.port.vhost_user().is_some() {
            // Reserved once per port: aggregating never allocates.
            slot.rt.lro = Some(Box::new(LroCtx {
                agg: InPlace::new(),
                tagging: Tagging::Untagged,
                started: Instant::now(),
                last: Instant::now(),
            }));
        }
        self.attach(slot)
    }

    /// Takes in a port another worker detached; returns its slot index.
    pub fn attach(&mut self, slot: Slot) -> usize {
        self.topo_gen += 1;
        // A lent uplink queue is the uplink only for unicast frames: floods
        // to the wire still go through the uplink's own worker.
        if !slot.port.is_lent() {
            self.peers.forget_remote(slot.id);
        }
        // What was learned on it here came through another worker's ring.
        self.fdb.flush_port(slot.id);
        let idx = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        let pair = self.slots[idx]
            .as_ref()
            .and_then(|s| s.port.vhost_user())
            .is_some_and(|p| p.lent_pair().is_some());
        // A lent pair's port joined the uplinks' tables on its owner.
        if !pair && !self.bind_direct(idx) {
            self.join_queues(idx);
        }
        self.bind_cross(idx);
        idx
    }

    /// Records the MAC learned on vNIC slot `i`; its uplink queues follow it.
    #[cold]
    pub(super) fn learn_mac(&mut self, i: usize, mac: crate::wire::EthernetAddress) {
        let Some(s) = self.slots[i].as_mut() else {
            return;
        };
        s.needs_mac = false;
        s.mac = Some(mac);
        let id = s.id;
        for s in self.slots.iter_mut().flatten() {
            if let Some(u) = s.port.uplink_mut() {
                u.update_queues(|t| t.set_mac(id, mac));
            }
        }
    }

    /// Removes the port in slot `idx`, forgetting its addresses.
    pub fn remove(&mut self, idx: usize) -> Option<Slot> {
        self.scratch.copies.release();
        // The aggregate's chains go back with a delivery, not with the port.
        self.lro_deliver(idx, Instant::now());
        self.topo_gen += 1;
        self.unbind_cross(idx);
        let s = self.slots.get_mut(idx)?.take()?;
        self.fdb.flush_port(s.id);
        for u in self.slots.iter_mut().flatten() {
            if let Some(sched) = u.port.sched_mut() {
                sched.remove(s.id);
            }
            if let Some(u) = u.port.uplink_mut() {
                u.update_queues(|t| t.leave(s.id));
                for q in 0..u.queue_count() {
                    if let Some(rx) = u.queue_mut(q).filter(|rx| rx.direct == Some(s.id)) {
                        rx.direct = None;
                    }
                }
            }
        }
        Some(s)
    }

    /// The slot index of the port named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.name == name))
    }

    /// The port in slot `idx`.
    pub fn slot(&self, idx: usize) -> Option<&Slot> {
        self.slots.get(idx)?.as_ref()
    }

    /// The port in slot `idx`, mutable.
    pub fn slot_mut(&mut self, idx: usize) -> Option<&mut Slot> {
        self.slots.get_mut(idx)?.as_mut()
    }

    /// All ports with their slot indexes.
    pub fn slots(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// Whether every uplink with a known capacity can also reserve
    /// `extra_bps` for a port (other than `except`).
    pub fn check_reservation(&self, extra_bps: u64, except: Option<PortId>) -> Result<(), String> {
        if extra_bps == 0 {
            return Ok(());
        }
        let reserved: u64 = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.is_vnic() && Some(s.id) != except)
            .filter_map(|s| s.policy.egress.reserve_bps)
            .sum();
        for s in self.slots.iter().flatten() {
            if let Some(sched) = s.port.sched() {
                if let Some(cap) = sched.capacity_bps() {
                    if reserved + extra_bps > cap {
                        return Err(format!(
                            "port {}: reservations would total {} Mbit/s, over its capacity of {} Mbit/s",
                            s.name,
                            (reserved + extra_bps) / 1_000_000,
                            cap / 1_000_000
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Changes a vNIC's egress policy (share, limit, reservation) on every
    /// uplink and VXLAN port.
    pub fn set_egress(&mut self, idx: usize, e: crate::egress::EgressPolicy) {
        self.topo_gen += 1;
        let Some(s) = self.slot_mut(idx) else { return };
        s.policy.egress = e;
        let id = s.id;
        for s in self.slots.iter_mut().flatten() {
            if let Some(sched) = s.port.sched_mut() {
                sched.set_policy(id, e);
            }
        }
    }

    /// Changes how many addresses slot `idx` may have learned. A lower
    /// limit refuses new addresses at once; those learned stay until they
    /// age out.
    pub fn set_fdb_limit(&mut self, idx: usize, limit: u32) {
        // Remembered decisions hold a refusal (or not) under the old limit.
        self.topo_gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policy.fdb_limit = Some(limit);
        }
    }

    /// Changes slot `idx`'s latency policies.
    pub fn set_policies(&mut self, idx: usize, p: Policies) {
        self.topo_gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policies = p;
            s.rt.coalescer.set_policy(p.effective_coalesce());
        }
    }

    /// The FDB.
    pub fn fdb(&self) -> &Fdb {
        &self.fdb
    }

    /// Ages the FDB.
    pub fn age(&mut self, now: Instant) -> usize {
        self.fdb.age(now)
    }

    /// The descriptors slot `idx` wants watched.
    pub fn watched(&self, idx: usize, out: &mut Vec<Watched>) {
        if let Some(s) = self.slot(idx) {
            s.port.watched(out);
        }
    }

    /// True when slot `idx` has descriptors to close once the worker
    /// unwatched them ([`Datapath::release_retired`]).
    pub fn has_retired(&mut self, idx: usize) -> bool {
        self.slots
            .get_mut(idx)
            .and_then(Option::as_mut)
            .and_then(|s| s.port.vhost_user_mut())
            .is_some_and(|p| p.has_retired())
    }

    /// Closes slot `idx`'s retired descriptors (the worker unwatched them).
    pub fn release_retired(&mut self, idx: usize) {
        if let Some(p) = self.slot_mut(idx).and_then(|s| s.port.vhost_user_mut()) {
            p.release_retired();
        }
    }

    /// Resets a port after an error: counts it, says why once in the log,
    /// and restarts it (the one restart path).
    pub fn reset(&mut self, idx: usize, now: Instant, why: &dyn std::fmt::Display) {
        // Copies into or from its memory are made before it may go.
        self.scratch.copies.release();
        let Some(s) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        s.stats
            .resets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        log::warn!("port {}: reset: {why}", s.name);
        self.teller.tell(s, || crate::events::Kind::Reset {
            reason: crate::events::Text::display(why),
        });
        self.restart(idx, now);
    }

    /// The one way a port goes back to its initial state (after an error or
    /// a front-end that left): its front-end and device state dropped (the
    /// descriptors retired until unwatched), its run-time state restarted,
    /// its addresses forgotten here and in the other workers.
    pub(super) fn restart(&mut self, idx: usize, now: Instant) {
        self.scratch.copies.release();
        let Some(s) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        // Only a vhost-user port has a front-end to drop.
        if let Some(p) = s.port.vhost_user_mut() {
            p.reset(now);
            if p.lent_pair().is_some() {
                // Its owner resets the port once it has the pair back.
                self.held.broken.push(idx);
            }
        }
        s.rt.restart();
        let id = s.id;
        self.fdb.flush_port(id);
        self.peers.flush_port(id);
        self.mark_dirty(idx);
    }

    /// Resets the ports whose guest memory vanished under the switch or
    /// whose call eventfd would have blocked. Cheap when nothing happened:
    /// one load of the SIGBUS handler's epoch and one flag a queue.
    pub(super) fn reset_broken(&mut self, now: Instant) {
        let Some(lost) = self.faults.take() else {
            return;
        };
        for i in 0..self.slots.len() {
            let Some(p) = self.slots[i].as_mut().and_then(|s| s.port.vhost_user_mut()) else {
                continue;
            };
            if lost && p.device.memory_lost() {
                self.reset(
                    i,
                    now,
                    &"guest memory or the dirty log vanished under the switch (a file was truncated); the switch read zeros there",
                );
            } else if let Some((q, e)) = p.device.take_call_failure() {
                self.reset(
                    i,
                    now,
                    &format_args!("queue {q}: cannot signal the call eventfd: {e}"),
                );
            }
        }
    }

    pub(super) fn mark_dirty(&mut self, idx: usize) {
        if !self.dirty.contains(&idx) {
            self.dirty.push(idx);
        }
    }

    /// Takes the slots whose watched descriptors changed since the last call.
    pub fn take_dirty(&mut self, out: &mut Vec<usize>) {
        out.append(&mut self.dirty);
    }

    /// Applies `changes` to the EVPN port `name`; false when this worker
    /// has no such port (it moved, or left).
    pub fn evpn(&mut self, name: &str, changes: &[Change], now: Instant) -> bool {
        let Some(i) = self.find(name) else {
            return false;
        };
        let Some(s) = self.slots[i].as_mut() else {
            return false;
        };
        let Port::Vxlan(vx) = &mut s.port else {
            return false;
        };
        // Remote frames arrive untagged: the port's own VLAN holds them.
        let Some(vid) = s.policy.vlan.ingress(None) else {
            return false;
        };
        let id = s.id;
        for c in changes {
            match c {
                Change::Pin { mac, vtep } => {
                    if !self.fdb.pin_remote(vid, *mac, id, *vtep, now) {
                        log::warn!(
                            "evpn {name}: the FDB is full, {mac} behind {vtep} is not installed"
                        );
                    }
                }
                Change::Unpin { mac, vtep } => {
                    self.fdb.unpin_remote(vid, *mac, id, *vtep);
                }
                Change::Vteps { flood, known } => {
                    vx.set_vteps(flood, known);
                    // Remembered flood decisions counted the old list.
                    self.topo_gen += 1;
                }
            }
        }
        true
    }
}
