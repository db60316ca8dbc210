//! A multiqueue port's queue pairs served by other workers (`[switch]
//! workers`, docs/switch.md "Multiqueue vNICs").
//!
//! The port (its connection, its device) stays on its own worker, the
//! owner. Once the front-end has been quiet for [`LEND_QUIET`] with pair k
//! running, the owner moves the pair's two vrings (rings, kick and call
//! descriptors) out of its device into a one-pair device and sends it, as
//! a port of its own ([`LentPair`], named `NAME:qK`, with the port's
//! identity), to the worker chosen for the pair, the holder. The holder
//! serves it as any single-pair vhost-user port: it polls the transmit
//! queue and delivers into the receive queue frames its own ports (the
//! other lent pairs) send to the port. Before the owner reads any message
//! of the front-end (and after a reset or disconnect) it asks every lent
//! pair back and stops reading until all are home: the device is the one
//! writer of its rings' state, and messages are rare. Nothing here runs
//! per frame.

use super::VhostUserPort;
use crate::config::Policies;
use crate::forward::PortPolicy;
use crate::mesh::WorkerId;
use crate::stats::{PortStats, PortStatsSnapshot, QueueSnapshot};
use crate::vhost_user::device::{Device, MAX_QUEUE_PAIRS};
use crate::worker::Command;
use crate::PortId;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// How long a port's front-end must have sent no message before its pairs
/// are lent (a handshake's messages come in bursts: each would call the
/// pairs back).
pub const LEND_QUIET: Duration = Duration::from_millis(50);

/// A worker as another worker reaches it: its commands and its wake-up.
pub struct WorkerHandle {
    /// Which worker.
    pub worker: WorkerId,
    /// Its command channel.
    pub commands: Sender<Command>,
    /// Where it takes the pairs lent to it.
    pub pairs: Sender<LentPair>,
    /// Written after each command.
    pub wake: Arc<EventFd>,
}

impl std::fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "worker {}", self.worker)
    }
}

/// Where a pair is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In the owner's device.
    Home,
    /// With its holder.
    Lent,
    /// Asked back, not yet returned.
    Recalling,
}

/// The owner's side: where each pair is served.
#[derive(Debug)]
pub struct Spread {
    /// The port.
    id: PortId,
    /// The owner.
    home: WorkerId,
    /// Pair k's holder (None: served at home).
    holders: Vec<Option<WorkerHandle>>,
    place: [Place; MAX_QUEUE_PAIRS],
    /// Counters the holders write (one writer each), kept across lendings.
    stats: Vec<Arc<PortStats>>,
    back_tx: Sender<VhostUserPort>,
    back_rx: Receiver<VhostUserPort>,
    /// The owner's wake-up, written by a holder returning a pair.
    own_wake: Arc<EventFd>,
    /// Counts resets: a pair lent before one is not put back.
    generation: u64,
    /// When the front-end last sent messages (or a pair came back).
    quiet_since: Instant,
    /// Pairs lent so far (each after the pair came home: a recall).
    lends: u64,
}

/// The holder's side, inside the one-pair port it serves.
#[derive(Debug)]
pub struct LentTo {
    /// The pair's number on the port.
    pair: usize,
    generation: u64,
    back: Sender<VhostUserPort>,
    owner_wake: Arc<EventFd>,
    /// The pair failed on the holder (a ring error): the owner resets the port.
    broken: bool,
    /// The port's running pairs when the pair was lent (bit k: pair k),
    /// and the worker serving each: where a frame the holder switches to
    /// the port goes (see [`VhostUserPort::steer_away`]).
    mask: u32,
    map: [WorkerId; MAX_QUEUE_PAIRS],
}

/// A pair on its way to its holder, as a port.
#[derive(Debug)]
pub struct LentPair {
    /// The port's identity (frames from the pair are learned under it).
    pub id: PortId,
    /// `NAME:qK`.
    pub name: String,
    /// The port's forwarding policy.
    pub policy: PortPolicy,
    /// The port's policies, without coalescing and LRO (as the owner
    /// serves pairs other than pair 0).
    pub policies: Policies,
    /// The counters the holder writes.
    pub stats: Arc<PortStats>,
    /// The one-pair port.
    pub port: VhostUserPort,
}

