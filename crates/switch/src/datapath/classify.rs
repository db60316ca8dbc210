//! Classification: what a frame taken from a port is (virtio-net header,
//! L2 header, offloads it asks for) and where it goes (direct mode, the
//! FDB and VLANs, a remembered decision for the same flow), then the
//! egress admission of an uplink it goes to.

use super::{Datapath, FlowMemo, Frame, FrameCtx, Fwd, Table, MAX_FRAME};
use crate::fdb::Place;
use crate::forward::{decide, Decision, Destination, L2Header};
use crate::offload::{self, Reject};
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vlan::Tagging;
use crate::wire::virtio_net::{self, VirtioNetHdr, VirtioNetHdrRepr};
use crate::PortId;
use std::time::Instant;

/// The bytes of a frame's headers read before it is classified.
const PRE_LEN: usize = virtio_net::HEADER_LEN + L2Header::MAX_LEN;

impl Datapath {
    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len`
    /// first) from slot `i`, switched.
    pub(super) fn forward_frame(
        &mut self,
        cx: FrameCtx,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
    ) -> Fwd {
        self.forward_frame_to(cx, src, total, hdr_len, None)
    }

    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len`
    /// first) from slot `cx.from`: its headers read and checked
    /// ([`Datapath::admit`]), then sent as it is ([`Datapath::forward_direct`])
    /// or switched ([`Datapath::forward_switched`]). `direct`: a
    /// direct-mode port the frame goes to as it is (it came in on that
    /// port's uplink queue); a frame from a direct-mode port goes as it is
    /// to its uplink. Neither is switched (no FDB, VLAN or QoS).
    pub(super) fn forward_frame_to(
        &mut self,
        cx: FrameCtx,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        direct: Option<PortId>,
    ) -> Fwd {
        let mut pre = [0u8; PRE_LEN];
        let Some((frame, l2)) = self.admit(cx.from, src, total, hdr_len, &mut pre) else {
            return Fwd::Done;
        };
        let direct =
            direct.or_else(|| self.table.slots[cx.from].as_ref().and_then(|s| s.direct_to));
        if let Some(to) = direct {
            self.forward_direct(cx, &frame, &l2, to);
            return Fwd::Done;
        }
        self.forward_switched(cx, &frame, &l2)
    }

