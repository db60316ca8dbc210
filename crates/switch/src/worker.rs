//! A worker: the thread that owns a [`Datapath`] (its ports, their
//! connections and queues). It polls for a budget, and when a number of
//! rounds find nothing it re-enables guest notifications and sleeps in
//! epoll on kick eventfds, front-end sockets, its command eventfd and its
//! doorbell (other workers' frames, see [`crate::mesh`]). A dedicated
//! worker (a latency-high port's) is pinned to its core and never sleeps.
//! The control plane talks to it only through [`Command`]s.

use crate::config::{Latency, PolicyUpdate, PortKind, PortSpec, SwitchConfig};
use crate::datapath::{Datapath, Lent, Port, Slot};
use crate::fdb::{Fdb, FdbEntry};
use crate::mesh::{Doorbell, PeerSetup, RemotePort, WorkerId};
use crate::port::tap::TapPort;
use crate::port::uplink::{UplinkOptions, UplinkPort};
use crate::port::vhost_user::VhostUserPort;
use crate::port::vxlan::VxlanPort;
use crate::port::{Watch, Watched};
use crate::stats::{PortStatsSnapshot, UplinkQueueSnapshot};
use crate::PortId;
use std::sync::atomic::{fence, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

pub use crate::port_info::{EgressInfo, PolicyInfo, PortInfo, QueuePairsInfo};

#[path = "worker_spread.rs"]
mod spread;

/// Requests to the worker; each carries where to answer.
// One per control request: the size of the largest variant (a port spec) does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Add a port with this identity.
    Add(PortSpec, crate::PortId, Sender<Result<PortInfo, String>>),
    /// Hand a port (with its connection and rings) over to the control plane.
    Detach(String, Sender<Result<Box<Slot>, String>>),
    /// Take over a port another worker detached.
    Attach(Box<Slot>, Sender<PortInfo>),
    /// Learn where another worker's port is.
    Remote(RemotePort),
    /// Forget another worker's port.
    Unremote(crate::PortId),
    /// Connect to another worker.
    AddPeer(PeerSetup),
    /// Disconnect from a worker that stopped.
    RemovePeer(WorkerId),
    /// Restrict this worker's thread to these CPUs.
    Pin(Vec<usize>, Sender<Result<(), String>>),
    /// Remove a port by name.
    Del(String, Sender<Result<(), String>>),
    /// Change a port's latency policies.
    Set(String, PolicyUpdate, Sender<Result<PortInfo, String>>),
    /// List ports.
    List(Sender<Vec<PortInfo>>),
    /// The FDB.
    Fdb(Sender<Vec<FdbEntry>>),
    /// Lend a vNIC's own uplink receive queues to the worker it runs on.
    Lend(
        crate::PortId,
        crate::netqueue::QueueRequest,
        crate::wire::EthernetAddress,
        Sender<Vec<Lent>>,
    ),
    /// Serve uplink queues another worker lent.
    Hold(Vec<Lent>, Sender<()>),
    /// Give back the lent queues held here (of one uplink, when set).
    Release(Option<crate::PortId>, Sender<Vec<Lent>>),
    /// Take back lent queues; the vNIC they were lent for may be leaving.
    Restore(Vec<Lent>, Option<crate::PortId>, Sender<()>),
    /// Give pair K of a port back to its owner.
    ReturnPair(crate::PortId, usize),
    /// Serve a multiqueue port's pairs on these workers (pair k on the
    /// k-th, None: this one, worker `home`).
    Spread(
        String,
        WorkerId,
        Vec<Option<crate::port::vhost_user::WorkerHandle>>,
        Sender<Result<(), String>>,
    ),
    /// Stop the worker.
    Stop,
}

const WAKE: u64 = u64::MAX;
/// The epoll token of the timer that wakes the worker for a held call.
const TIMER: u64 = u64::MAX - 1;
/// The epoll token of the doorbell other workers ring.
const DOORBELL: u64 = u64::MAX - 2;
const TICK: Duration = Duration::from_millis(50);
const AGE_EVERY: Duration = Duration::from_secs(1);
/// Busy polling reads the clock every this many rounds.
const CLOCK_ROUNDS: u32 = 16;
/// Busy polling checks the event sources every this many rounds.
const EVENT_CHECK_ROUNDS: u32 = 64;

