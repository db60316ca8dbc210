//! The pool of workers, as the control plane sees it: which worker owns
//! which port, which cores are dedicated, and the operations that start,
//! move and stop workers. One worker thread is [`crate::worker`]; this is
//! the set of them. Worker 0 is the shared worker (every latency-normal port); each
//! latency-high port gets a worker of its own, pinned to a core nobody else
//! in the switch uses, connected to every other worker by a pair of rings
//! ([`crate::mesh`]). Nothing here is on the data path: the control plane
//! takes a lock, the workers never do.
//!
//! - `threads`: starting and stopping worker threads, the dedicated cores.
//! - `spread`: *spreading*, a multiqueue vNIC's queue pairs served by
//!   several shared workers (each pair is lent to the worker that holds
//!   it); the worker's side is `worker/spread.rs`, the data path's
//!   `datapath/spread.rs`, the port's `port/vhost_user/spread.rs`.
//! - `lending`: *lending*, an uplink's receive queues lent to a
//!   latency-high port's dedicated worker; the data path's side is
//!   `datapath/lending.rs`.

use crate::config::{KindSpec, Latency, Policies, PolicyUpdate, PortSpec, SwitchConfig};
use crate::datapath::Slot;
use crate::fdb::FdbEntry;
use crate::mesh::{Doorbell, RemotePort, WorkerId};
use crate::netqueue::QueueRequest;
use crate::vlan::VlanMode;
use crate::wire::EthernetAddress;
use crate::worker::{Command, PortInfo, WorkerError};
use crate::PortId;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vmm_sys_util::eventfd::EventFd;

mod lending;
mod spread;
mod threads;

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
    fn send(&self, c: Command) -> Result<(), WorkerError> {
        self.tx
            .send(c)
            .map_err(|_| WorkerError::Unreachable(format!("{} stopped", self.id)))?;
        self.wake
            .write(1)
            .map_err(|e| WorkerError::System(format!("cannot wake worker {}: {e}", self.id)))
    }

    fn ask<T>(&self, f: impl FnOnce(Sender<T>) -> Command) -> Result<T, WorkerError> {
        let (tx, rx) = mpsc::channel();
        self.send(f(tx))?;
        rx.recv_timeout(ANSWER_TIMEOUT)
            .map_err(|e| WorkerError::Unreachable(format!("{} did not answer: {e}", self.id)))
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
    /// The port it is cross-connected with, when it named it.
    cross_connect: Option<String>,
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
    /// Where every worker says what changes (`crate::events`).
    events: Arc<crate::events::EventQueue>,
}
impl Workers {
    /// Starts the shared workers; they say what changes into `events`.
    pub fn start(
        cfg: SwitchConfig,
        events: Arc<crate::events::EventQueue>,
    ) -> std::io::Result<Self> {
        let allowed = crate::sys::affinity::allowed()?;
        let mut w = Self {
            cfg,
            links: Vec::new(),
            ports: Vec::new(),
            next_port: 1,
            next_worker: 0,
            allowed,
            events,
        };
        for _ in 0..w.cfg.workers.clamp(1, crate::config::MAX_WORKERS) {
            w.spawn(None).map_err(std::io::Error::other)?;
        }
        Ok(w)
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

    fn link(&self, id: WorkerId) -> Result<&Link, WorkerError> {
        self.links
            .iter()
            .find(|l| l.id == id)
            .ok_or_else(|| WorkerError::Unreachable(format!("{id} is gone")))
    }

    fn shared(&self) -> WorkerId {
        self.links
            .iter()
            .find(|l| l.core.is_none())
            .map_or(0, |l| l.id)
    }

    /// Whether port `name`, which a new port asks to be cross-connected
    /// with, can be: a single-queue vhost-user port of the shared worker, in
    /// no direct mode or cross-connect yet.
    fn cross_peer(&self, name: &str) -> Result<(), WorkerError> {
        let k = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| WorkerError::Refused(format!("cross_connect: no port named {name}")))?;
        let p = &self.ports[k];
        if p.uplink || p.worker != self.shared() || p.pairs > 1 || p.direct || self.is_cross(k) {
            return Err(WorkerError::Refused(format!(
                "cross_connect: port {name} must be a single-queue vhost-user port of ordinary latency, not direct or cross-connected already"
            )));
        }
        Ok(())
    }

