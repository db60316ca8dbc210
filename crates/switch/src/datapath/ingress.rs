//! Ingress: frames taken from each kind of port (a guest's transmit ring
//! in bursts, a VXLAN port's datagrams in batches, an uplink's receive
//! queues in turns, a tap's reads), each handed to classification.

use super::fast::{Look, PlainTally};
use super::{Datapath, Fwd, Port};
use crate::port::uplink::{self};
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::device::tx_queue;
use crate::vhost_user::queue::{Burst, BURST};
use crate::wire::virtio_net::{self};
use std::time::Instant;

impl Datapath {
    pub(super) fn forward_from(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        match self.slots.get(i).and_then(Option::as_ref).map(|s| &s.port) {
            Some(Port::VhostUser(_)) => self.forward_from_vhost_user(i, now, budget),
            Some(Port::Tap(_)) => self.forward_from_tap(i, now, budget),
            Some(Port::Uplink(_)) => self.forward_from_uplink(i, now, budget),
            Some(Port::Vxlan(_)) => self.forward_from_vxlan(i, now, budget),
            None => 0,
        }
    }

    /// Up to `budget` datagrams from a VXLAN port, read in batches and
    /// switched in place from the port's receive slots; each inner frame's
    /// source is learned behind the VTEP that sent it.
    pub(super) fn forward_from_vxlan(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let taken = match self.slots[i].as_mut().map(|s| &mut s.port) {
                Some(Port::Vxlan(v)) => v.take_rx(budget - n),
                _ => None,
            };
            let Some(mut rx) = taken else { break };
            let mut got = 0;
            while let Some(r) = rx.next_frame() {
                got += 1;
                match r {
                    Ok(f) => {
                        let b = rx.frame(&f);
                        self.from_vtep = Some(f.from);
                        self.forward_frame(
                            i,
                            Src::Local(b),
                            b.len() as u64,
                            virtio_net::HEADER_LEN,
                            now,
                        );
                        self.from_vtep = None;
                    }
                    Err(reason) => {
                        if let Some(s) = &self.slots[i] {
                            s.stats.tx.drop(reason);
                        }
                    }
                }
            }
            if let Some(Port::Vxlan(v)) = self.slots[i].as_mut().map(|s| &mut s.port) {
                v.put_rx(rx);
            }
            n += got;
            if got == 0 {
                break;
            }
        }
        n
    }

    pub(super) fn forward_from_tap(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let Some(mut buf) = self.scratch.take() else {
            return 0;
        };
        let mut n = 0;
        while n < budget {
            let got = match self.slots[i].as_mut().map(|s| &mut s.port) {
                Some(Port::Tap(t)) => t.read(&mut buf),
                _ => None,
            };
            let Some(len) = got else { break };
            n += 1;
            self.forward_frame(
                i,
                Src::Local(&buf[..len]),
                len as u64,
                virtio_net::HEADER_LEN,
                now,
            );
        }
        self.scratch = Some(buf);
        n
    }

    /// Up to `budget` frames from each of the uplink's receive queues,
    /// read in place from their rings, taken in turns (see [`in_turns`]):
    /// a frame in one queue waits for at most a turn of each other queue,
    /// not for a whole budget of a neighbour's flood (the service that makes
    /// a queue of one's own worth having; within one queue, frames go in
    /// order).
    pub(super) fn forward_from_uplink(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let nq = match self.slots[i].as_ref().map(|s| &s.port) {
            Some(Port::Uplink(u)) => u.queue_count(),
            _ => return 0,
        };
        in_turns(nq, budget, QUEUE_TURN, |qi, limit| {
            self.forward_queue(i, qi, now, limit)
        })
    }

    /// Up to `limit` frames from receive queue `qi` of slot `i`'s uplink.
    #[inline]
    pub(super) fn forward_queue(
        &mut self,
        i: usize,
        qi: usize,
        now: Instant,
        limit: usize,
    ) -> usize {
        let taken = match self.slots[i].as_mut().map(|s| &mut s.port) {
            Some(Port::Uplink(u)) => u.take_queue(qi),
            _ => None,
        };
        let Some(mut q) = taken else { return 0 };
        let to = q.direct;
        let mut m = 0;
        while m < limit {
            let len = match q.peek() {
                None => break,
                Some(uplink::Rx::Frame(f)) => {
                    self.forward_frame_to(
                        i,
                        Src::Local(f),
                        f.len() as u64,
                        uplink::HDR_LEN,
                        now,
                        to,
                    );
                    f.len()
                }
                Some(uplink::Rx::Unsupported) => {
                    if let Some(s) = &self.slots[i] {
                        s.stats.tx.drop(DropReason::Malformed);
                    }
                    0
                }
            };
            q.release();
            q.packets += 1;
            q.bytes += len as u64;
            m += 1;
        }
        if let Some(Port::Uplink(u)) = self.slots[i].as_mut().map(|s| &mut s.port) {
            u.put_queue(qi, q);
        }
        m
    }

    /// Up to `budget` frames from each of a guest's transmit queues: the
    /// one of a single-queue vNIC at once, a multiqueue vNIC's in turns
    /// (see [`in_turns`]; pairs the guest did not enable have no queue).
    pub(super) fn forward_from_vhost_user(
        &mut self,
        i: usize,
        now: Instant,
        budget: usize,
    ) -> usize {
        let pairs = match self.slots[i].as_ref().map(|s| &s.port) {
            Some(Port::VhostUser(p)) => p.device.queue_pairs(),
            _ => return 0,
        };
        in_turns(pairs, budget, QUEUE_TURN, |k, limit| {
            self.forward_from_pair(i, k, pairs > 1, now, limit)
        })
    }

    /// Up to `budget` frames from the transmit queue of slot `i`'s pair
    /// `pair` (counted per pair when `multi`).
    fn forward_from_pair(
        &mut self,
        i: usize,
        pair: usize,
        multi: bool,
        now: Instant,
        budget: usize,
    ) -> usize {
        let (mem, hdr_len) = match self.slots[i].as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => {
                let hl = p.device.vnet_hdr_len();
                match p.device.queue(tx_queue(pair)) {
                    Some(q) => (q.mem().clone(), hl),
                    None => return 0,
                }
            }
            _ => return 0,
        };
        let Some(mut burst) = self.tx_burst.take() else {
            return 0;
        };
        if let Some(s) = self.slots[i].as_mut() {
            s.rt.egress_held = false;
        }
        burst.set_read_ahead(self.read_ahead.on());
        let mut n = 0;
        while n < budget {
            let want = (budget - n).min(BURST);
            let popped = match self.tx_queue(i, pair) {
                Some(q) => q.pop_burst(&mut burst, want),
                None => break,
            };
            self.perf.burst(burst.len(), burst.pending());
            let mut done = 0;
            let mut wait = false;
            let mut route = self.plain_route(i, now);
            let mut tally = PlainTally::default();
            let mut looks = [None; BURST];
            if let Some(r) = &route {
                Look::read_burst(&mem, &burst, hdr_len, r, &mut looks);
            }
            while done < burst.len() {
                // Plain frames in runs; the frame a run stopped at, alone.
                done += self.forward_plain_run(
                    i, &mem, &burst, done, hdr_len, now, &mut route, &mut tally, &looks,
                );
                if done == burst.len() {
                    break;
                }
                let (_, segs, len) = burst.chain(done);
                self.rx_hint = burst.len() - done;
                let looked = looks[done];
                let fwd = if self.forward_plain(
                    i, &mem, segs, len, hdr_len, now, &mut route, &mut tally, looked,
                ) || self
                    .forward_decided_anew(i, &mem, segs, len, hdr_len, now, &mut route, &mut tally)
                {
                    Fwd::Done
                } else {
                    // The full path may reset a port or deliver to one: the
                    // fast case's copies are made first.
                    self.copies.flush();
                    let src = Src::Guest { mem: &mem, segs };
                    let fwd = self.forward_frame(i, src, len, hdr_len, now);
                    // It may have learned, decided anew or changed a port.
                    route = self.plain_route(i, now);
                    fwd
                };
                self.rx_hint = 1;
                if fwd == Fwd::Wait {
                    // The uplink holds this port back: this frame and the
                    // ones after it stay in the guest's ring for a later round.
                    wait = true;
                    break;
                }
                done += 1;
            }
            n += done;
            // Every copy made before the chains go back and the receive
            // queues are published.
            self.copies.flush();
            self.count_plain(i, tally);
            // The chains forwarded go back to the guest together, published
            // with the receive queues they went to (`publish_burst`).
            let mut bad = None;
            if wait {
                if let Some(s) = self.slots[i].as_mut() {
                    s.rt.egress_held = true;
                }
            }
            if multi {
                self.count_pair(i, pair, &burst, done, hdr_len);
            }
            if let Some(q) = self.tx_queue(i, pair) {
                if wait {
                    q.unpop_n((burst.len() - done) as u16);
                }
                if let Err(e) = q.add_used_burst(&burst, done) {
                    bad = Some(e);
                }
            }
            if let Err(e) = popped {
                if let Some(s) = &self.slots[i] {
                    s.stats.tx.drop(DropReason::BadDescriptor);
                }
                bad = Some(e);
                n += 1;
            }
            if let Some(e) = bad {
                self.reset(i, now, &format_args!("transmit queue: {e}"));
                break;
            }
            self.publish_burst(i, pair);
            if wait || burst.len() < want {
                // Held back, or the ring is drained.
                break;
            }
        }
        self.tx_burst = Some(burst);
        if n == budget {
            // Frames are left for the next round: the port is still
            // backlogged toward the uplinks it sends to.
            let id = self.slots[i].as_ref().map(|s| s.id);
            for s in self.slots.iter_mut().flatten() {
                if let (Some(sched), Some(id)) = (s.port.sched_mut(), id) {
                    sched.backlogged(id);
                }
            }
        }
        n
    }

    /// The transmit queue of slot `i`'s pair `pair`, when it is a running vhost-user port.
    pub(super) fn tx_queue(
        &mut self,
        i: usize,
        pair: usize,
    ) -> Option<&mut crate::vhost_user::queue::ActiveQueue> {
        match self.slots.get_mut(i)?.as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => p.device.queue(tx_queue(pair)),
            _ => None,
        }
    }

    /// Counts the first `done` frames of `burst` on slot `i`'s pair `pair`.
    fn count_pair(&self, i: usize, pair: usize, burst: &Burst, done: usize, hdr_len: usize) {
        if let Some(s) = &self.slots[i] {
            let c = &s.stats.pair(pair).tx;
            for k in 0..done {
                c.frame((burst.chain(k).2 as usize).saturating_sub(hdr_len));
            }
        }
    }
}

