//! Ingress: the data path's side of taking frames from ports. Each kind
//! of port receives its own way (`crate::port`, its `receive`) and hands
//! frames back through [`Switch`]: one at a time to classification, or a
//! guest's transmit ring a burst at a time to the fast case and the full
//! path here.

use super::fast::{Look, PlainTally};
use super::{Datapath, FrameCtx, Fwd, Port};
use crate::port::Switch;
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::device::tx_queue;
use crate::vhost_user::queue::{Burst, BURST};
use crate::PortId;
use std::time::Instant;

impl Switch for Datapath {
    #[inline]
    fn port_mut(&mut self, i: usize) -> Option<&mut Port> {
        self.slots.get_mut(i)?.as_mut().map(|s| &mut s.port)
    }

    #[inline]
    fn drop_from(&self, i: usize, reason: DropReason) {
        if let Some(s) = self.slots.get(i).and_then(Option::as_ref) {
            s.stats.tx.drop(reason);
        }
    }

    #[inline]
    fn forward(
        &mut self,
        cx: FrameCtx,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        direct: Option<PortId>,
    ) -> Fwd {
        self.forward_frame_to(cx, src, total, hdr_len, direct)
    }

    #[inline]
    fn forward_pair(
        &mut self,
        i: usize,
        pair: usize,
        multi: bool,
        now: Instant,
        budget: usize,
    ) -> usize {
        self.forward_from_pair(i, pair, multi, now, budget)
    }
}

impl Datapath {
    /// Up to `budget` frames from slot `i`'s port.
    pub(super) fn forward_from(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        crate::port::receive(self, i, now, budget)
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
                let cx = FrameCtx {
                    rx_hint: burst.len() - done,
                    ..FrameCtx::new(i, now)
                };
                let looked = looks[done];
                let fwd = if self
                    .forward_plain(cx, &mem, segs, len, hdr_len, &mut route, &mut tally, looked)
                    || self
                        .forward_decided_anew(cx, &mem, segs, len, hdr_len, &mut route, &mut tally)
                {
                    Fwd::Done
                } else {
                    // The full path may reset a port or deliver to one: the
                    // fast case's copies are made first.
                    self.scratch.copies.flush();
                    let src = Src::Guest { mem: &mem, segs };
                    let fwd = self.forward_frame(cx, src, len, hdr_len);
                    // It may have learned, decided anew or changed a port.
                    route = self.plain_route(i, now);
                    fwd
                };
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
            self.scratch.copies.flush();
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
