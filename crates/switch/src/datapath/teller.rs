//! What the data path says (`crate::events`): a fixed-size event into the
//! shared bounded queue, never waiting and never allocating, only on rare
//! paths (a connection, a front-end's messages, a reset, a move, a flap).
//!
//! What the FDB's rule for moves (`crate::fdb::moves`) did with a frame's
//! source is said here too: a refusal counted on the sending port, a flap
//! counted on the port that had taken the address and said in one line
//! naming both ports (at most one line a second per worker: an attacker
//! who keeps flapping addresses shows in the counters, not in a flooded
//! log), a move said as an event (at most [`MOVES_SAID`] a second per
//! worker: the rule lets one address move at most once per quiet time, but
//! many addresses may move at once, and the events' one queue is shared).

use super::{FrameCtx, Slot};
use crate::events::{EventQueue, Kind, Name};
use crate::fdb::Learned;
use crate::forward::L2Header;
use crate::stats::{bump, DropReason};
use crate::vhost_user::device::{rx_queue, Device};
use crate::PortId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Least time between two lines about flaps.
const SAY_EVERY: Duration = Duration::from_secs(1);
/// Most move events one worker says in a second.
pub const MOVES_SAID: u32 = 64;

/// Where what changes is said, and how much was said lately.
#[derive(Default)]
pub(super) struct Teller {
    /// The events' queue; none in a bare data path.
    queue: Option<Arc<EventQueue>>,
    /// When a flap was last said in the log.
    flap_said: Option<Instant>,
    /// When the current second of move events began, and how many were said.
    moves_said: (Option<Instant>, u32),
}

impl Teller {
    /// Says what changes into `q` from now on.
    pub(super) fn set_queue(&mut self, q: Arc<EventQueue>) {
        self.queue = Some(q);
    }

    /// Says `kind` (built only when the queue has room) about port `s`.
    #[cold]
    pub(super) fn tell(&self, s: &Slot, kind: impl FnOnce() -> Kind) {
        if let Some(q) = &self.queue {
            q.push(s.id, &s.name, kind);
        }
    }

    /// Says what a front-end's messages changed on port `s`, whose running
    /// queues were `before` ([`running_queues`]): its first queue starting
    /// is the end of its negotiation, then each queue that started or
    /// stopped.
    #[cold]
    pub(super) fn queues(&self, s: &Slot, before: u64) {
        let after = running_queues(s);
        if after == before || self.queue.is_none() {
            return;
        }
        // A front-end that went: its disconnection or reset says so.
        let Some(p) = s.port.vhost_user().filter(|p| p.connected()) else {
            return;
        };
        if before == 0 {
            let d = &p.device;
            self.tell(s, || Kind::Negotiated {
                features: d.acked_features(),
                protocol_features: d.acked_protocol(),
                queue_pairs: d.queue_pairs() as u16,
                ring_size: d.ring_size(rx_queue(0)),
            });
        }
        for q in 0..64 {
            let (was, is) = (before >> q & 1 == 1, after >> q & 1 == 1);
            if was != is {
                self.tell(s, || Kind::Queue {
                    queue: q as u16,
                    enabled: is,
                });
            }
        }
    }

    /// Counts and says what learning the source of a frame from slot
    /// `cx.from` of `slots` (header `l2`, VLAN `vid`) did, when it was not
    /// a plain refresh or addition.
    pub(super) fn learned(
        &mut self,
        cx: FrameCtx,
        slots: &[Option<Slot>],
        l2: &L2Header,
        vid: u16,
        learned: Learned,
    ) {
        let Some(me) = slots[cx.from].as_ref() else {
            return;
        };
        let named = |id: PortId| slots.iter().flatten().find(|s| s.id == id);
        match learned {
            Learned::PortLimit => me.stats.tx.drop(DropReason::FdbLimit),
            Learned::Kept => bump(&me.stats.tx.mac_kept, 1),
            Learned::Moved { from } if self.may_say_move(cx.now) => {
                self.tell(me, || Kind::MacMoved {
                    mac: l2.src.0,
                    vid,
                    from: name_of(named(from), from),
                });
            }
            Learned::Flapped { from } => {
                let taker = named(from);
                if let Some(t) = taker {
                    bump(&t.stats.tx.mac_flaps, 1);
                }
                // Every flap is an event (the queue bounds a storm of them).
                self.tell(me, || Kind::MacFlap {
                    mac: l2.src.0,
                    from: name_of(taker, from),
                });
                if self.flap_said.is_some_and(|t| cx.now < t + SAY_EVERY) {
                    return;
                }
                self.flap_said = Some(cx.now);
                let taker = taker.map_or_else(|| format!("port {}", from.0), |t| t.name.clone());
                let vtep = cx
                    .from_vtep
                    .map(|v| format!(" behind VTEP {v}"))
                    .unwrap_or_default();
                log::warn!(
                    "switch: address {} flapped: {taker} took it while {}{vtep} was sending from it; \
                     it stays with {} for the hold time (counter mac_flaps on {taker})",
                    l2.src,
                    me.name,
                    me.name,
                );
            }
            _ => {}
        }
    }

    /// True when one more move may be said in the current second.
    fn may_say_move(&mut self, now: Instant) -> bool {
        let (since, said) = &mut self.moves_said;
        if since.map_or(true, |t| now >= t + SAY_EVERY) {
            (*since, *said) = (Some(now), 0);
        }
        if *said >= MOVES_SAID || self.queue.is_none() {
            return false;
        }
        *said += 1;
        true
    }
}

/// A port's name in an event: its own, or its number when it left.
fn name_of(s: Option<&Slot>, id: PortId) -> Name {
    s.map_or_else(
        || Name::display(&format_args!("port {}", id.0)),
        |t| Name::new(&t.name),
    )
}

/// The running queues of port `s` (a vhost-user port's), one bit each.
pub(super) fn running_queues(s: &Slot) -> u64 {
    s.port.vhost_user().map_or(0, |p| running(&p.device))
}

fn running(d: &Device) -> u64 {
    (0..(2 * d.queue_pairs()).min(64))
        .filter(|&q| d.ready(q))
        .fold(0, |m, q| m | 1 << q)
}
