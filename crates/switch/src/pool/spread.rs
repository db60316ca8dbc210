//! Spreading, the pool's part: which shared worker serves each queue pair
//! of a multiqueue port (`[switch] workers`). The pairs themselves are
//! lent and taken back by the port (`port/vhost_user/spread.rs`), held by
//! the worker chosen here (`worker/spread.rs`, `datapath/spread.rs`).

use super::{Command, Link, WorkerError, Workers};
use std::sync::Arc;

impl Workers {
    /// The shared workers, the one ports live on first.
    pub(super) fn shared_workers(&self) -> Vec<&Link> {
        self.links.iter().filter(|l| l.core.is_none()).collect()
    }

    /// How many workers port `i`'s queue pairs are spread over (1: not spread).
    pub(super) fn spread_over(&self, i: usize) -> usize {
        let p = &self.ports[i];
        if p.pairs < 2 || p.worker != self.shared() {
            return 1;
        }
        self.shared_workers().len().min(p.pairs)
    }

    /// Serves multiqueue port `name`'s pair k on shared worker k mod
    /// `workers` (pair 0, and every pair with one worker, stays on the
    /// port's own).
    pub(super) fn spread(&self, name: &str, pairs: usize) -> Result<(), WorkerError> {
        let shared = self.shared_workers();
        if shared.len() < 2 {
            return Ok(());
        }
        let mut holders = Vec::new();
        for k in 0..pairs {
            let l = shared[k % shared.len()];
            holders.push(if l.id == shared[0].id {
                None
            } else {
                Some(crate::port::vhost_user::WorkerHandle {
                    worker: l.id,
                    commands: l.tx.clone(),
                    pairs: l.pairs.clone(),
                    wake: Arc::new(
                        l.wake
                            .try_clone()
                            .map_err(|e| WorkerError::System(e.to_string()))?,
                    ),
                })
            });
        }
        let home = shared[0].id;
        shared[0].ask(|tx| Command::Spread(name.to_string(), home, holders, tx))?
    }
}