/// The worker's state.
pub struct Worker {
    dp: Datapath,
    epoll: Epoll,
    wake: EventFd,
    commands: Receiver<Command>,
    registered: Vec<Vec<Watched>>,
    cfg: SwitchConfig,
    timer: TimerFd,
    doorbell: Arc<Doorbell>,
    /// The core a dedicated worker is pinned to (it never sleeps).
    dedicated: Option<usize>,
}

fn token(slot: usize, w: Watch) -> u64 {
    ((slot as u64) << 8) | u64::from(w.encode())
}

impl Worker {
    /// A worker with no ports; `wake` is written after each command is
    /// sent, `doorbell` by other workers; `dedicated`: the core of a
    /// latency-high port's worker (which never sleeps).
    pub fn new(
        cfg: SwitchConfig,
        commands: Receiver<Command>,
        wake: EventFd,
        doorbell: Arc<Doorbell>,
        dedicated: Option<usize>,
    ) -> std::io::Result<Self> {
        let epoll = Epoll::new()?;
        epoll.ctl(
            ControlOperation::Add,
            std::os::fd::AsRawFd::as_raw_fd(&wake),
            EpollEvent::new(EventSet::IN, WAKE),
        )?;
        let timer = TimerFd::new()?;
        epoll.ctl(
            ControlOperation::Add,
            std::os::fd::AsRawFd::as_raw_fd(&timer),
            EpollEvent::new(EventSet::IN, TIMER),
        )?;
        epoll.ctl(
            ControlOperation::Add,
            std::os::fd::AsRawFd::as_raw_fd(&doorbell.fd),
            EpollEvent::new(EventSet::IN, DOORBELL),
        )?;
        let dp = Datapath::new(
            Fdb::new(cfg.fdb_capacity, cfg.aging()).with_port_limit(cfg.fdb_port_limit),
        );
        Ok(Self {
            dp,
            epoll,
            wake,
            commands,
            registered: Vec::new(),
            cfg,
            timer,
            doorbell,
            dedicated,
        })
    }

    /// The counters of where this worker's time goes.
    pub fn perf(&self) -> Arc<crate::perf::WorkerPerf> {
        self.dp.perf()
    }

    /// Connects to another worker before the thread starts.
    pub fn add_peer(&mut self, p: PeerSetup) {
        self.dp.add_peer(p);
    }

    /// Where other workers' ports send the queue pairs they lend this
    /// worker (before the thread starts).
    pub fn set_pair_inbox(&mut self, inbox: Receiver<crate::port::vhost_user::LentPair>) {
        self.dp.set_pair_inbox(inbox);
    }

    /// Learns another worker's port before the thread starts.
    pub fn set_remote(&mut self, r: RemotePort) {
        self.dp.set_remote(r);
    }