impl Spread {
    /// Pair k served by `holders[k]` (None: at home, worker `home`).
    fn new(
        id: PortId,
        home: WorkerId,
        holders: Vec<Option<WorkerHandle>>,
        own_wake: Arc<EventFd>,
    ) -> Self {
        let (back_tx, back_rx) = mpsc::channel();
        Self {
            id,
            home,
            stats: (0..holders.len()).map(|_| Arc::default()).collect(),
            holders,
            place: [Place::Home; MAX_QUEUE_PAIRS],
            back_tx,
            back_rx,
            own_wake,
            generation: 0,
            quiet_since: Instant::now(),
            lends: 0,
        }
    }

    /// The worker serving each pair now, pair 0 first.
    pub fn workers(&self, pairs: usize) -> Vec<u32> {
        (0..pairs)
            .map(
                |k| match (self.place[k], self.holders.get(k).and_then(Option::as_ref)) {
                    (Place::Lent, Some(h)) => h.worker as u32,
                    _ => self.home as u32,
                },
            )
            .collect()
    }

    /// Pairs lent so far.
    pub fn lends(&self) -> u64 {
        self.lends
    }

    /// Adds the holders' counters to the owner's.
    pub fn merge(&self, snap: &mut PortStatsSnapshot) {
        for (k, s) in self.stats.iter().enumerate() {
            let held = s.snapshot();
            add(&mut snap.tx, &held.tx);
            add(&mut snap.rx, &held.rx);
            if let Some(p) = snap.queue_pairs.get_mut(k) {
                p.tx_packets += held.tx.packets;
                p.tx_bytes += held.tx.bytes;
                p.rx_packets += held.rx.packets;
                p.rx_bytes += held.rx.bytes;
            }
            // A lent pair is a one-queue port where it is served.
            if let Some(q) = snap.rx_queues.get_mut(k) {
                q.ring_full += held
                    .rx
                    .drops
                    .get(crate::stats::DropReason::RingFull.name())
                    .copied()
                    .unwrap_or(0);
            }
        }
    }

    /// The pairs with their holders (bit k: pair k).
    fn lent_mask(&self) -> u32 {
        (0..self.holders.len())
            .filter(|&k| self.place[k] == Place::Lent)
            .fold(0, |m, k| m | 1 << k)
    }

    /// True while some pair is not home.
    fn away(&self) -> bool {
        self.place.iter().any(|p| *p != Place::Home)
    }

    /// Asks every lent pair back.
    fn recall(&mut self) {
        for k in 0..self.holders.len() {
            if self.place[k] != Place::Lent {
                continue;
            }
            let Some(h) = &self.holders[k] else { continue };
            if h.commands.send(Command::ReturnPair(self.id, k)).is_ok() {
                let _ = h.wake.write(1);
                log::debug!(
                    "port id {}: queue pair {k} called back from worker {}",
                    self.id,
                    h.worker
                );
                self.place[k] = Place::Recalling;
            } else {
                // Its holder stopped (the switch is stopping): the pair is
                // gone, the port's next front-end sets it up again.
                log::warn!(
                    "port id {}: queue pair {k} lost with worker {}",
                    self.id,
                    h.worker
                );
                self.place[k] = Place::Home;
            }
        }
    }
}

impl Drop for Spread {
    /// The port is going: its holders give the pairs up (returned to a
    /// closed channel, they are dropped there, once unwatched).
    fn drop(&mut self) {
        self.recall();
    }
}

