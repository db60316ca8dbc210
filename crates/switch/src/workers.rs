//! The control plane's view of the workers: which worker owns which port,
//! which cores are dedicated, and the operations that start, move and stop
//! workers. Worker 0 is the shared worker (every latency-normal port); each
//! latency-high port gets a worker of its own, pinned to a core nobody else
//! in the switch uses, connected to every other worker by a pair of rings
//! ([`crate::mesh`]). Nothing here is on the data path: the control plane
//! takes a lock, the workers never do.

use crate::config::{Latency, Policies, PolicyUpdate, PortKind, PortSpec, SwitchConfig};
use crate::datapath::Slot;
use crate::fdb::FdbEntry;
use crate::mesh::{Doorbell, PeerSetup, RemotePort, WorkerId};
use crate::netqueue::QueueRequest;
use crate::vlan::VlanMode;
use crate::wire::EthernetAddress;
use crate::worker::{Command, PortInfo, Worker};
use crate::PortId;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One worker thread, as the control plane reaches it.
struct Link {
    id: WorkerId,
    tx: Sender<Command>,
    wake: EventFd,
    doorbell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
    /// The dedicated core (None for the shared worker).
    core: Option<usize>,
    /// Where the worker's time goes (it writes, we read).
    perf: Arc<crate::perf::WorkerPerf>,
    /// Where it takes the queue pairs other workers' ports lend it.
    pairs: Sender<crate::port::vhost_user::LentPair>,
}

impl Link {
    fn send(&self, c: Command) -> Result<(), String> {
        self.tx.send(c).map_err(|_| "worker stopped".to_string())?;
        self.wake.write(1).map_err(|e| e.to_string())
    }

    fn ask<T>(&self, f: impl FnOnce(Sender<T>) -> Command) -> Result<T, String> {
        let (tx, rx) = mpsc::channel();
        self.send(f(tx))?;
        rx.recv_timeout(ANSWER_TIMEOUT).map_err(|e| e.to_string())
    }

