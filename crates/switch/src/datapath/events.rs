//! Notifications and descriptor events: when the guest is called, when
//! it is asked to kick, and what a readable descriptor means.

use super::teller::running_queues;
use super::{Datapath, FrameCtx, PortRuntime, Slot};
use crate::coalesce::{Coalescer, Decision};
use crate::config::Policies;
use crate::events::Kind;
use crate::port::vhost_user::ResetCause;
use crate::port::vhost_user::VhostUserPort;
use crate::port::Watch;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::conn::ConnError;
use crate::vhost_user::device::{rx_queue, tx_queue};
use crate::vhost_user::queue::ActiveQueue;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

impl PortRuntime {
    pub(super) fn new(p: &Policies) -> Self {
        Self {
            coalescer: Coalescer::new(p.effective_coalesce()),
            round_rx: 0,
            rx_unpublished: false,
            urgent: false,
            hold: None,
            tx_idle: 0,
            tx_armed: false,
            egress_held: false,
            lro: None,
            flow: None,
            cross: None,
        }
    }

    /// Counts a frame delivered to the receive queue of slot `j` (this
    /// port), listing the slot in `touched` for [`Datapath::publish_rx`]
    /// the first time since it last published.
    pub(super) fn delivered(&mut self, j: usize, touched: &mut Vec<usize>) {
        self.delivered_n(j, 1, touched);
    }

    /// Frames delivered to the receive queues this round.
    #[inline]
    pub(crate) fn round_rx(&self) -> u32 {
        self.round_rx
    }

    /// `n` frames delivered to slot `j` (a run of them, `datapath/fast.rs`).
    #[inline]
    pub(super) fn delivered_n(&mut self, j: usize, n: u32, touched: &mut Vec<usize>) {
        self.round_rx += n;
        if !self.rx_unpublished {
            self.rx_unpublished = true;
            touched.push(j);
        }
    }

    /// Publishes receive queue `q`'s used entries and calls its guest as
    /// the coalescing policy says ([`signal_rx`]); the held call's
    /// deadline, if any.
    #[inline]
    pub(crate) fn call_rx(
        &mut self,
        q: &mut ActiveQueue,
        now: Instant,
        stats: &crate::stats::QueueStats,
    ) -> Option<Instant> {
        self.hold = signal_rx(q, self, now, stats);
        self.hold
    }

    /// Forgets rates and holds (the front-end went away).
    pub(super) fn restart(&mut self) {
        self.coalescer.restart();
        self.round_rx = 0;
        self.urgent = false;
        self.hold = None;
        self.tx_idle = 0;
        self.tx_armed = false;
        self.flow = None;
        self.egress_held = false;
        if let Some(l) = self.lro.as_mut() {
            // The queue is gone: its chains with it.
            l.agg.abandon();
        }
    }
}

