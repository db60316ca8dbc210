//! Ingress: the data path's side of taking frames from ports. Each kind
//! of port receives its own way (`crate::port`, its `receive`) and hands
//! frames back through [`Switch`]: one at a time to classification, or a
//! guest's transmit ring a burst at a time to the fast case and the full
//! path here. Frames other workers switched to this one's ports come
//! through their rings (`peers.rs`), decided already: they are delivered.

use super::fast::{Look, PlainTally};
use super::{head_of, Datapath, Frame, FrameCtx, Fwd, Port};
use crate::mesh::{Kind, Record, RECORD_HEADER};
use crate::port::Switch;
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::chain::ChainError;
use crate::vhost_user::device::tx_queue;
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::{Burst, BURST};
use crate::PortId;
use std::sync::Arc;
use std::time::Instant;

impl Switch for Datapath {
    #[inline]
    fn port_mut(&mut self, i: usize) -> Option<&mut Port> {
        self.table.slots.get_mut(i)?.as_mut().map(|s| &mut s.port)
    }

    #[inline]
    fn drop_from(&self, i: usize, reason: DropReason) {
        if let Some(s) = self.table.slots.get(i).and_then(Option::as_ref) {
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
    /// `pair` (counted per pair when `multi`), a burst at a time: each
    /// burst popped, forwarded ([`Datapath::forward_burst`]) and given back
    /// ([`Datapath::give_back`]), until the budget is spent, the ring is
    /// drained, an uplink holds the port back or the ring fails.
    fn forward_from_pair(
        &mut self,
        i: usize,
        pair: usize,
        multi: bool,
        now: Instant,
        budget: usize,
    ) -> usize {
        let Some((mem, hdr_len)) = self.pair_source(i, pair) else {
            return 0;
        };
        let Some(mut burst) = self.tx_burst.take() else {
            return 0;
        };
        if let Some(s) = self.table.slots[i].as_mut() {
            s.rt.egress_held = false;
        }
        burst.set_read_ahead(self.clock.read_ahead());
        let mut n = 0;
        while n < budget {
            let want = (budget - n).min(BURST);
            let popped = match self.tx_queue(i, pair) {
                Some(q) => q.pop_burst(&mut burst, want),
                None => break,
            };
            self.clock.perf.burst(burst.len(), burst.pending());
            let (done, wait) = self.forward_burst(i, &mem, &burst, hdr_len, now);
            n += done + usize::from(popped.is_err());
            let given = Given {
                done,
                wait,
                popped,
                multi,
            };
            if !self.give_back(i, pair, &burst, hdr_len, given, now) {
                break;
            }
            if wait || burst.len() < want {
                // Held back, or the ring is drained.
                break;
            }
        }
        self.tx_burst = Some(burst);
        if n == budget {
            self.backlogged(i);
        }
        n
    }

    /// The memory and virtio-net header length of slot `i`'s transmit
    /// queue `pair`, when it runs.
    #[inline]
    fn pair_source(&mut self, i: usize, pair: usize) -> Option<(Arc<GuestMem>, usize)> {
        let p = self.table.slots[i].as_mut()?.port.vhost_user_mut()?;
        let hl = p.device.vnet_hdr_len();
        let q = p.device.queue(tx_queue(pair))?;
        Some((q.mem().clone(), hl))
    }

    /// Forwards the chains of `burst` from slot `i`: plain frames on the
    /// fast case in runs, the frame a run stopped at alone (fast case, a
    /// decision made anew, or the full path). Returns the frames done and
    /// whether an uplink holds the rest back (they stay in the ring).
    /// Every copy is made before it returns.
    #[inline(always)]
    fn forward_burst(
        &mut self,
        i: usize,
        mem: &Arc<GuestMem>,
        burst: &Burst,
        hdr_len: usize,
        now: Instant,
    ) -> (usize, bool) {
        let mut done = 0;
        let mut wait = false;
        let mut route = self.plain_route(i, now);
        let mut tally = PlainTally::default();
        let mut looks = [None; BURST];
        if let Some(r) = &route {
            Look::read_burst(mem, burst, hdr_len, r, &mut looks);
        }
        while done < burst.len() {
            // Plain frames in runs; the frame a run stopped at, alone.
            done += self.forward_plain_run(
                i, mem, burst, done, hdr_len, now, &mut route, &mut tally, &looks,
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
                .forward_plain(cx, mem, segs, len, hdr_len, &mut route, &mut tally, looked)
                || self.forward_decided_anew(cx, mem, segs, len, hdr_len, &mut route, &mut tally)
            {
                Fwd::Done
            } else {
                // The full path may reset a port or deliver to one: the
                // fast case's copies are made first.
                self.scratch.copies.flush();
                let src = Src::Guest { mem, segs };
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
        // Every copy made before the chains go back and the receive
        // queues are published.
        self.scratch.copies.flush();
        self.count_plain(i, tally);
        (done, wait)
    }

    /// Gives a forwarded burst's chains back to slot `i`'s guest (pair
    /// `pair`), published together with the receive queues they went to
    /// (`publish_burst`); the chains held back stay in the ring. False
    /// when the ring failed (popping, or taking them back) and the port
    /// was reset.
    #[inline(always)]
    fn give_back(
        &mut self,
        i: usize,
        pair: usize,
        burst: &Burst,
        hdr_len: usize,
        g: Given,
        now: Instant,
    ) -> bool {
        let mut bad = None;
        if g.wait {
            if let Some(s) = self.table.slots[i].as_mut() {
                s.rt.egress_held = true;
                let held = (burst.len() - g.done) as u64;
                crate::stats::bump(&s.stats.tx.held_frames, held);
            }
        }
        if g.multi {
            self.count_pair(i, pair, burst, g.done, hdr_len);
        }
        if let Some(q) = self.tx_queue(i, pair) {
            if g.wait {
                q.unpop_n((burst.len() - g.done) as u16);
            }
            if let Err(e) = q.add_used_burst(burst, g.done) {
                bad = Some(e);
            }
        }
        if let Err(e) = g.popped {
            if let Some(s) = &self.table.slots[i] {
                s.stats.tx.drop(DropReason::BadDescriptor);
            }
            bad = Some(e);
        }
        if let Some(e) = bad {
            self.reset(i, now, &format_args!("transmit queue: {e}"));
            return false;
        }
        self.publish_burst(i, pair);
        true
    }

    /// Slot `i` has frames left for the next round: it is still
    /// backlogged toward the uplinks it sends to.
    fn backlogged(&mut self, i: usize) {
        let Some(id) = self.table.slots[i].as_ref().map(|s| s.id) else {
            return;
        };
        for s in self.table.slots.iter_mut().flatten() {
            if let Some(sched) = s.port.sched_mut() {
                sched.backlogged(id);
            }
        }
    }

    /// The transmit queue of slot `i`'s pair `pair`, when it is a running vhost-user port.
    pub(super) fn tx_queue(
        &mut self,
        i: usize,
        pair: usize,
    ) -> Option<&mut crate::vhost_user::queue::ActiveQueue> {
        let p = self
            .table
            .slots
            .get_mut(i)?
            .as_mut()?
            .port
            .vhost_user_mut()?;
        p.device.queue(tx_queue(pair))
    }

    /// Counts the first `done` frames of `burst` on slot `i`'s pair `pair`.
    fn count_pair(&self, i: usize, pair: usize, burst: &Burst, done: usize, hdr_len: usize) {
        if let Some(s) = &self.table.slots[i] {
            let c = &s.stats.pair(pair).tx;
            for k in 0..done {
                c.frame((burst.chain(k).2 as usize).saturating_sub(hdr_len));
            }
        }
    }

    /// Takes up to `budget` records from each other worker and delivers
    /// them to this worker's ports. Returns the records taken.
    pub(super) fn poll_peers(&mut self, now: Instant, budget: usize) -> usize {
        let mut work = 0;
        for k in 0..self.peers.rings.len() {
            let Some(mut rx) = self.peers.rings[k].rx.take() else {
                continue;
            };
            let mut n = 0;
            while n < budget {
                let Some(rec) = rx.peek() else { break };
                self.on_record(rec, now);
                rx.pop();
                n += 1;
            }
            if n > 0 {
                rx.release();
            }
            work += n;
            self.peers.rings[k].rx = Some(rx);
        }
        work
    }

    fn on_record(&mut self, rec: &[u8], now: Instant) {
        let Some(r) = Record::parse(rec) else { return };
        if r.kind == Kind::Flush {
            self.fdb.flush_port(r.src);
            return;
        }
        let bytes = &rec[RECORD_HEADER..];
        if bytes.len() < 14 + usize::from(r.src_tag_len) {
            return;
        }
        // The port's limit and the rule for moves were applied where it
        // lives: learn what was learned there (only the table's capacity here).
        if r.learn {
            self.fdb.learn_told(
                r.vid,
                crate::wire::EthernetAddress::from_bytes(&bytes[6..12]),
                r.src,
                now,
            );
        }
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&bytes[..12]);
        let frame = Frame {
            src: Src::Local(bytes),
            head: head_of(bytes),
            hdr_len: 0,
            vhdr: r.vhdr,
            macs,
            src_tag_len: u64::from(r.src_tag_len),
            tci_pcp: r.tci_pcp,
            frame_len: bytes.len() as u64,
        };
        for j in 0..self.table.slots.len() {
            let Some(s) = self.table.slots[j].as_ref() else {
                continue;
            };
            // A flood reached the wire through the uplink's own worker.
            let wanted = match r.dest {
                Some(p) => s.id == p,
                None => s.id != r.src && !s.port.is_lent(),
            };
            if !wanted {
                continue;
            }
            if let Some(tagging) = s.policy.vlan.egress(r.vid) {
                let mut cx = FrameCtx::new(FrameCtx::REMOTE, now);
                if r.dest.is_some() {
                    let dst = crate::wire::EthernetAddress::from_bytes(&bytes[..6]);
                    cx.to_vtep = self.vtep_of(j, r.vid, dst, now);
                }
                self.deliver_to(j, &frame, tagging, cx);
            }
            if r.dest.is_some() {
                return;
            }
        }
        // No such port here: a pair lent to this worker whose frames came
        // before it did (taken from the inbox, the frame is delivered).
        if r.dest.is_some() && self.take_held_pairs() {
            self.on_record(rec, now);
        }
    }
}

/// What became of a burst, for [`Datapath::give_back`].
struct Given {
    /// Chains forwarded (the rest are held back when `wait`).
    done: usize,
    /// An uplink holds the port back.
    wait: bool,
    /// How popping the burst went.
    popped: Result<(), ChainError>,
    /// A multiqueue vNIC's pair (counted per pair).
    multi: bool,
}
