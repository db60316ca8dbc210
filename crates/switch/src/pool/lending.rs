//! Lending, the pool's part: uplink receive queues lent to dedicated
//! workers. A latency-high port's own queues go to its worker, and come
//! back to the shared worker when the port leaves or changes latency.
//! Separate from the port registry: the orchestration of one data path
//! mechanism (`datapath/lending.rs`) across workers. Not to be confused
//! with spreading (`pool/spread.rs`), which moves a vNIC's queue pairs.

use super::Workers;
use crate::config::Latency;
use crate::mesh::WorkerId;
use crate::netqueue::QueueRequest;
use crate::worker::Command;
use crate::PortId;

impl Workers {
    /// Lends port `i`'s own uplink receive queues to its worker when that
    /// is a dedicated one (see [`crate::datapath::Datapath::lend_queues`]):
    /// its frames to and from the wire then never cross the shared worker.
    /// Failing leaves them with the shared worker, as before, and says so.
    pub(super) fn lend_to(&self, i: usize) {
        let Some(p) = self.ports.get(i) else { return };
        let Some(mac) = p.mac else { return };
        if p.uplink || p.queue == QueueRequest::Shared || p.policies.latency != Latency::High {
            return;
        }
        let shared = self.shared();
        let lent = match self
            .link(shared)
            .and_then(|l| l.ask(|tx| Command::Lend(p.id, p.queue, mac, tx)))
        {
            Ok(lent) if !lent.is_empty() => lent,
            Ok(_) => return,
            Err(e) => {
                log::warn!(
                    "port {}: its uplink queues stay with the shared worker: {e}",
                    p.name
                );
                return;
            }
        };
        if let Err(e) = self
            .link(p.worker)
            .and_then(|l| l.ask(|tx| Command::Hold(lent, tx)))
        {
            log::warn!(
                "port {}: its worker could not take its uplink queues: {e}",
                p.name
            );
        }
    }

    /// Takes back the uplink queues dedicated worker `w` holds; `leaving`:
    /// the port they were lent for is being removed.
    pub(super) fn recall(&self, w: WorkerId, leaving: Option<PortId>) {
        let Ok(l) = self.link(w) else { return };
        if l.core.is_none() {
            return;
        }
        let lent = match l.ask(|tx| Command::Release(None, tx)) {
            Ok(lent) => lent,
            Err(e) => {
                log::warn!("worker {w}: cannot take back its uplink queues: {e}");
                Vec::new()
            }
        };
        let shared = self.shared();
        if let Err(e) = self
            .link(shared)
            .and_then(|l| l.ask(|tx| Command::Restore(lent, leaving, tx)))
        {
            log::warn!("the shared worker cannot take back uplink queues: {e}");
        }
    }
}
