//! The agent's memory and thread budget: what a test commits (its session
//! threads and their buffers) is reserved before anything is set up, per
//! client and for the whole agent, so many clients asking at once are
//! refused with a reason instead of over-committing the host.

use std::sync::{Arc, Mutex};

use crate::proto::{TestSpec, Transport, Workload};

/// A TCP sink's receive buffer.
pub const SINK_BUF: usize = 256 * 1024;
/// A UDP session's receive buffer (the largest datagram).
pub const UDP_BUF: usize = 65_536;

/// Ceilings, per client (one test at a time) and for the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub threads: usize,
    pub bytes: u64,
    pub client_threads: usize,
    pub client_bytes: u64,
}

impl Default for Budget {
    /// One client may run the largest test the default limits allow (64
    /// sessions of 1 MiB requests and responses); the agent as a whole
    /// commits at most 512 threads and 1 GiB of session buffers.
    fn default() -> Self {
        Budget {
            threads: 512,
            bytes: 1 << 30,
            client_threads: 65,
            client_bytes: 160 << 20,
        }
    }
}

/// What one test commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    pub threads: usize,
    pub bytes: u64,
}

impl Need {
    /// The session threads (and TCP acceptor) of `spec` and their buffers,
    /// as the agent allocates them.
    pub fn of(spec: &TestSpec) -> Need {
        let sessions = spec.sessions as usize;
        let udp = spec.workload.transport() == Transport::Udp;
        let per_session = match spec.workload {
            Workload::Echo { response, .. } if udp => UDP_BUF as u64 + u64::from(response),
            Workload::Echo {
                request, response, ..
            } => u64::from(request) + u64::from(response),
            Workload::Sink { .. } if udp => UDP_BUF as u64,
            Workload::Sink { .. } => SINK_BUF as u64,
            Workload::Source { size, .. } if udp => UDP_BUF as u64 + u64::from(size),
            Workload::Source { size, .. } => u64::from(size),
        };
        Need {
            threads: sessions + usize::from(!udp),
            bytes: per_session * sessions as u64,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("test needs {} threads and {} MiB; one client may commit {} threads and {} MiB (budget per client)", .need.threads, mib(.need.bytes), .budget.client_threads, mib(.budget.client_bytes))]
    Client { need: Need, budget: Budget },
    #[error("test needs {} threads and {} MiB; the agent has {} threads and {} MiB of its budget left (other clients hold the rest; retry later)", .need.threads, mib(.need.bytes), .left.threads, mib(.left.bytes))]
    Agent { need: Need, left: Need },
}

fn mib(b: u64) -> u64 {
    b.div_ceil(1 << 20)
}

/// The agent's running account, shared by its client threads.
#[derive(Clone, Debug)]
pub struct Ledger {
    budget: Budget,
    used: Arc<Mutex<Need>>,
}

impl Ledger {
    pub fn new(budget: Budget) -> Ledger {
        Ledger {
            budget,
            used: Arc::default(),
        }
    }

    /// Reserves `need`, or says which budget it exceeds.
    pub fn reserve(&self, need: Need) -> Result<Reservation, BudgetError> {
        let b = self.budget;
        if need.threads > b.client_threads || need.bytes > b.client_bytes {
            return Err(BudgetError::Client { need, budget: b });
        }
        // A poisoned lock only means a thread panicked mid-update of two
        // integers; the account is still the best one there is.
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let left = Need {
            threads: b.threads.saturating_sub(used.threads),
            bytes: b.bytes.saturating_sub(used.bytes),
        };
        if need.threads > left.threads || need.bytes > left.bytes {
            return Err(BudgetError::Agent { need, left });
        }
        used.threads += need.threads;
        used.bytes += need.bytes;
        Ok(Reservation {
            need,
            used: self.used.clone(),
        })
    }

    /// What is committed now.
    pub fn used(&self) -> Need {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A test's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    need: Need,
    used: Arc<Mutex<Need>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        used.threads -= self.need.threads;
        used.bytes -= self.need.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_refuse_and_return() {
        let l = Ledger::new(Budget {
            threads: 10,
            bytes: 1000,
            client_threads: 6,
            client_bytes: 600,
        });
        let n = |threads, bytes| Need { threads, bytes };
        assert!(matches!(
            l.reserve(n(7, 1)),
            Err(BudgetError::Client { .. })
        ));
        let a = l.reserve(n(6, 100)).unwrap();
        let e = l.reserve(n(5, 100)).unwrap_err();
        assert!(e.to_string().contains("budget"), "{e}");
        assert!(matches!(e, BudgetError::Agent { .. }));
        let b = l.reserve(n(4, 100)).unwrap();
        assert_eq!(l.used(), n(10, 200));
        drop(a);
        drop(b);
        assert_eq!(l.used(), n(0, 0));
    }
}