fn add(a: &mut QueueSnapshot, b: &QueueSnapshot) {
    a.packets += b.packets;
    a.bytes += b.bytes;
    a.notifications_sent += b.notifications_sent;
    a.notifications_received += b.notifications_received;
    a.notifications_suppressed += b.notifications_suppressed;
    a.notifications_coalesced += b.notifications_coalesced;
    a.sw_checksums += b.sw_checksums;
    a.sw_segmented += b.sw_segmented;
    a.lro_merged += b.lro_merged;
    a.egress_waits += b.egress_waits;
    a.mac_kept += b.mac_kept;
    a.mac_flaps += b.mac_flaps;
    a.held_frames += b.held_frames;
    a.held_dest_full += b.held_dest_full;
    for (r, n) in &b.drops {
        *a.drops.entry(r.clone()).or_default() += n;
    }
}

/// What became of a pair a holder returned.
pub enum Returned {
    /// Back in the device (or dropped: lent before a reset).
    Home,
    /// It failed on its holder: the port must be reset.
    Broken(usize, WorkerId),
}

impl VhostUserPort {
    /// Spreads the port's pairs: pair k to `holders[k]` when set.
    pub fn spread(
        &mut self,
        id: PortId,
        home: WorkerId,
        holders: Vec<Option<WorkerHandle>>,
        own_wake: Arc<EventFd>,
    ) {
        self.spread = Some(Box::new(Spread::new(id, home, holders, own_wake)));
    }

    /// The owner's view of its spread pairs (None: not spread).
    pub fn spread_state(&self) -> Option<&Spread> {
        self.spread.as_deref()
    }

    /// The pair this port is, when it is a pair lent by another worker's port.
    pub fn lent_pair(&self) -> Option<usize> {
        self.lent.as_ref().map(|l| l.pair)
    }

    /// True while a spread port's pairs are being called back: its
    /// connection is not read meanwhile (watched again once they are home).
    pub(super) fn pairs_recalling(&self) -> bool {
        self.spread
            .as_ref()
            .is_some_and(|s| s.place.contains(&Place::Recalling))
    }

    /// The front-end sent messages: lending waits for quiet.
    pub(super) fn spread_activity(&mut self) {
        if let Some(s) = self.spread.as_mut() {
            s.quiet_since = Instant::now();
        }
    }

    /// Before a message is read: asks the lent pairs back; true when some
    /// pair is not home yet (the message waits).
    pub fn recall_pairs(&mut self) -> bool {
        let Some(s) = self.spread.as_mut() else {
            return false;
        };
        s.recall();
        s.away()
    }

    /// The port was reset: pairs lent before are not put back.
    pub(super) fn spread_reset(&mut self) {
        if let Some(s) = self.spread.as_mut() {
            s.generation += 1;
            s.recall();
        }
    }

    /// Pairs due to be lent now (running, the front-end quiet), each
    /// moved out of the device as a one-pair port for its holder. `name`,
    /// `policy`, `policies`: the port's.
    pub fn lend_due(
        &mut self,
        now: Instant,
        name: &str,
        policy: &PortPolicy,
        policies: Policies,
    ) -> bool {
        let connected = self.connected();
        let Some(s) = self.spread.as_mut() else {
            return false;
        };
        if !connected || now.duration_since(s.quiet_since) < LEND_QUIET {
            return false;
        }
        let mut map = [s.home; MAX_QUEUE_PAIRS];
        for (k, h) in s.holders.iter().enumerate() {
            if let Some(h) = h {
                map[k] = h.worker;
            }
        }
        // The pairs running once those due are lent (they are running).
        let mask = self.device.ready_rx_pairs() | s.lent_mask();
        let mut lent = false;
        for k in 0..s.holders.len() {
            let Some(h) = &s.holders[k] else { continue };
            if s.place[k] != Place::Home || !self.device.pair_ready(k) {
                continue;
            }
            let port = VhostUserPort::lent_pair_port(
                &self.path,
                self.device.lend_pair(k),
                LentTo {
                    pair: k,
                    generation: s.generation,
                    back: s.back_tx.clone(),
                    owner_wake: Arc::clone(&s.own_wake),
                    broken: false,
                    mask,
                    map,
                },
                self.pairs,
                self.steer.clone(),
            );
            let lp = LentPair {
                id: s.id,
                name: format!("{name}:q{k}"),
                policy: policy.clone(),
                policies: Policies {
                    coalesce: crate::coalesce::Coalesce::Off,
                    lro: false,
                    ..policies
                },
                stats: Arc::clone(&s.stats[k]),
                port,
            };
            match h.pairs.send(lp) {
                Ok(()) => {
                    let _ = h.wake.write(1);
                    s.place[k] = Place::Lent;
                    s.lends += 1;
                    lent = true;
                    log::info!("port {name}: queue pair {k} lent to worker {}", h.worker);
                }
                Err(e) => {
                    let mut lp = e.0;
                    let d = std::mem::take(&mut lp.port.device);
                    self.device.take_back_pair(k, d);
                }
            }
        }
        lent
    }

