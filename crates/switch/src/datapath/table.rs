//! The port table: the slots, found by name or index, the generation
//! remembered decisions depend on (`FlowMemo`), the slots whose watched
//! descriptors changed, and what changes a port's policies in place.
//! Adding, removing and resetting ports, which the FDB, the other workers
//! and the events take part in, is `lifecycle.rs`.

use super::Slot;
use crate::config::Policies;
use crate::port::Watched;
use crate::PortId;

/// The ports of a data path, by slot.
pub struct Table {
    pub(super) slots: Vec<Option<Slot>>,
    /// Counts changes to the ports and their policies (see `FlowMemo`).
    pub(super) gen: u64,
    /// Slots whose watched descriptors changed outside an event (resets).
    pub(super) dirty: Vec<usize>,
}

impl Slot {
    /// A virtual NIC (vhost-user or tap), as opposed to an uplink.
    pub fn is_vnic(&self) -> bool {
        self.port.is_vnic()
    }
}

impl Table {
    pub(super) fn new() -> Self {
        Self {
            slots: Vec::new(),
            gen: 0,
            dirty: Vec::with_capacity(64),
        }
    }

    /// Puts `slot` in the first free slot; returns its index.
    pub(super) fn insert(&mut self, slot: Slot) -> usize {
        self.gen += 1;
        match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
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
        self.gen += 1;
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
        self.gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policy.fdb_limit = Some(limit);
        }
    }

    /// Changes slot `idx`'s latency policies.
    pub fn set_policies(&mut self, idx: usize, p: Policies) {
        self.gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policies = p;
            s.rt.coalescer.set_policy(p.effective_coalesce());
        }
    }

    /// The descriptors slot `idx` wants watched.
    pub fn watched(&self, idx: usize, out: &mut Vec<Watched>) {
        if let Some(s) = self.slot(idx) {
            s.port.watched(out);
        }
    }

    /// True when slot `idx` has descriptors to close once the worker
    /// unwatched them ([`Table::release_retired`]).
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

    pub(super) fn mark_dirty(&mut self, idx: usize) {
        if !self.dirty.contains(&idx) {
            self.dirty.push(idx);
        }
    }

    /// Takes the slots whose watched descriptors changed since the last call.
    pub fn take_dirty(&mut self, out: &mut Vec<usize>) {
        out.append(&mut self.dirty);
    }

    /// The worker serving the pair a frame to slot `j` steers to, when
    /// `j` is a spread port (or a pair of one) and that is another worker.
    #[inline]
    pub(super) fn routed_away(
        &self,
        j: usize,
        f: &super::Frame<'_>,
    ) -> Option<crate::mesh::WorkerId> {
        let s = self.slots[j].as_ref().filter(|s| s.routed)?;
        s.port.vhost_user()?.steer_away(f)
    }

    /// The slot serving pair `pair` of port `id` lent here.
    pub fn find_lent_pair(&self, id: PortId, pair: usize) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.as_ref().is_some_and(|s| {
                s.id == id
                    && s.port
                        .vhost_user()
                        .is_some_and(|p| p.lent_pair() == Some(pair))
            })
        })
    }
}