impl Datapath {
    /// The earliest instant a held call is due (the worker must poll by then).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next_deadline
    }

    /// True when every transmit queue asks its guest for kicks (the worker may sleep).
    pub fn all_tx_armed(&self) -> bool {
        self.table
            .slots
            .iter()
            .flatten()
            .all(|s| match s.port.vhost_user() {
                Some(p) => {
                    s.rt.tx_armed
                        || s.rt.egress_held
                        || !(0..p.device.queue_pairs()).any(|k| p.device.ready(tx_queue(k)))
                }
                _ => true,
            })
    }

    /// Before sleeping: asks every transmit queue for kicks. Returns true
    /// when frames arrived meanwhile (poll again instead).
    pub fn arm_notifications(&mut self) -> bool {
        let mut pending = false;
        for s in self.table.slots.iter_mut().flatten() {
            if s.rt.egress_held {
                // Its frames wait for the egress scheduler, whose timer
                // wakes the worker: a kick would not let them go sooner.
                continue;
            }
            if let Some(p) = s.port.vhost_user_mut() {
                for_tx(p, |q| {
                    pending |= q.enable_notification();
                    s.rt.tx_armed = true;
                });
            }
        }
        pending
    }

    /// After waking: tells transmit queues the worker is polling.
    pub fn disarm_notifications(&mut self) {
        for s in self.table.slots.iter_mut().flatten() {
            if let Some(p) = s.port.vhost_user_mut() {
                for_tx(p, |q| q.disable_notification());
                s.rt.tx_armed = false;
                s.rt.tx_idle = 0;
            }
        }
    }

    /// Handles an event on one of slot `idx`'s watched descriptors.
    pub fn on_event(&mut self, idx: usize, what: Watch, now: Instant) {
        // A message may replace a memory table or end a port.
        self.scratch.copies.release();
        if what == Watch::Connection {
            // The front-end's messages may stop or remap the queues: an LRO
            // aggregate's receive chains are returned first.
            self.lro_deliver(idx, now);
        }
        // What its messages start or stop is said after them.
        let before = match self.table.slots.get(idx).and_then(Option::as_ref) {
            Some(s) if what == Watch::Connection => running_queues(s),
            _ => 0,
        };
        let Some(s) = self.table.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        // Other kinds only note readiness; a front-end's events are here.
        let Some(p) = s.port.vhost_user_mut() else {
            s.port.on_readable();
            return;
        };
        match what {
            Watch::Listener => {
                if let Ok(true) = p.accept() {
                    s.stats.connections.fetch_add(1, Relaxed);
                    log::info!("port {}: front-end connected", s.name);
                    self.teller.tell(s, || Kind::Connected);
                }
            }
            // A spread port's pairs come home before any message is read
            // (its connection is unwatched until they are).
            Watch::Connection if p.recall_pairs() => self.table.mark_dirty(idx),
            Watch::Connection => match p.on_readable() {
                Ok(()) => {
                    // A migrated guest without GUEST_ANNOUNCE: QEMU's
                    // SEND_RARP, forwarded as if the guest sent it, points
                    // the FDB here and tells the segment.
                    if let Some(f) = p.device.take_announce_frame() {
                        log::info!(
                            "port {}: announcing the guest's address (SEND_RARP)",
                            s.name
                        );
                        self.forward_frame(
                            FrameCtx::new(idx, now),
                            Src::Local(&f),
                            f.len() as u64,
                            crate::wire::virtio_net::HEADER_LEN,
                        );
                    }
                }
                Err(ResetCause::Conn(ConnError::Closed)) => {
                    log::info!("port {}: front-end disconnected", s.name);
                    self.teller.tell(s, || Kind::Disconnected);
                    self.restart(idx, now);
                }
                Err(e) => {
                    let msg = crate::error_chain(&e);
                    self.reset(idx, now, &msg);
                }
            },
            Watch::Kick(q) => {
                if p.device.drain_kick(usize::from(q)) {
                    let qs = if q % 2 == 0 { &s.stats.rx } else { &s.stats.tx };
                    crate::stats::bump(&qs.notifications_received, 1);
                }
            }
        }
        if let Some(s) = self.table.slots.get(idx).and_then(Option::as_ref) {
            if what == Watch::Connection {
                self.teller.queues(s, before);
            }
        }
    }

    /// Time-driven port work (client reconnects); pushes slots whose watched set changed.
    pub fn tick(&mut self, now: Instant, changed: &mut Vec<usize>) {
        for (i, s) in self.table.slots.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            if let Some(p) = s.port.vhost_user_mut() {
                if p.tick(now) {
                    s.stats.connections.fetch_add(1, Relaxed);
                    log::info!("port {}: connected to front-end", s.name);
                    changed.push(i);
                    self.teller.tell(s, || Kind::Connected);
                }
            }
        }
    }

    /// Publishes what a transmit burst from slot `i`'s pair `pair` did: its
    /// used entries first, then the receive queues' its frames went to (the
    /// order a restart relies on, see `poll_round`). Published per burst,
    /// not per round, so each front-end sees its buffers come back and its
    /// frames arrive while the switch works on the next burst: the two sides
    /// overlap instead of taking turns. Calls are still decided per round.
    pub(super) fn publish_burst(&mut self, i: usize, pair: usize) {
        if let Some(q) = self.tx_queue(i, pair) {
            q.flush();
        }
        self.publish_rx();
    }

    /// Publishes the used entries of every receive queue delivered to since
    /// the last time.
    pub(super) fn publish_rx(&mut self) {
        for t in 0..self.rx_touched.len() {
            let j = self.rx_touched[t];
            let Some(s) = self.table.slots.get_mut(j).and_then(Option::as_mut) else {
                continue;
            };
            s.rt.rx_unpublished = false;
            if let Some(p) = s.port.vhost_user_mut() {
                for k in 0..p.device.queue_pairs() {
                    if let Some(q) = p.device.queue(rx_queue(k)) {
                        q.flush();
                    }
                }
            }
        }
        self.rx_touched.clear();
    }
}

