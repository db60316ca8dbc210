//! A worker: the thread that owns a [`Datapath`] (its ports, their
//! connections and queues). It polls for a budget, and when a number of
//! rounds find nothing it re-enables guest notifications and sleeps in
//! epoll on kick eventfds, front-end sockets, its command eventfd and its
//! doorbell (other workers' frames, see [`crate::mesh`]). A dedicated
//! worker (a latency-high port's) is pinned to its core and never sleeps.
//! The control plane talks to it only through [`Command`]s; the set of
//! workers is [`crate::pool`].
//!
//! The loop is here; `ports` holds its port commands, `info` what it
//! reports about its ports, `spread` its part in spreading a multiqueue
//! port's queue pairs over workers (see [`crate::pool`]).

use crate::config::SwitchConfig;
use crate::datapath::Datapath;
use crate::mesh::{Doorbell, PeerSetup, RemotePort};
use crate::port::{Watch, Watched};
use std::sync::atomic::{fence, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

pub use crate::port_info::{EgressInfo, PolicyInfo, PortInfo, QueuePairsInfo, VirtqueueInfo};

pub use command::Command;
pub use error::WorkerError;

mod command;
mod error;
mod info;
mod ports;
mod spread;

/// What the worker keeps from one hold to the next: when it last ticked
/// and aged its FDB, and a list reused for the ports that changed.
struct Between {
    last_tick: Instant,
    last_age: Instant,
    changed: Vec<usize>,
}

/// The commands one hold handled: how many, and the slowest.
#[derive(Default)]
struct Handled {
    count: u64,
    slowest: Option<(&'static str, Duration)>,
}

impl Handled {
    fn note(&mut self, name: &'static str, took: Duration) {
        self.count += 1;
        if self.slowest.map_or(true, |(_, t)| took > t) {
            self.slowest = Some((name, took));
        }
    }
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
    /// Where its holds are counted (the data path's counters).
    perf: Arc<crate::perf::WorkerPerf>,
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
        // The counter's rate is measured once, over a few milliseconds of
        // sleep, by its first user: here, on the thread that starts the
        // worker, not in the worker's first stats snapshot (a command it
        // would hold off polling for).
        crate::sys::tsc::calibrated_rate();
        let mut dp = Datapath::new(cfg.fdb());
        dp.set_read_ahead(cfg.read_ahead);
        dp.set_time_in_switch(cfg.time_in_switch);
        let perf = dp.perf();
        Ok(Self {
            perf,
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
        Arc::clone(&self.perf)
    }

    /// Where the worker says what changes (before the thread starts).
    pub fn set_events(&mut self, q: Arc<crate::events::EventQueue>) {
        self.dp.set_events(q);
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
        self.dp.table().watched(slot, &mut now_watched);
        if self.registered.len() <= slot {
            self.registered.resize_with(slot + 1, Vec::new);
        }
        let retired = self.dp.table_mut().has_retired(slot);
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
            self.dp.table_mut().release_retired(slot);
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

    /// Handles pending commands, each noted in `handled`; returns false on Stop.
    fn commands(&mut self, handled: &mut Handled) -> bool {
        let _ = self.wake.read();
        while let Ok(c) = self.commands.try_recv() {
            let (name, began) = (c.name(), Instant::now());
            if !self.command(c) {
                return false;
            }
            handled.note(name, began.elapsed());
        }
        true
    }

    /// Handles one command; false on Stop.
    fn command(&mut self, c: Command) -> bool {
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
                let r = crate::sys::affinity::pin_current_thread(&cpus).map_err(|e| {
                    WorkerError::Refused(format!("cannot pin the worker to CPUs {cpus:?}: {e}"))
                });
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
                    .table()
                    .slots()
                    .filter(|(_, s)| !spread::is_lent_pair(s))
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>();
                let _ = reply.send(v.into_iter().filter_map(|i| self.info(i)).collect());
            }
            Command::Evpn(name, changes) => {
                self.dp.evpn(&name, &changes, Instant::now());
            }
            Command::Fdb(reply) => {
                let _ = reply.send(self.dp.fdb().entries(Instant::now()));
            }
            Command::Lend(id, req, mac, reply) => {
                let _ = reply.send(self.dp.table_mut().lend_queues(id, req, mac));
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
                self.dp.table_mut().restore(lent, leaving);
                let _ = reply.send(());
            }
            Command::ReturnPair(id, k) => self.return_pair(id, k),
            Command::Spread(name, home, holders, reply) => {
                let _ = reply.send(self.spread(&name, home, holders));
            }
            Command::Stop => return false,
        }
        true
    }

    /// Handles the events epoll reported, noting the control commands in
    /// `commands`; returns false on Stop.
    fn dispatch(&mut self, ready: &[EpollEvent], now: Instant, commands: &mut Handled) -> bool {
        for ev in ready {
            let data = ev.data();
            if data == WAKE {
                if !self.commands(commands) {
                    return false;
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
        true
    }

    /// Says that control work kept the worker from polling for `cpu`
    /// nanoseconds on the CPU (`held` in all), and what it did.
    fn say_long_hold(&self, held: Duration, cpu: u64, commands: &Handled) {
        let (name, took) = commands.slowest.unwrap_or(("command", Duration::ZERO));
        log::warn!(
            "{}: control work kept it from polling for {:?} on the CPU ({held:?} in all): {} command(s), the slowest a {name} ({took:?})",
            match self.dedicated {
                Some(c) => format!("the dedicated worker on core {c}"),
                None => "a shared worker".into(),
            },
            Duration::from_nanos(cpu),
            commands.count,
        );
    }

    /// Runs until a Stop command.
    pub fn run(mut self) {
        let mut events = vec![EpollEvent::default(); 64];
        let mut idle: u32 = 0;
        let mut rounds: u32 = 0;
        let mut between = Between {
            last_tick: Instant::now(),
            last_age: Instant::now(),
            changed: Vec::new(),
        };
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
            } else if rounds % EVENT_CHECK_ROUNDS == 0
                || now.duration_since(between.last_tick) >= TICK
            {
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
            if sleep {
                self.doorbell.sleeping.store(false, Ordering::Relaxed);
                self.dp.disarm_notifications();
                idle = 0;
            }
            match self.hold(&events[..n], &mut between) {
                Some(t) => now = t,
                None => return,
            }
        }
    }

    /// The worker's work between two polling rounds once epoll returned
    /// `ready` (its *hold*, timed and counted): the events and commands,
    /// the ticks, the ports whose watched descriptors changed, ageing.
    /// When it ended; None on Stop.
    fn hold(&mut self, ready: &[EpollEvent], b: &mut Between) -> Option<Instant> {
        let from = Instant::now();
        let mut commands = Handled::default();
        // Commands are rare: their hold's CPU time (a system call) tells
        // their own work from the host's preemption.
        let commanded = ready.iter().any(|e| e.data() == WAKE);
        let cpu_from = if commanded {
            crate::sys::cpu_time::thread_cpu_ns()
        } else {
            0
        };
        if !self.dispatch(ready, from, &mut commands) {
            return None;
        }
        b.changed.clear();
        if from.duration_since(b.last_tick) >= TICK {
            b.last_tick = from;
            self.dp.tick(from, &mut b.changed);
        }
        self.dp.spread_tick(from, &mut b.changed);
        self.dp.table_mut().take_dirty(&mut b.changed);
        for &s in &b.changed {
            self.sync(s);
        }
        self.give_back_broken();
        if from.duration_since(b.last_age) >= AGE_EVERY {
            b.last_age = from;
            self.dp.age(from);
        }
        // The hold ends; the next round's time begins (the hold's time is
        // not that round's).
        let now = Instant::now();
        let held = now.duration_since(from);
        self.perf.hold(held.as_nanos() as u64, commands.count);
        if commanded && commands.count > 0 {
            let cpu = crate::sys::cpu_time::thread_cpu_ns().saturating_sub(cpu_from);
            self.perf.command_cpu(cpu);
            // The bound the counters use: such a hold is also said.
            if cpu >= crate::perf::HOLD_LIMIT_NS {
                self.say_long_hold(held, cpu, &commands);
            }
        }
        self.dp.perf_resume();
        Some(now)
    }
}