    /// Reads and checks the headers of a frame from slot `i` (into
    /// `pre`): its virtio-net header, its L2 header and the offloads it
    /// asks for (what the sender may use). The frame counted on the
    /// sender; None when it is dropped (counted too).
    #[inline]
    fn admit<'a>(
        &self,
        i: usize,
        src: Src<'a>,
        total: u64,
        hdr_len: usize,
        pre: &'a mut [u8; PRE_LEN],
    ) -> Option<(Frame<'a>, L2Header)> {
        let s = self.table.slots[i].as_ref()?;
        let stats = &s.stats;
        let want = (hdr_len + L2Header::MAX_LEN).min(total as usize);
        let got = src.read(0, &mut pre[..want]);
        let frame_len = total.saturating_sub(hdr_len as u64);
        if got < hdr_len || frame_len > MAX_FRAME {
            stats.tx.drop(DropReason::Malformed);
            return None;
        }
        let vhdr = match VirtioNetHdr::new_checked(&pre[..hdr_len], hdr_len)
            .and_then(|h| VirtioNetHdrRepr::parse(&h))
        {
            Ok(h) => h,
            Err(_) => {
                stats.tx.drop(DropReason::Malformed);
                return None;
            }
        };
        let l2 = match L2Header::parse(&pre[hdr_len..got]) {
            Ok(l2) => l2,
            Err(r) => {
                stats.tx.drop(r);
                return None;
            }
        };
        let src_tag_len: u64 = if l2.tag.is_some() { 4 } else { 0 };
        let l3 = 14 + src_tag_len as usize;
        if let Err(r) = offload::check(&vhdr, frame_len as usize, l3, s.port.tx_caps()) {
            stats.tx.drop(match r {
                Reject::Malformed => DropReason::Malformed,
                Reject::Unsupported => DropReason::Offload,
            });
            return None;
        }
        stats.tx.frame(frame_len as usize);
        let tci_pcp = if l2.tag.is_some() {
            u16::from(pre[hdr_len + 14] & 0xe0) << 8
        } else {
            0
        };
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&pre[hdr_len..hdr_len + 12]);
        let pre: &'a [u8] = pre;
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
        Some((frame, l2))
    }

    /// Sends a frame as it is to direct-mode port `to`, with the tag it
    /// came with, if any.
    fn forward_direct(&mut self, cx: FrameCtx, frame: &Frame<'_>, l2: &L2Header, to: PortId) {
        let tagging = l2.tag.map_or(Tagging::Untagged, Tagging::Tagged);
        match self
            .table
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.id == to))
        {
            Some(j) => self.deliver_to(j, frame, tagging, cx),
            None => {
                if let Some(s) = &self.table.slots[cx.from] {
                    s.stats.tx.drop(DropReason::NoRoute);
                }
            }
        }
    }

    /// Switches a frame: decided (FDB, VLANs, a remembered decision),
    /// then to one port ([`Datapath::forward_unicast`]) or flooded
    /// ([`Datapath::flood`]); a vNIC's first source address learned.
    fn forward_switched(&mut self, cx: FrameCtx, frame: &Frame<'_>, l2: &L2Header) -> Fwd {
        let i = cx.from;
        let Some(me) = self.table.slots[i].as_ref() else {
            return Fwd::Done;
        };
        let learn = me.needs_mac;
        let Some((decision, dest_slot)) = self.flow_decision(cx, l2) else {
            return Fwd::Done;
        };
        let d = match decision {
            Ok(d) => {
                self.teller
                    .learned(cx, &self.table.slots, l2, d.vid, d.learned);
                d
            }
            Err(r) => {
                if let Some(me) = self.table.slots[i].as_ref() {
                    me.stats.tx.drop(r);
                }
                return Fwd::Done;
            }
        };
        match d.dest {
            Destination::Port(p, tagging) => {
                let fwd = self.forward_unicast(cx, frame, l2, &d, (p, tagging), dest_slot);
                if fwd == Fwd::Wait {
                    return Fwd::Wait;
                }
            }
            Destination::Flood => self.flood(cx, frame, &d),
        }
        if learn {
            self.table.learn_mac(i, l2.src);
        }
        Fwd::Done
    }

    /// Sends a frame to port `to` (with its tagging): on this worker's
    /// slot `dest_slot`, through the worker serving the pair it steers to,
    /// or to the other worker that owns the port. `Wait`: the destination's
    /// egress holds the sender back.
    fn forward_unicast(
        &mut self,
        cx: FrameCtx,
        frame: &Frame<'_>,
        l2: &L2Header,
        d: &Decision,
        to: (PortId, Tagging),
        dest_slot: Option<usize>,
    ) -> Fwd {
        let (p, tagging) = to;
        let i = cx.from;
        if let Some(j) = dest_slot {
            if let Some(w) = self.table.routed_away(j, frame) {
                if let Some(me) = self.table.slots[i].as_ref() {
                    self.peers.push(me, w, Some(p), frame, d);
                }
                return Fwd::Done;
            }
            let to_vtep = self.vtep_of(j, d.vid, l2.dst, cx.now);
            let copies = self.copies_to(j, to_vtep);
            if self.egress_wait(i, j, frame.frame_len as usize, copies) {
                return Fwd::Wait;
            }
            self.deliver_to(j, frame, tagging, FrameCtx { to_vtep, ..cx });
        } else if let Some(me) = self.table.slots[i].as_ref() {
            self.peers.push_to_owner(me, p, frame, d);
        }
        Fwd::Done
    }

    /// Floods a frame to every switched port of its VLAN here (their
    /// egress permitting) and once to every other worker with a member;
    /// counted as `no_route` on the sender when it reached none.
    fn flood(&mut self, cx: FrameCtx, frame: &Frame<'_>, d: &Decision) {
        let i = cx.from;
        let Some(src_id) = self.table.slots[i].as_ref().map(|s| s.id) else {
            return;
        };
        let mut sent = false;
        for j in 0..self.table.slots.len() {
            let Some(s) = self.table.slots[j].as_ref() else {
                continue;
            };
            // Direct-mode ports are not switched: no floods either.
            // A lent uplink queue's lender floods to the wire.
            if s.id == src_id || s.direct_to.is_some() || s.port.is_lent() {
                continue;
            }
            if let Some(tagging) = s.policy.vlan.egress(d.vid) {
                if !self.charge_flood(i, j, frame.frame_len as usize) {
                    continue;
                }
                self.deliver_to(j, frame, tagging, cx);
                sent = true;
            }
        }
        let Some(me) = self.table.slots[i].as_ref() else {
            return;
        };
        // Once to every other worker with a member of the VLAN.
        sent |= self.peers.flood(me, frame, d);
        if !sent {
            me.stats.tx.drop(DropReason::NoRoute);
        }
    }

    /// The decision for a frame with header `l2` from slot `i` at `now`,
    /// and the slot it goes to (for a flood, the one port it reaches, if
    /// only one): the remembered decision while it holds, else decided anew
    /// ([`Datapath::decide_flow`]). None: no port in `i`.
    pub(super) fn flow_decision(
        &mut self,
        cx: FrameCtx,
        l2: &L2Header,
    ) -> Option<(Result<Decision, DropReason>, Option<usize>)> {
        if let Some(m) = self.remembered(cx.from, l2, cx.now) {
            return Some((m.decision, m.to.map(|(j, _)| j)));
        }
        self.decide_flow(cx, l2)
    }

    /// Slot `i`'s remembered decision, when it holds for a frame with
    /// header `l2` at `now`. A burst from one port is mostly one flow: the
    /// last decision holds while its inputs are the same (addresses, tag,
    /// time, FDB, ports). (Looked at in place: the memo is too large to copy
    /// per frame.)
    #[inline]
    pub(super) fn remembered(&self, i: usize, l2: &L2Header, now: Instant) -> Option<&FlowMemo> {
        let m = self.table.slots[i].as_ref()?.rt.flow.as_ref()?;
        m.holds(l2, now, self.fdb.generation(), self.table.gen)
            .then_some(m)
    }

    /// [`Datapath::flow_decision`] made anew: the frame's source learned,
    /// the decision remembered.
    pub(super) fn decide_flow(
        &mut self,
        cx: FrameCtx,
        l2: &L2Header,
    ) -> Option<(Result<Decision, DropReason>, Option<usize>)> {
        let (i, now) = (cx.from, cx.now);
        let Datapath {
            table:
                Table {
                    slots,
                    gen: topo_gen,
                    ..
                },
            fdb,
            peers,
            ..
        } = self;
        let me = slots[i].as_ref()?;
        let src_id = me.id;
        let from = Place {
            port: src_id,
            remote: cx.from_vtep,
        };
        let decision = decide(fdb, from, &me.policy, l2, now, |p, vid| {
            match slots.iter().flatten().find(|s| s.id == p) {
                Some(s) => s.policy.vlan.egress(vid),
                None => peers.egress(p, vid),
            }
        });
        let to = match decision.map(|d| (d.dest, d.vid)) {
            Ok((Destination::Port(p, tagging), _)) => slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.id == p))
                .map(|j| (j, tagging)),
            Ok((Destination::Flood, vid)) if !peers.has_members(vid) => {
                sole_recipient(slots, src_id, vid)
            }
            Ok((Destination::Flood, _)) => None,
            Err(_) => None,
        };
        if let Some(me) = slots[i].as_mut() {
            me.rt.flow = Some(FlowMemo {
                l2: *l2,
                until: now + super::MEMO_HOLD,
                fdb_gen: fdb.generation(),
                topo_gen: *topo_gen,
                decision: decision.map(|d| Decision {
                    learned: d.learned.settled(),
                    ..d
                }),
                to,
            });
        }
        Some((decision, to.map(|(j, _)| j)))
    }

    /// How many copies of a frame slot `j` sends (see [`crate::port::Kind::copies`]).
    fn copies_to(&self, j: usize, to_vtep: Option<std::net::Ipv4Addr>) -> usize {
        self.table.slots[j]
            .as_ref()
            .map_or(1, |s| s.port.copies(to_vtep))
    }

    /// Charges a flood from slot `i` of `bytes` to slot `j`'s egress
    /// scheduler (an uplink's link; a VXLAN port's copies, to a vNIC's
    /// limit too); false: the vNIC is past its limit and the flood does
    /// not go to `j` (counted there).
    fn charge_flood(&mut self, i: usize, j: usize, bytes: usize) -> bool {
        let Some(src) = self.table.slots[i].as_ref() else {
            return true;
        };
        let (id, guest) = (src.id, src.port.vhost_user().is_some());
        let Some(dst) = self.table.slots[j].as_mut() else {
            return true;
        };
        if dst.port.charge_flood(id, guest, bytes) {
            return true;
        }
        dst.stats.rx.drop(DropReason::Egress);
        false
    }

    /// Whether a frame of `bytes` from slot `i` to slot `j`, sent as
    /// `copies` datagrams or frames, must wait: `j` is an uplink or a VXLAN
    /// port whose egress scheduler (or full ring) holds it back, and `i` a
    /// guest whose ring can keep it. Otherwise the frame is charged to the
    /// link. A waiting frame is taken back from `i`'s counters.
    #[inline]
    pub(super) fn egress_wait(&mut self, i: usize, j: usize, bytes: usize, copies: usize) -> bool {
        let Some(src) = self.table.slots[i].as_ref() else {
            return false;
        };
        let (id, guest) = (src.id, src.port.vhost_user().is_some());
        let Some(dst) = self.table.slots[j].as_mut().map(|s| &mut s.port) else {
            return false;
        };
        // (Room for a tag the frame may leave with.)
        let ready = dst.tx_ready(bytes + 4);
        let Some(sched) = dst.sched_mut() else {
            return false;
        };
        if !guest {
            sched.charge(bytes * copies);
            return false;
        }
        if !ready {
            // The ring is full: no verdict, but the port holds frames.
            sched.ring_full(id);
        } else if sched.admit(id, bytes * copies).is_ok() {
            return false;
        }
        if let Some(s) = &self.table.slots[i] {
            s.stats.tx.unframe(bytes);
            crate::stats::bump(&s.stats.tx.egress_waits, 1);
            crate::stats::bump(&s.stats.tx.held_dest_full, u64::from(!ready));
        }
        true
    }

    /// The VTEP behind VXLAN slot `j` that `dst` on `vid` was learned
    /// behind (`None`: not a VXLAN port, or unknown there: flood its remotes).
    pub(super) fn vtep_of(
        &self,
        j: usize,
        vid: u16,
        dst: crate::wire::EthernetAddress,
        now: Instant,
    ) -> Option<std::net::Ipv4Addr> {
        let s = self.table.slots[j].as_ref()?;
        s.port.vxlan()?;
        self.fdb.remote(vid, dst, now)
    }
}

/// The one port on this worker a flood on VLAN `vid` from port `src` reaches
/// (slot and tagging), when there is exactly one and no other worker has a
/// member of the VLAN: the flood is then a unicast to it, and can take the
/// fast case (a two-port switch whose far side's address is not learned,
/// as with one-way traffic). A lent uplink queue counts as a member (its
/// lending changes without the ports' generation).
fn sole_recipient(
    slots: &[Option<super::Slot>],
    src: PortId,
    vid: u16,
) -> Option<(usize, Tagging)> {
    let mut sole = None;
    for (j, s) in slots.iter().enumerate() {
        let Some(s) = s else { continue };
        if s.id == src || s.direct_to.is_some() {
            continue;
        }
        if let Some(tagging) = s.policy.vlan.egress(vid) {
            if sole.is_some() {
                return None;
            }
            sole = Some((j, tagging));
        }
    }
    sole
}