    /// Whether port entry `i` is in a cross-connect, at either end.
    fn is_cross(&self, i: usize) -> bool {
        let name = &self.ports[i].name;
        self.ports[i].cross_connect.is_some()
            || self
                .ports
                .iter()
                .any(|p| p.cross_connect.as_ref() == Some(name))
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
    pub fn add_port(&mut self, spec: PortSpec) -> Result<PortInfo, WorkerError> {
        let policy = spec.policy().map_err(|e| crate::error_chain(&e))?;
        if self.ports.iter().any(|p| p.name == spec.name) {
            return Err(WorkerError::Exists(spec.name.clone()));
        }
        let policies = spec.policies(&self.cfg);
        if let Some(peer) = &policy.cross_connect {
            self.cross_peer(peer)?;
        }
        let named = self
            .ports
            .iter()
            .any(|p| p.cross_connect.as_ref() == Some(&spec.name));
        let single = spec.kind.vhost_user().is_some_and(|v| v.queues.get() == 1);
        if named && (!single || policies.latency == Latency::High) {
            return Err(WorkerError::Refused(format!(
                "port {}: a port cross-connects with it, so it must be a single-queue vhost-user port of ordinary latency",
                spec.name
            )));
        }
        let worker = match policies.latency {
            Latency::High => {
                let core = self.choose_core(policies.core, None)?;
                self.spawn(Some(core))?
            }
            Latency::Normal => self.shared(),
        };
        let id = PortId(self.next_port);
        let name = spec.name.clone();
        let uplink = matches!(spec.kind, KindSpec::Uplink(_));
        let pairs = spec.kind.vhost_user().map_or(1, |v| v.queues.get());
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
                    cross_connect: policy.cross_connect.clone(),
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

    /// The identity of port `name`.
    pub fn port_id(&self, name: &str) -> Option<PortId> {
        self.ports.iter().find(|p| p.name == name).map(|p| p.id)
    }

    /// Removes a port (and its dedicated worker).
    pub fn del_port(&mut self, name: &str) -> Result<(), WorkerError> {
        let i = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
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
    fn relocate(
        &mut self,
        i: usize,
        to: WorkerId,
        policies: Policies,
    ) -> Result<PortInfo, WorkerError> {
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
    pub fn set_port(&mut self, name: &str, u: PolicyUpdate) -> Result<PortInfo, WorkerError> {
        let i = self
            .ports
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        let (cur, worker) = (self.ports[i].policies, self.ports[i].worker);
        let mut new = cur;
        new.apply(&u);
        if new.core.is_some() && new.latency != Latency::High {
            return Err(WorkerError::Refused(format!(
                "port {name}: a core is for latency high"
            )));
        }
        if new.latency == Latency::High && self.ports[i].direct {
            return Err(WorkerError::Refused(format!(
                "latency high: port {name} is in direct mode (bound to an uplink queue the shared worker serves)"
            )));
        }
        if new.latency == Latency::High && self.is_cross(i) {
            return Err(WorkerError::Refused(format!(
                "latency high: port {name} is cross-connected (both ends stay on the shared worker)"
            )));
        }
        let dedicated_core = self.link(worker)?.core;
        if cur.latency != new.latency && self.spread_over(i) > 1 {
            return Err(WorkerError::Refused(format!(
                "port {name}: its queue pairs are spread over the {} shared workers (`workers`); a spread port stays on the shared worker",
                self.spread_over(i)
            )));
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

    /// Every port, in the order they were added.
    pub fn list(&self) -> Result<Vec<PortInfo>, WorkerError> {
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
    pub fn fdb(&self) -> Result<Vec<FdbEntry>, WorkerError> {
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

    /// Hands EVPN's `changes` for port `name` to the worker that has it
    /// (without waiting: the worker applies them between rounds).
    pub fn evpn(&self, name: &str, changes: Vec<crate::evpn::Change>) -> Result<(), WorkerError> {
        let e = self
            .ports
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        self.link(e.worker)?
            .send(Command::Evpn(name.to_string(), changes))
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