    fn sync(&mut self, slot: usize) {
        let mut now_watched = Vec::new();
        self.dp.watched(slot, &mut now_watched);
        if self.registered.len() <= slot {
            self.registered.resize_with(slot + 1, Vec::new);
        }
        let retired = self.dp.has_retired(slot);
        if self.registered[slot] == now_watched && !retired {
            return;
        }
        // Unwatch first, then close what the port retired: a descriptor
        // closed while still registered would keep its registration (the
        // front-end holds the same file) and its number could be reused by
        // another port's descriptor, which the Delete would then silence.
        for (fd, _) in self.registered[slot].drain(..) {
            let _ = self
                .epoll
                .ctl(ControlOperation::Delete, fd, EpollEvent::default());
        }
        if retired {
            self.dp.release_retired(slot);
        }
        for &(fd, w) in &now_watched {
            if let Err(e) = self.epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN, token(slot, w)),
            ) {
                log::error!("cannot watch descriptor {fd}: {e}");
            }
        }
        self.registered[slot] = now_watched;
    }

    /// An uplink's receive queues with their owners and counters.
    fn uplink_queues(&mut self, slot: usize) -> Vec<UplinkQueueSnapshot> {
        let names: Vec<(PortId, String)> = self
            .dp
            .slots()
            .map(|(_, s)| (s.id, s.name.clone()))
            .collect();
        let Some(Slot {
            port: Port::Uplink(u),
            ..
        }) = self.dp.slot_mut(slot)
        else {
            return Vec::new();
        };
        // A lent queue's holder names it by its number on the uplink.
        let held = u.lent();
        (0..u.queue_count())
            .map(|q| {
                let owner = u.table().owner(q);
                let lent = u.lent_out(q);
                let (packets, bytes, kernel_drops) = match (u.queue_mut(q), lent) {
                    (Some(rx), _) => (rx.packets, rx.bytes, rx.kernel_drops()),
                    (None, Some((p, b))) => (p, b, 0),
                    (None, None) => (0, 0, 0),
                };
                UplinkQueueSnapshot {
                    queue: held.unwrap_or(q),
                    owner: owner.and_then(|(id, _)| {
                        names.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone())
                    }),
                    owner_id: owner.map(|(id, _)| id),
                    mac: owner.and_then(|(_, m)| m).map(|m| m.to_string()),
                    packets,
                    bytes,
                    kernel_drops,
                    lent: lent.is_some(),
                }
            })
            .collect()
    }

    fn info(&mut self, slot: usize) -> Option<PortInfo> {
        let queues = self.uplink_queues(slot);
        let s = self.dp.slot(slot)?;
        let (kind, socket, mode, connected, running) = match &s.port {
            Port::VhostUser(p) => (
                "vhost-user",
                p.path().display().to_string(),
                Some(p.mode()),
                p.connected(),
                p.device.ready(0) && p.device.ready(1),
            ),
            Port::Tap(t) => ("tap", t.ifname().to_string(), None, true, true),
            Port::Uplink(u) if u.lent().is_some() => {
                ("uplink-queue", u.ifname().to_string(), None, true, true)
            }
            Port::Uplink(u) => ("uplink", u.ifname().to_string(), None, true, true),
            Port::Vxlan(v) => ("vxlan", v.describe(), None, true, true),
        };
        let pairs = spread::pairs_info(&s.port);
        Some(PortInfo {
            name: s.name.clone(),
            id: s.id.0,
            kind: kind.into(),
            socket: Some(socket),
            mode,
            connected,
            running,
            queues: pairs,
            vlan: format!("{:?}", s.policy.vlan),
            policy: PolicyInfo {
                coalesce: s.policies.effective_coalesce(),
                lro: s.policies.effective_lro(),
                latency: s.policies.latency,
                core: self
                    .dedicated
                    .filter(|_| s.policies.latency == Latency::High),
                tx_poll_budget: s.policies.effective_tx_poll_budget(),
            },
            egress: match &s.port {
                Port::Uplink(u) => EgressInfo {
                    capacity_mbps: u.sched.capacity_bps().map(|b| b / 1_000_000),
                    contended: Some(u.sched.contended()),
                    ..Default::default()
                },
                _ => EgressInfo {
                    share: Some(s.policy.egress.share),
                    limit_mbps: s.policy.egress.limit_bps.map(|b| b / 1_000_000),
                    reserve_mbps: s.policy.egress.reserve_bps.map(|b| b / 1_000_000),
                    ..Default::default()
                },
            },
            stats: PortStatsSnapshot {
                uplink_queues: queues,
                vteps: match &s.port {
                    Port::Vxlan(v) => v.vteps(),
                    _ => Vec::new(),
                },
                ..spread::snapshot(s)
            },
        })
    }

    fn add(&mut self, spec: &PortSpec, id: crate::PortId) -> Result<PortInfo, String> {
        let e = |e: &dyn std::error::Error| crate::error_chain(e);
        let policy = spec.policy().map_err(|x| e(&x))?;
        if self.dp.find(&spec.name).is_some() {
            return Err(format!("port {} exists", spec.name));
        }
        let policies = spec.policies(&self.cfg);
        // Unprefixed, as the other refusals here: the caller names the port.
        self.dp.check_direct(&policy)?;
        if spec.kind != PortKind::Uplink && policy.direct.is_none() {
            self.dp.check_queue_request(policy.uplink_queue)?;
            self.dp
                .check_reservation(policy.egress.reserve_bps.unwrap_or(0), None)?;
        }
        let port = match spec.kind {
            PortKind::VhostUser => {
                let socket = spec
                    .socket
                    .as_ref()
                    .ok_or("a vhost-user port needs a socket")?;
                let mut p =
                    VhostUserPort::with_offloads(socket, spec.mode, spec.offloads.unwrap_or(true))
                        .map_err(|x| e(&x))?;
                p.set_max_memory(self.cfg.max_guest_memory());
                p.set_queue_pairs(spec.queues.unwrap_or(1));
                Port::VhostUser(p)
            }
            PortKind::Tap => {
                let ifname = spec.ifname.as_deref().unwrap_or(&spec.name);
                Port::Tap(
                    TapPort::with_offloads(ifname, spec.offloads.unwrap_or(true))
                        .map_err(|x| e(&x))?,
                )
            }
            PortKind::Uplink => {
                let ifname = spec
                    .ifname
                    .as_deref()
                    .ok_or("an uplink port needs an interface")?;
                let opts = UplinkOptions {
                    qdisc_bypass: spec.qdisc_bypass,
                    queues: spec.queues.unwrap_or(1),
                    capacity_bps: spec.capacity_mbps.map(|m| m.saturating_mul(1_000_000)),
                    ..UplinkOptions::default()
                };
                Port::Uplink(UplinkPort::open(ifname, &opts).map_err(|x| e(&x))?)
            }
            PortKind::Vxlan => {
                let opts = spec
                    .vxlan_options()
                    .ok_or("a vxlan port needs `vni` and `local`")?;
                Port::Vxlan(VxlanPort::open(opts).map_err(|x| e(&x))?)
            }
        };
        let slot = self.dp.add(id, spec.name.clone(), policy, policies, port);
        if let (Some(s), PortKind::VhostUser) = (self.dp.slot(slot), spec.kind) {
            let pairs = spec.queues.unwrap_or(1) as u64;
            s.stats
                .queue_pairs
                .store(pairs, std::sync::atomic::Ordering::Relaxed);
        }
        // A client-mode port connects at once; other client ports may connect too.
        let mut changed = vec![slot];
        self.dp.tick(Instant::now(), &mut changed);
        for s in changed {
            self.sync(s);
        }
        log::info!("port {} added", spec.name);
        self.info(slot).ok_or_else(|| "port vanished".into())
    }

    fn del(&mut self, name: &str) -> Result<(), String> {
        self.detach(name)?;
        log::info!("port {name} removed");
        Ok(())
    }

    /// Takes a port out of this worker (its descriptors unwatched).
    fn detach(&mut self, name: &str) -> Result<Box<Slot>, String> {
        let slot = self
            .dp
            .find(name)
            .ok_or_else(|| format!("no port {name}"))?;
        if let Some(list) = self.registered.get_mut(slot) {
            for (fd, _) in list.drain(..) {
                let _ = self
                    .epoll
                    .ctl(ControlOperation::Delete, fd, EpollEvent::default());
            }
        }
        self.dp
            .remove(slot)
            .map(Box::new)
            .ok_or_else(|| "port vanished".into())
    }

    fn attach(&mut self, s: Box<Slot>) -> PortInfo {
        let name = s.name.clone();
        let slot = self.dp.attach(*s);
        self.sync(slot);
        log::info!(
            "port {name} now served by {}",
            match self.dedicated {
                Some(c) => format!("a dedicated worker on core {c}"),
                None => "the shared worker".into(),
            }
        );
        self.info(slot)
            .unwrap_or_else(|| unreachable!("attached above"))
    }

    fn set(&mut self, name: &str, u: &PolicyUpdate) -> Result<PortInfo, String> {
        let slot = self
            .dp
            .find(name)
            .ok_or_else(|| format!("no port {name}"))?;
        let s = self.dp.slot(slot).ok_or("port vanished")?;
        if u.share.is_some() || u.limit_mbps.is_some() || u.reserve_mbps.is_some() {
            if !s.is_vnic() {
                return Err(format!(
                    "port {name}: share, limit and reservation apply to vhost-user and tap ports"
                ));
            }
            let cur = s.policy.egress;
            let mbps = |b: Option<u64>| b.map(|b| b / 1_000_000);
            let e = crate::config::egress_policy(
                Some(u.share.unwrap_or(cur.share)),
                u.limit_mbps.or(mbps(cur.limit_bps)),
                u.reserve_mbps.or(mbps(cur.reserve_bps)),
            )
            .map_err(|w| format!("port {name}: {w}"))?;
            let id = s.id;
            self.dp
                .check_reservation(e.reserve_bps.unwrap_or(0), Some(id))?;
            self.dp.set_egress(slot, e);
            log::info!(
                "port {name}: egress share {}, limit {}, reservation {}",
                e.share,
                e.limit_bps
                    .map_or("none".into(), |b| format!("{} Mbit/s", b / 1_000_000)),
                e.reserve_bps
                    .map_or("none".into(), |b| format!("{} Mbit/s", b / 1_000_000))
            );
        }
        if let Some(l) = u.fdb_limit {
            self.dp.set_fdb_limit(slot, l);
            log::info!("port {name}: fdb limit {l}");
        }
        let s = self.dp.slot(slot).ok_or("port vanished")?;
        let mut p = s.policies;
        p.apply(u);
        self.dp.set_policies(slot, p);
        log::info!(
            "port {name}: coalesce {}, lro {}, latency {}, tx_poll_budget {}",
            p.effective_coalesce(),
            if p.effective_lro() { "on" } else { "off" },
            p.latency,
            p.tx_poll_budget
        );
        self.info(slot).ok_or_else(|| "port vanished".into())
    }

    /// Handles pending commands; returns false on Stop.
    fn commands(&mut self) -> bool {
        let _ = self.wake.read();
        while let Ok(c) = self.commands.try_recv() {
            match c {
                Command::Add(spec, id, reply) => {
                    let _ = reply.send(self.add(&spec, id));
                }
                Command::Detach(name, reply) => {
                    let _ = reply.send(self.detach(&name));
                }
                Command::Attach(slot, reply) => {
                    let _ = reply.send(self.attach(slot));
                }
                Command::Remote(r) => self.dp.set_remote(r),
                Command::Unremote(id) => self.dp.remove_remote(id),
                Command::AddPeer(p) => self.dp.add_peer(p),
                Command::RemovePeer(w) => self.dp.remove_peer(w),
                Command::Pin(cpus, reply) => {
                    let r = crate::sys::affinity::pin_current_thread(&cpus)
                        .map_err(|e| format!("cannot pin the worker to CPUs {cpus:?}: {e}"));
                    if r.is_ok() && self.dedicated.is_some() {
                        self.dedicated = cpus.first().copied();
                    }
                    let _ = reply.send(r);
                }
                Command::Del(name, reply) => {
                    let _ = reply.send(self.del(&name));
                }
                Command::Set(name, u, reply) => {
                    let _ = reply.send(self.set(&name, &u));
                }
                Command::List(reply) => {
                    // A lent pair is listed (and counted) with its port.
                    let v = self
                        .dp
                        .slots()
                        .filter(|(_, s)| !spread::is_lent_pair(s))
                        .map(|(i, _)| i)
                        .collect::<Vec<_>>();
                    let _ = reply.send(v.into_iter().filter_map(|i| self.info(i)).collect());
                }
                Command::Fdb(reply) => {
                    let _ = reply.send(self.dp.fdb().entries(Instant::now()));
                }
                Command::Lend(id, req, mac, reply) => {
                    let _ = reply.send(self.dp.lend_queues(id, req, mac));
                }
                Command::Hold(lent, reply) => {
                    for l in lent {
                        let name = l.name.clone();
                        let slot = self.dp.hold(l);
                        self.sync(slot);
                        log::info!("{name}: served by this worker");
                    }
                    let _ = reply.send(());
                }
                Command::Release(of, reply) => {
                    let _ = reply.send(self.dp.release_lent(of));
                }
                Command::Restore(lent, leaving, reply) => {
                    self.dp.restore(lent, leaving);
                    let _ = reply.send(());
                }
                Command::ReturnPair(id, k) => self.return_pair(id, k),
                Command::Spread(name, home, holders, reply) => {
                    let _ = reply.send(self.spread(&name, home, holders));
                }
                Command::Stop => return false,
            }
        }
        true
    }

    /// Runs until a Stop command.
    pub fn run(mut self) {
        let mut events = vec![EpollEvent::default(); 64];
        let mut idle: u32 = 0;
        let mut rounds: u32 = 0;
        let mut last_tick = Instant::now();
        let mut last_age = Instant::now();
        let mut changed = Vec::new();
        let mut now = Instant::now();
        loop {
            // The clock is read every few rounds while busy: FDB timestamps
            // and timers need no finer grain than that. A held call's
            // deadline needs every round's.
            if rounds % CLOCK_ROUNDS == 0 || self.dp.next_deadline().is_some() {
                now = Instant::now();
            }
            let work = self.dp.poll(now, self.cfg.budget);
            if work > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
            }
            rounds = rounds.wrapping_add(1);
            // Sleep once idle for `idle_polls` rounds and every port's
            // transmit busy-poll budget is spent (its guest kicks again);
            // a dedicated worker never sleeps.
            let sleep =
                self.dedicated.is_none() && idle > self.cfg.idle_polls && self.dp.all_tx_armed();
            if sleep && self.dp.end_batch(now) {
                // LRO aggregates went out: a round publishes them and calls first.
                idle = 0;
                continue;
            }
            let timeout = if sleep {
                // Other workers ring the doorbell only while this flag is up:
                // raise it, then look at their rings once more (the fence
                // pairs with the one in `Doorbell::ring`).
                self.doorbell.sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if self.dp.arm_notifications() || self.dp.peers_pending() {
                    // Frames arrived while arming: keep polling.
                    self.doorbell.sleeping.store(false, Ordering::Relaxed);
                    self.dp.disarm_notifications();
                    idle = 0;
                    continue;
                }
                // A held call is due: the timer wakes the worker for it.
                if let Some(due) = self.dp.next_deadline() {
                    let now = Instant::now();
                    if due <= now {
                        self.doorbell.sleeping.store(false, Ordering::Relaxed);
                        self.dp.disarm_notifications();
                        continue;
                    }
                    let _ = self.timer.reset(due - now, None);
                }
                TICK.as_millis() as i32
            } else if rounds % EVENT_CHECK_ROUNDS == 0 || now.duration_since(last_tick) >= TICK {
                0
            } else {
                continue;
            };
            let n = match self.epoll.wait(timeout, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    log::error!("worker epoll failed: {e}");
                    return;
                }
            };
            self.dp.perf_resume();
            if sleep {
                self.doorbell.sleeping.store(false, Ordering::Relaxed);
                self.dp.disarm_notifications();
                idle = 0;
            }
            now = Instant::now();
            for ev in &events[..n] {
                let data = ev.data();
                if data == WAKE {
                    if !self.commands() {
                        return;
                    }
                    continue;
                }
                if data == TIMER {
                    let _ = self.timer.wait();
                    continue;
                }
                if data == DOORBELL {
                    let _ = self.doorbell.fd.read();
                    continue;
                }
                let slot = (data >> 8) as usize;
                self.dp.on_event(slot, Watch::decode(data as u8), now);
                self.sync(slot);
            }
            changed.clear();
            if now.duration_since(last_tick) >= TICK {
                last_tick = now;
                self.dp.tick(now, &mut changed);
            }
            self.dp.spread_tick(now, &mut changed);
            self.dp.take_dirty(&mut changed);
            for &s in &changed {
                self.sync(s);
            }
            self.give_back_broken();
            if now.duration_since(last_age) >= AGE_EVERY {
                last_age = now;
                self.dp.age(now);
            }
        }
    }
}