/// Frames an uplink receive queue gives per turn before the next queue's
/// turn (a round gives each queue up to the budget, in turns). Small enough
/// that a frame on its own queue waits a few frames' work behind a flood on
/// the shared one, large enough that a busy queue still goes in bursts.
pub const QUEUE_TURN: usize = 8;

/// Serves `nq` queues, each up to `budget` items, in turns of up to `turn`:
/// queue 0, 1, .., nq-1, then again, until every queue has had its budget
/// or none gave a full turn (all drained). `serve(q, limit)` takes up to
/// `limit` items from queue `q` and says how many it took. A lone queue is
/// served its whole budget at once (no turns to take). Returns the items
/// taken.
#[inline]
pub(crate) fn in_turns(
    nq: usize,
    budget: usize,
    turn: usize,
    mut serve: impl FnMut(usize, usize) -> usize,
) -> usize {
    if nq == 1 {
        return serve(0, budget);
    }
    let turn = turn.max(1);
    let mut n = 0;
    let mut given = 0;
    while given < budget {
        let limit = turn.min(budget - given);
        // Whether some queue gave a full turn (it may have more).
        let mut more = false;
        for q in 0..nq {
            let m = serve(q, limit);
            more |= m == limit;
            n += m;
        }
        given += limit;
        if !more {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::{in_turns, QUEUE_TURN};

    /// Queues of items (the item is the queue's index), served through
    /// `in_turns` one round; the order in which items were taken.
    fn serve(queues: &mut [usize], budget: usize) -> Vec<usize> {
        let mut order = Vec::new();
        let n = in_turns(queues.len(), budget, QUEUE_TURN, |q, limit| {
            let m = queues[q].min(limit);
            queues[q] -= m;
            order.extend(std::iter::repeat_n(q, m));
            m
        });
        assert_eq!(n, order.len());
        order
    }

    #[test]
    fn a_frame_on_its_own_queue_waits_at_most_one_turn_of_a_flood() {
        // A flood of 1000 frames on the shared queue 0, one latency frame on
        // queue 1 (and an empty queue 2).
        let mut q = [1000, 1, 0];
        let order = serve(&mut q, 64);
        let at = order.iter().position(|&x| x == 1).unwrap();
        assert_eq!(at, QUEUE_TURN, "{order:?}");
        // The flood still gets its whole budget in the round.
        assert_eq!(order.iter().filter(|&&x| x == 0).count(), 64);
        assert_eq!(q, [1000 - 64, 0, 0]);
    }

    #[test]
    fn each_queue_gets_its_budget_in_turns_and_no_more() {
        let mut q = [100, 100, 5];
        let order = serve(&mut q, 20);
        assert_eq!(q, [80, 80, 0]);
        // Turns of 8, then the budget's remaining 4.
        let mut want = Vec::new();
        for (lim, last) in [(8, 5), (8, 0), (4, 0)] {
            want.extend(std::iter::repeat_n(0, lim));
            want.extend(std::iter::repeat_n(1, lim));
            want.extend(std::iter::repeat_n(2, last));
        }
        assert_eq!(order, want);
    }

    #[test]
    fn drained_queues_end_the_round_early_and_a_lone_queue_goes_whole() {
        let mut calls = 0;
        let n = in_turns(3, 64, QUEUE_TURN, |_, _| {
            calls += 1;
            0
        });
        assert_eq!((n, calls), (0, 3), "one pass over empty queues");
        let mut limits = Vec::new();
        in_turns(1, 64, QUEUE_TURN, |_, limit| {
            limits.push(limit);
            limit
        });
        assert_eq!(limits, [64], "a lone queue is served in one go");
        let mut q = [3, 9];
        assert_eq!(serve(&mut q, 64), [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    }
}
