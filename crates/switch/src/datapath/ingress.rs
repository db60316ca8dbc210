//! Ingress: frames taken from each kind of port and classified (FDB,
//! VLAN, direct mode, egress admission) before delivery.

use super::{is_lent, Datapath, FlowMemo, Frame, Fwd, Port, MAX_FRAME};
use crate::fdb::Learned;
use crate::forward::{decide, Destination, L2Header};
use crate::offload::{self, Caps, Reject};
use crate::port::uplink::{self};
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::device::TX_QUEUE;
use crate::vhost_user::queue::BURST;
use crate::vlan::Tagging;
use crate::wire::virtio_net::{self, VirtioNetHdr, VirtioNetHdrRepr};
use crate::PortId;
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

    pub(super) fn forward_from_vhost_user(
        &mut self,
        i: usize,
        now: Instant,
        budget: usize,
    ) -> usize {
        let (mem, hdr_len) = match self.slots[i].as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => {
                let hl = p.device.vnet_hdr_len();
                match p.device.queue(TX_QUEUE) {
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
        let mut n = 0;
        while n < budget {
            let want = (budget - n).min(BURST);
            let popped = match self.tx_queue(i) {
                Some(q) => q.pop_burst(&mut burst, want),
                None => break,
            };
            self.perf.burst(burst.len(), burst.pending());
            let mut done = 0;
            let mut wait = false;
            while done < burst.len() {
                let (_, segs, len) = burst.chain(done);
                let src = Src::Guest { mem: &mem, segs };
                self.rx_hint = burst.len() - done;
                let fwd = self.forward_frame(i, src, len, hdr_len, now);
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
            // The chains forwarded go back to the guest together (the used
            // index is published once per round, in `poll`).
            let mut bad = None;
            if wait {
                if let Some(s) = self.slots[i].as_mut() {
                    s.rt.egress_held = true;
                }
            }
            if let Some(q) = self.tx_queue(i) {
                if wait {
                    q.unpop_n((burst.len() - done) as u16);
                }
                for k in 0..done {
                    if let Err(e) = q.add_used(burst.chain(k).0, 0) {
                        bad = Some(e);
                        break;
                    }
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
                if let (Port::Uplink(u), Some(id)) = (&mut s.port, id) {
                    u.sched.backlogged(id);
                }
            }
        }
        n
    }

    /// Slot `i`'s transmit queue, when it is a running vhost-user port.
    pub(super) fn tx_queue(
        &mut self,
        i: usize,
    ) -> Option<&mut crate::vhost_user::queue::ActiveQueue> {
        match self.slots.get_mut(i)?.as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => p.device.queue(TX_QUEUE),
            _ => None,
        }
    }

    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len`
    /// first) from slot `i`, switched.
    pub(super) fn forward_frame(
        &mut self,
        i: usize,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        now: Instant,
    ) -> Fwd {
        self.forward_frame_to(i, src, total, hdr_len, now, None)
    }

    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len` first) from slot `i`.
    /// `direct`: a direct-mode port the frame goes to as it is (it came
    /// in on that port's uplink queue); a frame from a direct-mode port goes
    /// as it is to its uplink. Neither is switched (no FDB, VLAN or QoS).
    pub(super) fn forward_frame_to(
        &mut self,
        i: usize,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        now: Instant,
        direct: Option<PortId>,
    ) -> Fwd {
        let Some(stats) = self.slots[i].as_ref().map(|s| &s.stats) else {
            return Fwd::Done;
        };
        let mut pre = [0u8; virtio_net::HEADER_LEN + L2Header::MAX_LEN];
        let want = (hdr_len + L2Header::MAX_LEN).min(total as usize);
        let got = src.read(0, &mut pre[..want]);
        let frame_len = total.saturating_sub(hdr_len as u64);
        if got < hdr_len || frame_len > MAX_FRAME {
            stats.tx.drop(DropReason::Malformed);
            return Fwd::Done;
        }
        let vhdr = match VirtioNetHdr::new_checked(&pre[..hdr_len], hdr_len)
            .and_then(|h| VirtioNetHdrRepr::parse(&h))
        {
            Ok(h) => h,
            Err(_) => {
                stats.tx.drop(DropReason::Malformed);
                return Fwd::Done;
            }
        };
        let l2 = match L2Header::parse(&pre[hdr_len..got]) {
            Ok(l2) => l2,
            Err(r) => {
                stats.tx.drop(r);
                return Fwd::Done;
            }
        };
        let src_tag_len: u64 = if l2.tag.is_some() { 4 } else { 0 };
        let sender = self.slots[i]
            .as_ref()
            .map_or(Caps::NONE, |s| s.port.tx_caps());
        if let Err(r) = offload::check(&vhdr, frame_len as usize, 14 + src_tag_len as usize, sender)
        {
            stats.tx.drop(match r {
                Reject::Malformed => DropReason::Malformed,
                Reject::Unsupported => DropReason::Offload,
            });
            return Fwd::Done;
        }
        stats.tx.frame(frame_len as usize);
        let direct = direct.or_else(|| self.slots[i].as_ref().and_then(|s| s.direct_up));
        if let Some(to) = direct {
            let frame = Frame {
                src,
                head: &pre[hdr_len..got],
                hdr_len,
                vhdr,
                macs: pre[hdr_len..hdr_len + 12].try_into().unwrap_or([0; 12]),
                src_tag_len,
                tci_pcp: if l2.tag.is_some() {
                    u16::from(pre[hdr_len + 14] & 0xe0) << 8
                } else {
                    0
                },
                frame_len,
            };
            // The frame leaves with the tag it came with, if any.
            let tagging = l2.tag.map_or(Tagging::Untagged, Tagging::Tagged);
            match self
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.id == to))
            {
                Some(j) => self.deliver_to(j, &frame, tagging, now),
                None => {
                    if let Some(s) = &self.slots[i] {
                        s.stats.tx.drop(DropReason::NoRoute);
                    }
                }
            }
            return Fwd::Done;
        }
        let Datapath {
            slots,
            fdb,
            remote,
            topo_gen,
            ..
        } = self;
        let Some(me) = slots[i].as_ref() else {
            return Fwd::Done;
        };
        let src_id = me.id;
        let learn = me.needs_mac;
        if let (Some(vtep), Some(vid)) = (self.from_vtep, me.policy.vlan.ingress(l2.tag)) {
            // Before the decision (whose own learning keeps the VTEP): a
            // new VTEP changes the generation, so no memo outlives it.
            fdb.learn_remote(vid, l2.src, src_id, me.policy.fdb_limit, vtep, now);
        }
        // A burst from one port is mostly one flow: the last decision holds
        // while its inputs are the same (addresses, tag, time, FDB, ports).
        let memo = me.rt.flow.filter(|m| {
            m.l2 == l2 && m.now == now && m.fdb_gen == fdb.generation() && m.topo_gen == *topo_gen
        });
        let decision = match memo {
            Some(m) => m.decision,
            None => {
                let decision = decide(fdb, src_id, &me.policy, &l2, now, |p, vid| {
                    match slots.iter().flatten().find(|s| s.id == p) {
                        Some(s) => s.policy.vlan.egress(vid),
                        None => remote
                            .iter()
                            .find(|r| r.id == p)
                            .and_then(|r| r.vlan.egress(vid)),
                    }
                });
                if let Some(me) = slots[i].as_mut() {
                    me.rt.flow = Some(FlowMemo {
                        l2,
                        now,
                        fdb_gen: fdb.generation(),
                        topo_gen: *topo_gen,
                        decision,
                    });
                }
                decision
            }
        };
        let d = match decision {
            Ok(d) => {
                if d.learned == Learned::PortLimit {
                    if let Some(me) = slots[i].as_ref() {
                        me.stats.tx.drop(DropReason::FdbLimit);
                    }
                }
                d
            }
            Err(r) => {
                if let Some(me) = slots[i].as_ref() {
                    me.stats.tx.drop(r);
                }
                return Fwd::Done;
            }
        };
        let tci_pcp = if l2.tag.is_some() {
            u16::from(pre[hdr_len + 14] & 0xe0) << 8
        } else {
            0
        };
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&pre[hdr_len..hdr_len + 12]);
        let frame = Frame {
            src,
            head: &pre[hdr_len..got],
            hdr_len,
            vhdr,
            macs,
            src_tag_len,
            tci_pcp,
            frame_len,
        };
        match d.dest {
            Destination::Port(p, tagging) => {
                if let Some(j) = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.id == p))
                {
                    if self.egress_wait(i, j, frame_len as usize) {
                        return Fwd::Wait;
                    }
                    self.to_vtep = self.vtep_of(j, d.vid, l2.dst, now);
                    self.deliver_to(j, &frame, tagging, now);
                    self.to_vtep = None;
                } else if let Some(w) = self.remote.iter().find(|r| r.id == p).map(|r| r.worker) {
                    self.push_remote(i, w, Some(p), &frame, &d);
                }
            }
            Destination::Flood => {
                let mut sent = false;
                for j in 0..self.slots.len() {
                    let Some(s) = self.slots[j].as_ref() else {
                        continue;
                    };
                    // Direct-mode ports are not switched: no floods either.
                    // A lent uplink queue's lender floods to the wire.
                    if s.id == src_id || s.direct_up.is_some() || is_lent(&s.port) {
                        continue;
                    }
                    if let Some(tagging) = s.policy.vlan.egress(d.vid) {
                        // A flood does not wait for one destination; it counts against the link.
                        if let Some(Port::Uplink(u)) = self.slots[j].as_mut().map(|s| &mut s.port) {
                            u.sched.charge(frame_len as usize);
                        }
                        self.deliver_to(j, &frame, tagging, now);
                        sent = true;
                    }
                }
                // Once to every other worker with a member of the VLAN.
                for k in 0..self.peers.len() {
                    let w = self.peers[k].worker;
                    if self
                        .remote
                        .iter()
                        .any(|r| r.worker == w && r.vlan.egress(d.vid).is_some())
                    {
                        sent |= self.push_remote(i, w, None, &frame, &d);
                    }
                }
                if let (false, Some(s)) = (sent, &self.slots[i]) {
                    s.stats.tx.drop(DropReason::NoRoute);
                }
            }
        }
        if learn {
            self.learn_mac(i, l2.src);
        }
        Fwd::Done
    }

    /// Whether a frame of `bytes` from slot `i` to slot `j` must wait: `j`
    /// is an uplink whose egress scheduler or full ring holds it back, and
    /// `i` a guest whose ring can keep it. Otherwise the frame is charged
    /// to the link. A waiting frame is taken back from `i`'s counters.
    #[inline]
    pub(super) fn egress_wait(&mut self, i: usize, j: usize, bytes: usize) -> bool {
        let Some(src) = self.slots[i].as_ref() else {
            return false;
        };
        let (id, guest) = (src.id, matches!(src.port, Port::VhostUser(_)));
        let Some(Port::Uplink(u)) = self.slots[j].as_mut().map(|s| &mut s.port) else {
            return false;
        };
        if !guest {
            u.sched.charge(bytes);
            return false;
        }
        if !u.tx_ready(uplink::HDR_LEN + bytes + 4) {
            // The ring is full: no verdict, but the port holds frames.
            u.sched.ring_full(id);
        } else if u.sched.admit(id, bytes).is_ok() {
            return false;
        }
        if let Some(s) = &self.slots[i] {
            s.stats.tx.unframe(bytes);
            crate::stats::bump(&s.stats.tx.egress_waits, 1);
        }
        true
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
