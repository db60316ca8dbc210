//! Adding, removing and resetting ports: the port table, the FDB, the
//! other workers and the events together, the one path by which a port is
//! reset; and what BGP EVPN says about a VXLAN port in EVPN mode, applied
//! between polling rounds: remote addresses pinned in the FDB behind their
//! VTEP, the port's flood list and the VTEPs it hears (see [`crate::evpn`]).

use super::{Datapath, Lent, LroCtx, Port, PortRuntime, Slot};
use crate::config::Policies;
use crate::evpn::Change;
use crate::fdb::Fdb;
use crate::forward::PortPolicy;
use crate::lro::place::InPlace;
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
        // A lent uplink queue is the uplink only for unicast frames: floods
        // to the wire still go through the uplink's own worker.
        if !slot.port.is_lent() {
            self.peers.forget_remote(slot.id);
        }
        // What was learned on it here came through another worker's ring.
        self.fdb.flush_port(slot.id);
        let t = &mut self.table;
        let idx = t.insert(slot);
        let pair = t.slots[idx]
            .as_ref()
            .and_then(|s| s.port.vhost_user())
            .is_some_and(|p| p.lent_pair().is_some());
        // A lent pair's port joined the uplinks' tables on its owner.
        if !pair && !t.bind_direct(idx) {
            t.join_queues(idx);
        }
        t.bind_cross(idx);
        idx
    }

    /// Removes the port in slot `idx`, forgetting its addresses.
    pub fn remove(&mut self, idx: usize) -> Option<Slot> {
        self.scratch.copies.release();
        // The aggregate's chains go back with a delivery, not with the port.
        self.lro_deliver(idx, Instant::now());
        self.table.gen += 1;
        self.table.unbind_cross(idx);
        let s = self.table.slots.get_mut(idx)?.take()?;
        self.fdb.flush_port(s.id);
        for u in self.table.slots.iter_mut().flatten() {
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

    /// The FDB.
    pub fn fdb(&self) -> &Fdb {
        &self.fdb
    }

    /// Ages the FDB.
    pub fn age(&mut self, now: Instant) -> usize {
        self.fdb.age(now)
    }

    /// Resets a port after an error: counts it, says why once in the log,
    /// and restarts it (the one restart path).
    pub fn reset(&mut self, idx: usize, now: Instant, why: &dyn std::fmt::Display) {
        // Copies into or from its memory are made before it may go.
        self.scratch.copies.release();
        let Some(s) = self.table.slots.get_mut(idx).and_then(Option::as_mut) else {
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
        let Some(s) = self.table.slots.get_mut(idx).and_then(Option::as_mut) else {
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
        self.table.mark_dirty(idx);
    }

    /// Resets the ports whose guest memory vanished under the switch or
    /// whose call eventfd would have blocked. Cheap when nothing happened:
    /// one load of the SIGBUS handler's epoch and one flag a queue.
    pub(super) fn reset_broken(&mut self, now: Instant) {
        let Some(lost) = self.faults.take() else {
            return;
        };
        for i in 0..self.table.slots.len() {
            let Some(p) = self.table.slots[i]
                .as_mut()
                .and_then(|s| s.port.vhost_user_mut())
            else {
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

    /// Applies `changes` to the EVPN port `name`; false when this worker
    /// has no such port (it moved, or left).
    pub fn evpn(&mut self, name: &str, changes: &[Change], now: Instant) -> bool {
        let Some(i) = self.table.find(name) else {
            return false;
        };
        let Some(s) = self.table.slots[i].as_mut() else {
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
                    self.table.gen += 1;
                }
            }
        }
        true
    }

    /// Takes in a queue another worker's uplink lent (its frames come
    /// straight to this worker's ports, and theirs leave through it).
    pub fn hold(&mut self, l: Lent) -> usize {
        let Lent {
            uplink,
            name,
            policy,
            policies,
            port,
        } = l;
        self.add(uplink, name, policy, policies, Port::Uplink(port))
    }

    /// Gives back the lent queues held here (of uplink `of` only, when set).
    pub fn release_lent(&mut self, of: Option<PortId>) -> Vec<Lent> {
        let mut out = Vec::new();
        for i in 0..self.table.slots.len() {
            let lent = self.table.slots[i]
                .as_ref()
                .is_some_and(|s| s.port.is_lent() && of.map_or(true, |u| u == s.id));
            if !lent {
                continue;
            }
            if let Some(s) = self.remove(i) {
                self.table.mark_dirty(i);
                if let Port::Uplink(port) = s.port {
                    out.push(Lent {
                        uplink: s.id,
                        name: s.name,
                        policy: s.policy,
                        policies: s.policies,
                        port,
                    });
                }
            }
        }
        out
    }
}