    fn stop(&mut self) {
        let _ = self.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A port, as the control plane tracks it.
struct Entry {
    name: String,
    id: PortId,
    worker: WorkerId,
    vlan: VlanMode,
    policies: Policies,
    /// Bound to an uplink queue (direct mode): stays with the uplink's worker.
    direct: bool,
    /// An uplink (its queues may be lent to latency-high ports' workers).
    uplink: bool,
    /// The uplink receive queue it asks for, and its configured MAC (a
    /// queue follows a MAC; a latency-high port's worker takes its queue
    /// along only when the MAC is configured).
    queue: QueueRequest,
    mac: Option<EthernetAddress>,
    /// Queue pairs (a multiqueue vhost-user port's, else 1).
    pairs: usize,
}

/// Every worker and where each port lives.
pub struct Workers {
    cfg: SwitchConfig,
    links: Vec<Link>,
    ports: Vec<Entry>,
    next_port: u32,
    next_worker: WorkerId,
    /// CPUs the switch may use (its affinity at start).
    allowed: Vec<usize>,
}

fn cpu_list(c: &[usize]) -> String {
    c.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Workers {
    /// Starts the shared worker.
    pub fn start(cfg: SwitchConfig) -> std::io::Result<Self> {
        let allowed = crate::sys::affinity::allowed()?;
        let mut w = Self {
            cfg,
            links: Vec::new(),
            ports: Vec::new(),
            next_port: 1,
            next_worker: 0,
            allowed,
        };
        for _ in 0..w.cfg.workers.clamp(1, crate::config::MAX_WORKERS) {
            w.spawn(None).map_err(std::io::Error::other)?;
        }
        Ok(w)
    }

    /// Starts a worker (dedicated to `core`, or the shared one) connected to
    /// every existing worker and told where every port is.
    fn spawn(&mut self, core: Option<usize>) -> Result<WorkerId, String> {
        let id = self.next_worker;
        let io = |e: std::io::Error| e.to_string();
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
            .map_err(|e| e.to_string())??;
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

    /// Every worker's time accounting now, the shared worker first.
    pub fn perf(&self) -> Vec<crate::perf::PerfSnapshot> {
        self.links
            .iter()
            .map(|l| crate::perf::PerfSnapshot {
                worker: l.id as u32,
                core: l.core,
                ..l.perf.snapshot()
            })
            .collect()
    }

    /// Stops a dedicated worker (its port already left it).
    fn retire(&mut self, id: WorkerId) {
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
    fn repin_shared(&self) {
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
    fn choose_core(
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

    fn link(&self, id: WorkerId) -> Result<&Link, String> {
        self.links
            .iter()
            .find(|l| l.id == id)
            .ok_or_else(|| format!("worker {id} is gone"))
    }

    fn shared(&self) -> WorkerId {
        self.links
            .iter()
            .find(|l| l.core.is_none())
            .map_or(0, |l| l.id)
    }

    /// Tells every worker but `owner` where port `e` lives.
    fn announce(&self, id: PortId, vlan: &VlanMode, owner: WorkerId) {
        for l in self.links.iter().filter(|l| l.id != owner) {
            let _ = l.send(Command::Remote(RemotePort {
                id,
                vlan: vlan.clone(),
                worker: owner,
            }));
        }
    }

    /// Adds a port: on the shared worker, or on a new dedicated one.
    pub fn add_port(&mut self, spec: PortSpec) -> Result<PortInfo, String> {
        let policy = spec.policy().map_err(|e| crate::error_chain(&e))?;
        if self.ports.iter().any(|p| p.name == spec.name) {
            return Err(format!("port {} exists", spec.name));
        }
        let policies = spec.policies(&self.cfg);
        let worker = match policies.latency {
            Latency::High => {
                let core = self.choose_core(policies.core, None)?;
                self.spawn(Some(core))?
            }
            Latency::Normal => self.shared(),
        };
        let id = PortId(self.next_port);
        let name = spec.name.clone();
        let uplink = spec.kind == PortKind::Uplink;
        let pairs = match spec.kind {
            PortKind::VhostUser => spec.queues.unwrap_or(1),
            _ => 1,
        };
        let r = self
            .link(worker)?
            .ask(|tx| Command::Add(spec, id, tx))
            .and_then(|r| r);
        match r {
            Ok(info) => {
                self.next_port += 1;
                self.announce(id, &policy.vlan, worker);
                self.ports.push(Entry {
                    name,
                    id,
                    worker,
                    direct: policy.direct.is_some(),
                    vlan: policy.vlan,
                    policies,
                    uplink,
                    queue: policy.uplink_queue,
                    mac: policy.mac,
                    pairs,
                });
                if uplink {
                    // Its queues go to the latency-high ports already here.
                    for i in 0..self.ports.len() {
                        self.lend_to(i);
                    }
                } else {
                    self.lend_to(self.ports.len() - 1);
                }
                if pairs > 1 && worker == self.shared() {
                    let name = &self.ports[self.ports.len() - 1].name;
                    if let Err(e) = self.spread(name, pairs) {
                        log::warn!("port {name}: its queue pairs stay on one worker: {e}");
                    }
                }
                Ok(info)
            }
            Err(e) => {
                self.retire(worker);
                Err(e)
            }
        }
    }

    /// Removes a port (and its dedicated worker).
    pub fn del_port(&mut self, name: &str) -> Result<(), String> {
        let i = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| format!("no port {name}"))?;
        let (id, worker) = (self.ports[i].id, self.ports[i].worker);
        if self.ports[i].uplink {
            // Its lent queues close with it.
            for l in self.links.iter().filter(|l| l.core.is_some()) {
                let _ = l.ask(|tx| Command::Release(Some(id), tx));
            }
        } else {
            self.recall(worker, Some(id));
        }
        self.link(worker)?
            .ask(|tx| Command::Del(name.to_string(), tx))??;
        self.ports.remove(i);
        for l in self.links.iter().filter(|l| l.id != worker) {
            let _ = l.send(Command::Unremote(id));
        }
        self.retire(worker);
        Ok(())
    }

    /// Moves a port to worker `to` (its connection and rings go with it).
    fn relocate(&mut self, i: usize, to: WorkerId, policies: Policies) -> Result<PortInfo, String> {
        let (name, from) = (self.ports[i].name.clone(), self.ports[i].worker);
        let mut slot: Box<Slot> = self
            .link(from)?
            .ask(|tx| Command::Detach(name.clone(), tx))??;
        slot.policies = policies;
        slot.rt.coalescer.set_policy(policies.effective_coalesce());
        let info = self.link(to)?.ask(|tx| Command::Attach(slot, tx))?;
        self.ports[i].worker = to;
        self.ports[i].policies = policies;
        let (id, vlan) = (self.ports[i].id, self.ports[i].vlan.clone());
        self.announce(id, &vlan, to);
        Ok(info)
    }

    /// Changes a port's policies; a change of latency moves it between the
    /// shared worker and a dedicated one.
    pub fn set_port(&mut self, name: &str, u: PolicyUpdate) -> Result<PortInfo, String> {
        let i = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| format!("no port {name}"))?;
        let (cur, worker) = (self.ports[i].policies, self.ports[i].worker);
        let mut new = cur;
        new.apply(&u);
        if new.core.is_some() && new.latency != Latency::High {
            return Err(format!("port {name}: a core is for latency high"));
        }
        if new.latency == Latency::High && self.ports[i].direct {
            return Err(format!(
                "latency high: port {name} is in direct mode (bound to an uplink queue the shared worker serves)"
            ));
        }
        let dedicated_core = self.link(worker)?.core;
        if cur.latency != new.latency && self.spread_over(i) > 1 {
            return Err(format!(
                "port {name}: its queue pairs are spread over the {} shared workers (`workers`); a spread port stays on the shared worker",
                self.spread_over(i)
            ));
        }
        match (cur.latency, new.latency) {
            (Latency::Normal, Latency::High) => {
                let core = self.choose_core(new.core, None)?;
                let to = self.spawn(Some(core))?;
                match self.relocate(i, to, new) {
                    Ok(info) => {
                        self.lend_to(i);
                        Ok(info)
                    }
                    Err(e) => {
                        self.retire(to);
                        Err(e)
                    }
                }
            }
            (Latency::High, Latency::Normal) => {
                self.recall(worker, None);
                let to = self.shared();
                let info = self.relocate(i, to, new)?;
                self.retire(worker);
                Ok(info)
            }
            (Latency::High, Latency::High) if new.core.is_some() && new.core != dedicated_core => {
                let core = self.choose_core(new.core, Some(worker))?;
                self.link(worker)?
                    .ask(|tx| Command::Pin(vec![core], tx))??;
                if let Some(l) = self.links.iter_mut().find(|l| l.id == worker) {
                    l.core = Some(core);
                }
                self.repin_shared();
                self.ports[i].policies = new;
                self.link(worker)?
                    .ask(|tx| Command::Set(name.to_string(), u, tx))?
            }
            _ => {
                let info = self
                    .link(worker)?
                    .ask(|tx| Command::Set(name.to_string(), u, tx))??;
                self.ports[i].policies = new;
                Ok(info)
            }
        }
    }

    /// Lends port `i`'s own uplink receive queues to its worker when that
    /// is a dedicated one (see [`crate::datapath::Datapath::lend_queues`]):
    /// its frames to and from the wire then never cross the shared worker.
    /// Failing leaves them with the shared worker, as before, and says so.
    fn lend_to(&self, i: usize) {
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
    fn recall(&self, w: WorkerId, leaving: Option<PortId>) {
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

    /// Every port, in the order they were added.
    pub fn list(&self) -> Result<Vec<PortInfo>, String> {
        let mut all = Vec::new();
        for l in &self.links {
            all.extend(l.ask(Command::List)?);
        }
        all.sort_by_key(|p| p.id);
        // A worker names only its own ports: owners elsewhere are named here.
        for q in all
            .iter_mut()
            .flat_map(|p| p.stats.uplink_queues.iter_mut())
        {
            if q.owner.is_none() {
                q.owner = q
                    .owner_id
                    .and_then(|id| self.ports.iter().find(|p| p.id == id))
                    .map(|p| p.name.clone());
            }
        }
        Ok(all)
    }

    /// The learned addresses of every worker, one entry per address (the
    /// most recently seen).
    pub fn fdb(&self) -> Result<Vec<FdbEntry>, String> {
        let mut all: Vec<FdbEntry> = Vec::new();
        for l in &self.links {
            for e in l.ask(Command::Fdb)? {
                match all.iter_mut().find(|x| x.vid == e.vid && x.mac == e.mac) {
                    Some(x) if e.age_secs < x.age_secs => *x = e,
                    Some(_) => {}
                    None => all.push(e),
                }
            }
        }
        all.sort_by_key(|e| (e.vid, e.mac.to_u64()));
        Ok(all)
    }

    /// Stops every worker.
    pub fn stop(&mut self) {
        for l in &mut self.links {
            l.stop();
        }
        self.links.clear();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

#[path = "workers_spread.rs"]
mod spread;

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
