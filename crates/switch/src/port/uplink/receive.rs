//! Frames from an uplink: each receive queue read in place from its ring
//! and handed to the switch, the queues taken in turns.

use super::{Rx, UplinkPort, HDR_LEN};
use crate::datapath::FrameCtx;
use crate::port::{in_turns, Port, Switch, QUEUE_TURN};
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use std::time::Instant;

impl UplinkPort {
    /// Up to `budget` frames from each of slot `i`'s receive queues, read
    /// in place from their rings, taken in turns (see [`in_turns`]): a
    /// frame in one queue waits for at most a turn of each other queue,
    /// not for a whole budget of a neighbour's flood (the service that
    /// makes a queue of one's own worth having; within one queue, frames
    /// go in order).
    pub(crate) fn receive_from<S: Switch>(
        sw: &mut S,
        i: usize,
        now: Instant,
        budget: usize,
    ) -> usize {
        let nq = match sw.port_mut(i) {
            Some(Port::Uplink(u)) => u.queue_count(),
            _ => return 0,
        };
        in_turns(nq, budget, QUEUE_TURN, |qi, limit| {
            receive_queue(sw, i, qi, now, limit)
        })
    }
}

/// Up to `limit` frames from receive queue `qi` of slot `i`'s uplink. The
/// queue is taken out of the port while its frames are forwarded (they
/// are read in place from its ring).
#[inline]
fn receive_queue<S: Switch>(sw: &mut S, i: usize, qi: usize, now: Instant, limit: usize) -> usize {
    let taken = match sw.port_mut(i) {
        Some(Port::Uplink(u)) => u.take_queue(qi),
        _ => None,
    };
    let Some(mut q) = taken else { return 0 };
    let to = q.direct;
    let mut m = 0;
    while m < limit {
        let len = match q.peek() {
            None => break,
            Some(Rx::Frame(f)) => {
                let cx = FrameCtx::new(i, now);
                sw.forward(cx, Src::Local(f), f.len() as u64, HDR_LEN, to);
                f.len()
            }
            Some(Rx::Unsupported) => {
                sw.drop_from(i, DropReason::Malformed);
                0
            }
        };
        q.release();
        q.packets += 1;
        q.bytes += len as u64;
        m += 1;
    }
    if let Some(Port::Uplink(u)) = sw.port_mut(i) {
        u.put_queue(qi, q);
    }
    m
}