    /// Takes back the pairs holders returned. None when nothing came.
    pub fn take_returned(&mut self, now: Instant) -> Option<Vec<Returned>> {
        let s = self.spread.as_mut()?;
        let mut out = Vec::new();
        while let Ok(mut p) = s.back_rx.try_recv() {
            let Some(l) = p.lent.take() else { continue };
            log::debug!("port id {}: queue pair {} back home", s.id, l.pair);
            s.place[l.pair] = Place::Home;
            s.quiet_since = now;
            if l.generation != s.generation {
                // Lent before a reset: the device it came from is gone.
                out.push(Returned::Home);
                continue;
            }
            if l.broken {
                let w = s.holders[l.pair].as_ref().map_or(s.home, |h| h.worker);
                out.push(Returned::Broken(l.pair, w));
                continue;
            }
            let d = std::mem::take(&mut p.device);
            self.device.take_back_pair(l.pair, d);
            out.push(Returned::Home);
        }
        (!out.is_empty()).then_some(out)
    }

    /// The holder's side: a one-pair port serving pair `lent.pair` of the
    /// port at `path`, steering with the port's key.
    fn lent_pair_port(
        path: &std::path::Path,
        device: Device,
        lent: LentTo,
        pairs: usize,
        steer: super::SteerKey,
    ) -> Self {
        let mut p = Self::bare(path);
        p.device = device;
        p.steer = steer;
        // Not a single-pair port: the fast case leaves it to the full path,
        // which steers.
        p.pairs = pairs;
        p.lent = Some(Box::new(lent));
        p
    }

    /// The worker that serves the pair a frame to this port steers to,
    /// when that is not this one (the owner's or a holder's view). Asked
    /// only for ports whose pairs are spread (`Slot::routed`).
    pub(crate) fn steer_away(&self, f: &crate::datapath::Frame<'_>) -> Option<WorkerId> {
        if let Some(s) = &self.spread {
            let lent = s.lent_mask();
            if lent == 0 {
                return None;
            }
            let k = super::steer::pair_for(&self.steer, f, self.device.ready_rx_pairs() | lent);
            return (lent & 1 << k != 0)
                .then(|| s.holders[k].as_ref().map(|h| h.worker))
                .flatten();
        }
        let l = self.lent.as_ref()?;
        let k = super::steer::pair_for(&self.steer, f, l.mask);
        (k != l.pair).then_some(l.map[k])
    }

    /// The pairs a frame delivered here may steer to: the running ones and,
    /// for a spread port's owner, the lent ones (the frame is then steered
    /// again among the running ones, see `deliver`).
    #[inline]
    pub(super) fn lent_mask(&self) -> u32 {
        self.spread.as_ref().map_or(0, |s| s.lent_mask())
    }

    /// The holder's side, after a ring error: the owner resets the port.
    pub(super) fn mark_broken(&mut self) {
        if let Some(l) = self.lent.as_mut() {
            l.broken = true;
        }
    }

    /// The holder gives the pair back to its owner (it unwatched the
    /// pair's descriptors first).
    pub fn send_back(self) {
        let Some(l) = self.lent.as_ref() else { return };
        let (back, wake) = (l.back.clone(), Arc::clone(&l.owner_wake));
        if back.send(self).is_ok() {
            let _ = wake.write(1);
        }
    }
}
