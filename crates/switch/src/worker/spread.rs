//! Spreading, one worker's part: a multiqueue port's queue pairs served by
//! several workers (chosen in `pool/spread.rs`, lent and taken back by the
//! port in `port/vhost_user/spread.rs`, served in `datapath/spread.rs`):
//! holding and returning pairs, and showing where each pair is served.

use super::{QueuePairsInfo, Worker, WorkerError};
use crate::datapath::{Port, Slot};
use crate::mesh::WorkerId;
use crate::port::vhost_user::WorkerHandle;
use crate::stats::PortStatsSnapshot;
use crate::PortId;
use std::sync::Arc;
use vmm_sys_util::epoll::{ControlOperation, EpollEvent};

/// Whether slot `s` is a pair another worker's port lent here.
pub(super) fn is_lent_pair(s: &Slot) -> bool {
    matches!(&s.port, Port::VhostUser(p) if p.lent_pair().is_some())
}

/// A multiqueue port's pairs: how many, running, and where each is served.
pub(super) fn pairs_info(port: &Port) -> Option<QueuePairsInfo> {
    let Port::VhostUser(p) = port else {
        return None;
    };
    let d = &p.device;
    let n = d.queue_pairs();
    if n < 2 {
        return None;
    }
    let workers = p.spread_state().map(|s| s.workers(n)).unwrap_or_default();
    Some(QueuePairsInfo {
        pairs: n,
        // A lent pair was running when it left.
        running: (0..n)
            .filter(|&k| d.pair_ready(k) || workers.get(k).is_some_and(|&w| w != workers[0]))
            .count(),
        workers,
        lends: p.spread_state().map_or(0, |s| s.lends()),
    })
}

/// The port's counters with its holders' added.
pub(super) fn snapshot(s: &Slot) -> PortStatsSnapshot {
    let mut snap = s.stats.snapshot();
    if let Port::VhostUser(p) = &s.port {
        if let Some(sp) = p.spread_state() {
            sp.merge(&mut snap);
        }
    }
    snap
}

impl Worker {
    /// Gives pair `k` of port `id` back to its owner, its descriptors
    /// unwatched first.
    pub(super) fn return_pair(&mut self, id: PortId, k: usize) {
        // Frames the owner sent through the mesh to the pair before it
        // called it back are delivered first (a few rounds at most).
        for _ in 0..16 {
            if !self.dp.peers_pending() {
                break;
            }
            self.dp.poll(std::time::Instant::now(), self.cfg.budget);
        }
        match self.dp.table().find_lent_pair(id, k) {
            Some(slot) => self.give_back(slot),
            None => log::debug!("port id {id}: queue pair {k} is not here"),
        }
    }

    fn give_back(&mut self, slot: usize) {
        if let Some(list) = self.registered.get_mut(slot) {
            for (fd, _) in list.drain(..) {
                let _ = self
                    .epoll
                    .ctl(ControlOperation::Delete, fd, EpollEvent::default());
            }
        }
        if let Some(Slot {
            port: Port::VhostUser(p),
            ..
        }) = self.dp.remove(slot)
        {
            p.send_back();
        }
    }

    /// Gives back the lent pairs whose rings failed here.
    pub(super) fn give_back_broken(&mut self) {
        for slot in self.dp.take_broken_pairs() {
            self.give_back(slot);
        }
    }

    /// Spreads port `name`'s pairs over `holders`.
    pub(super) fn spread(
        &mut self,
        name: &str,
        home: WorkerId,
        holders: Vec<Option<WorkerHandle>>,
    ) -> Result<(), WorkerError> {
        let slot = self
            .dp
            .table()
            .find(name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        let wake = self
            .wake
            .try_clone()
            .map_err(|e| WorkerError::System(format!("port {name}: {e}")))?;
        let Some(Slot {
            id,
            port: Port::VhostUser(p),
            routed,
            ..
        }) = self.dp.table_mut().slot_mut(slot)
        else {
            return Err(WorkerError::Refused(format!(
                "port {name}: not a vhost-user port"
            )));
        };
        p.spread(*id, home, holders, Arc::new(wake));
        *routed = true;
        Ok(())
    }
}
