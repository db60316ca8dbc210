//! Frames from a guest: its transmit queues, a single-queue vNIC's at
//! once, a multiqueue vNIC's in turns. Each queue's burst is the data
//! path's (`Switch::forward_pair`): the fast case and the full path take
//! its chains in place in guest memory.

use super::VhostUserPort;
use crate::port::{in_turns, Port, Switch, QUEUE_TURN};
use std::time::Instant;

impl VhostUserPort {
    /// Up to `budget` frames from each of slot `i`'s transmit queues (see
    /// [`in_turns`]; pairs the guest did not enable have no queue).
    pub(crate) fn receive_from<S: Switch>(
        sw: &mut S,
        i: usize,
        now: Instant,
        budget: usize,
    ) -> usize {
        let pairs = match sw.port_mut(i) {
            Some(Port::VhostUser(p)) => p.device.queue_pairs(),
            _ => return 0,
        };
        in_turns(pairs, budget, QUEUE_TURN, |k, limit| {
            sw.forward_pair(i, k, pairs > 1, now, limit)
        })
    }
}