/// Transmit busy-poll budget: after `tx_poll_budget` empty rounds the
/// guest is asked to kick again; a frame puts the queue back to polling.
pub(super) fn tx_budget(s: &mut Slot, popped: usize) {
    let Some(p) = s.port.vhost_user_mut() else {
        return;
    };
    if p.device.queue_pairs() > 1 {
        return tx_budget_pairs(p, &mut s.rt, &s.policies, popped);
    }
    let Some(q) = p.device.queue(tx_queue(0)) else {
        return;
    };
    if s.rt.egress_held && popped == 0 {
        // Not idle: held back (polled on the scheduler's timer).
        return;
    }
    if popped > 0 {
        s.rt.tx_idle = 0;
        if s.rt.tx_armed {
            s.rt.tx_armed = false;
            q.disable_notification();
        }
        return;
    }
    s.rt.tx_idle = s.rt.tx_idle.saturating_add(1);
    if !s.rt.tx_armed && s.rt.tx_idle >= s.policies.effective_tx_poll_budget() {
        s.rt.tx_armed = true;
        if q.enable_notification() {
            // Frames came while arming: the next round takes them.
            s.rt.tx_idle = 0;
        }
    }
}

/// [`tx_budget`] for a multiqueue guest: its transmit queues poll and arm
/// together (the port's budget counts rounds in which none had a frame).
fn tx_budget_pairs(p: &mut VhostUserPort, rt: &mut PortRuntime, pol: &Policies, popped: usize) {
    if rt.egress_held && popped == 0 {
        return;
    }
    if popped > 0 {
        rt.tx_idle = 0;
        if std::mem::take(&mut rt.tx_armed) {
            for_tx(p, |q| q.disable_notification());
        }
        return;
    }
    rt.tx_idle = rt.tx_idle.saturating_add(1);
    if !rt.tx_armed && rt.tx_idle >= pol.effective_tx_poll_budget() {
        rt.tx_armed = true;
        let mut pending = false;
        for_tx(p, |q| pending |= q.enable_notification());
        if pending {
            rt.tx_idle = 0;
        }
    }
}

/// Calls `f` on each of the port's running transmit queues.
fn for_tx(p: &mut VhostUserPort, mut f: impl FnMut(&mut ActiveQueue)) {
    for k in 0..p.device.queue_pairs() {
        if let Some(q) = p.device.queue(tx_queue(k)) {
            f(q);
        }
    }
}

/// A receive queue without a coalescing policy (a multiqueue guest's
/// pairs after the first): the used ring published, the guest called
/// when its driver wants a call.
pub(crate) fn signal_now(q: &mut ActiveQueue, stats: &crate::stats::QueueStats) {
    q.flush();
    if !q.used_pending() {
        return;
    }
    if q.driver_wants_call() {
        q.call(stats);
    } else {
        q.decline(stats);
    }
}

/// Receive-side calls: the used ring is published every round; the call
/// goes when the driver wants one and the coalescing policy agrees. Returns
/// when a held call is due.
pub(crate) fn signal_rx(
    q: &mut crate::vhost_user::queue::ActiveQueue,
    rt: &mut PortRuntime,
    now: Instant,
    stats: &crate::stats::QueueStats,
) -> Option<Instant> {
    q.flush();
    let k = std::mem::take(&mut rt.round_rx);
    rt.coalescer.delivered(now, k);
    if !q.used_pending() {
        return None;
    }
    if !q.driver_wants_call() {
        q.decline(stats);
        rt.coalescer.declined();
        return None;
    }
    let d = if std::mem::take(&mut rt.urgent) {
        Decision::Now
    } else {
        rt.coalescer.decide(now)
    };
    match d {
        Decision::Now => {
            q.call(stats);
            rt.coalescer.reset();
            None
        }
        Decision::Hold(t) => {
            if k > 0 {
                crate::stats::bump(&stats.notifications_coalesced, 1);
            }
            Some(t)
        }
    }
}
