//! Worker threads as the control plane runs them: starting one (connected
//! to every other worker, told where every port is), stopping a dedicated
//! one, and choosing and keeping the cores dedicated workers are pinned
//! to. Separate from the port registry in `pool/mod.rs`: this is about
//! threads and CPUs, not ports.

use super::{Link, Workers, ANSWER_TIMEOUT};
use crate::mesh::{Doorbell, PeerSetup, RemotePort, WorkerId};
use crate::worker::{Command, Worker, WorkerError};
use std::sync::mpsc;
use std::sync::Arc;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

impl Workers {
    /// Starts a worker (dedicated to `core`, or the shared one) connected to
    /// every existing worker and told where every port is.
    pub(super) fn spawn(&mut self, core: Option<usize>) -> Result<WorkerId, WorkerError> {
        let id = self.next_worker;
        let io = |e: std::io::Error| WorkerError::System(format!("cannot start a worker: {e}"));
        let (tx, rx) = mpsc::channel();
        let wake = EventFd::new(EFD_NONBLOCK).map_err(io)?;
        let doorbell = Arc::new(Doorbell::new().map_err(io)?);
        let mut worker = Worker::new(
            self.cfg.clone(),
            rx,
            wake.try_clone().map_err(io)?,
            doorbell.clone(),
            core,
        )
        .map_err(io)?;
        worker.set_events(self.events.clone());
        let (pairs, inbox) = mpsc::channel();
        worker.set_pair_inbox(inbox);
        let mut theirs = Vec::new();
        for l in &self.links {
            let (mine, other) = PeerSetup::pair(id, doorbell.clone(), l.id, l.doorbell.clone());
            worker.add_peer(mine);
            theirs.push((l.id, other));
        }
        for p in &self.ports {
            worker.set_remote(RemotePort {
                id: p.id,
                vlan: p.vlan.clone(),
                worker: p.worker,
            });
        }
        let perf = worker.perf();
        let (ready_tx, ready_rx) = mpsc::channel();
        let rt = self
            .cfg
            .dedicated_rt_priority
            .filter(|p| (1..=99).contains(p));
        let name = match core {
            Some(c) => format!("vnio-sw-lat-c{c}"),
            None => "vnio-switch-worker".into(),
        };
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if let Some(c) = core {
                    if let Err(e) = crate::sys::affinity::pin_current_thread(&[c]) {
                        let _ = ready_tx.send(Err(format!(
                            "latency high: cannot pin a worker to core {c}: {e}"
                        )));
                        return;
                    }
                    if let Some(p) = rt {
                        if let Err(e) = crate::sys::affinity::realtime_current_thread(p) {
                            let _ = ready_tx.send(Err(format!(
                                "latency high: cannot run the worker on core {c} under SCHED_FIFO {p} (dedicated_rt_priority): {e}"
                            )));
                            return;
                        }
                    }
                }
                let _ = ready_tx.send(Ok(()));
                worker.run();
            })
            .map_err(io)?;
        ready_rx
            .recv_timeout(ANSWER_TIMEOUT)
            .map_err(|e| WorkerError::Unreachable(format!("{id} did not start: {e}")))??;
        if let Some(c) = core {
            warn_dedicated_core(c, rt);
        }
        for (peer, setup) in theirs {
            if let Some(l) = self.links.iter().find(|l| l.id == peer) {
                l.send(Command::AddPeer(setup))?;
            }
        }
        self.next_worker += 1;
        self.links.push(Link {
            id,
            tx,
            wake,
            doorbell,
            thread: Some(thread),
            core,
            perf,
            pairs,
        });
        self.repin_shared();
        Ok(id)
    }

    /// Stops a dedicated worker (its port already left it).
    pub(super) fn retire(&mut self, id: WorkerId) {
        if let Some(i) = self
            .links
            .iter()
            .position(|l| l.id == id && l.core.is_some())
        {
            let mut l = self.links.remove(i);
            l.stop();
            for other in &self.links {
                let _ = other.send(Command::RemovePeer(id));
            }
            self.repin_shared();
        }
    }

    /// Keeps the shared worker off the dedicated cores.
    pub(super) fn repin_shared(&self) {
        if self.allowed.len() < 2 {
            return;
        }
        let dedicated: Vec<usize> = self.links.iter().filter_map(|l| l.core).collect();
        let rest: Vec<usize> = self
            .allowed
            .iter()
            .copied()
            .filter(|c| !dedicated.contains(c))
            .collect();
        for shared in self.links.iter().filter(|l| l.core.is_none()) {
            let _ = shared.ask(|tx| Command::Pin(rest.clone(), tx));
        }
    }

    /// The core a new dedicated worker gets, or why none can be dedicated.
    /// `moving`: a dedicated worker whose own core does not count as taken.
    pub(super) fn choose_core(
        &self,
        requested: Option<usize>,
        moving: Option<WorkerId>,
    ) -> Result<usize, String> {
        let taken: Vec<(usize, &str)> = self
            .links
            .iter()
            .filter(|l| Some(l.id) != moving)
            .filter_map(|l| {
                let port = self
                    .ports
                    .iter()
                    .find(|p| p.worker == l.id)
                    .map_or("?", |p| p.name.as_str());
                l.core.map(|c| (c, port))
            })
            .collect();
        let allowed = &self.allowed;
        if allowed.len() < 2 {
            return Err(format!(
                "latency high: no core can be dedicated: the switch may only use CPU {}, which its other ports need",
                cpu_list(allowed)
            ));
        }
        let free: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|c| !taken.iter().any(|(t, _)| t == c))
            .collect();
        match requested {
            Some(c) if !allowed.contains(&c) => Err(format!(
                "latency high: core {c} is outside the CPUs the switch may use ({})",
                cpu_list(allowed)
            )),
            Some(c) => {
                if let Some((_, port)) = taken.iter().find(|(t, _)| *t == c) {
                    Err(format!("latency high: core {c} is already dedicated to port {port}"))
                } else if free.len() < 2 {
                    Err(format!(
                        "latency high: core {c} is the last one left for the switch's other ports"
                    ))
                } else {
                    Ok(c)
                }
            }
            None if free.len() < 2 => Err(format!(
                "latency high: no core left to dedicate (the switch may use CPUs {}; dedicated: {}; one must stay for the other ports)",
                cpu_list(allowed),
                taken
                    .iter()
                    .map(|(c, p)| format!("{c} to {p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            // The highest free core: CPU 0 usually takes the system's interrupts.
            None => Ok(*free.last().unwrap_or(&allowed[0])),
        }
    }
}

fn cpu_list(c: &[usize]) -> String {
    c.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Says at start what will undo a dedicated worker's busy polling. Both were
/// measured with the latency-modes benchmark (now the lab's latency-modes
/// scenarios): an ordinary thread on a shared core
/// got 4 % of it on a loaded host (its port's p50 in the hundreds of ms);
/// under SCHED_FIFO with the kernel's RT throttling on, the worker is
/// stopped 50 ms in every second (its port's p99 about 40 ms).
fn warn_dedicated_core(c: usize, rt: Option<u8>) {
    use crate::sys::affinity::{is_isolated, rt_throttling};
    match (rt, rt_throttling()) {
        (Some(p), Some((runtime, period))) => log::warn!(
            "latency high: the kernel's RT throttling (sched_rt_runtime_us {runtime} of \
             {period}) stops the SCHED_FIFO {p} worker on core {c} for {} ms in every {} ms, \
             a latency spike each time; isolate the core and leave dedicated_rt_priority unset",
            (period - runtime) / 1000,
            period / 1000
        ),
        (None, _) if is_isolated(c) == Some(false) => log::warn!(
            "latency high: core {c} is not isolated (isolcpus or a cpuset): other tasks \
             share it, and the busy-polling worker gets only a fair share of it under \
             load; isolate the core"
        ),
        _ => {}
    }
}
