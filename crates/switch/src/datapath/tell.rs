//! Saying what changes (`crate::events`): a fixed-size event into the
//! shared bounded queue, never waiting and never allocating. Only on
//! rare paths (a connection, a front-end's messages, a reset, a flap).

use super::Datapath;
use crate::events::{EventQueue, Kind};
use crate::vhost_user::device::{rx_queue, Device};
use std::sync::Arc;

impl Datapath {
    /// Says what changes into `q` from now on.
    pub fn set_events(&mut self, q: Arc<EventQueue>) {
        self.events = Some(q);
    }

    /// Says `kind` (built only when the queue has room) about slot `idx`.
    /// Slot `idx`'s port, when it is a vhost-user port.
    fn vhost_user(&self, idx: usize) -> Option<&crate::port::vhost_user::VhostUserPort> {
        self.slots.get(idx)?.as_ref()?.port.vhost_user()
    }

    #[cold]
    pub(super) fn tell(&self, idx: usize, kind: impl FnOnce() -> Kind) {
        if let (Some(q), Some(s)) = (&self.events, self.slots.get(idx).and_then(Option::as_ref)) {
            q.push(s.id, &s.name, kind);
        }
    }

    /// The running queues of vhost-user slot `idx`, one bit each.
    pub(super) fn running_queues(&self, idx: usize) -> u64 {
        self.vhost_user(idx).map_or(0, |p| running(&p.device))
    }

    /// Says what a front-end's messages changed on slot `idx`, whose
    /// running queues were `before`: its first queue starting is the end
    /// of its negotiation, then each queue that started or stopped.
    #[cold]
    pub(super) fn tell_queues(&self, idx: usize, before: u64) {
        let after = self.running_queues(idx);
        if after == before || self.events.is_none() {
            return;
        }
        // A front-end that went: its disconnection or reset says so.
        let connected = self.vhost_user(idx).is_some_and(|p| p.connected());
        if !connected {
            return;
        }
        if before == 0 {
            if let Some(p) = self.vhost_user(idx) {
                let d = &p.device;
                self.tell(idx, || Kind::Negotiated {
                    features: d.acked_features(),
                    protocol_features: d.acked_protocol(),
                    queue_pairs: d.queue_pairs() as u16,
                    ring_size: d.ring_size(rx_queue(0)),
                });
            }
        }
        for q in 0..64 {
            let (was, is) = (before >> q & 1 == 1, after >> q & 1 == 1);
            if was != is {
                self.tell(idx, || Kind::Queue {
                    queue: q as u16,
                    enabled: is,
                });
            }
        }
    }
}

fn running(d: &Device) -> u64 {
    (0..(2 * d.queue_pairs()).min(64))
        .filter(|&q| d.ready(q))
        .fold(0, |m, q| m | 1 << q)
}
