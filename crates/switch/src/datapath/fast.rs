//! The fast case: a plain frame from a guest to a guest on this worker.
//!
//! Plain means the frame needs none of the policies the full path
//! (`classify.rs`, `deliver.rs`) applies: no offload metadata in its
//! virtio-net header (flags and GSO type zero), untagged and leaving
//! untagged, its flow's forwarding decision remembered from the frame
//! before (same addresses, time, FDB and ports), or else made anew for it
//! ([`Datapath::forward_decided_anew`]), and delivering to one
//! port (a unicast, or a flood only one port receives), a destination whose LRO
//! cannot take it (LRO off, or not a TCP segment) and with no aggregate
//! open, and a receive chain it fits. Such a frame leaves exactly as it
//! came: its header's first ten bytes carried over, its bytes copied once.
//! A cross-connected port's plain frame needs no decision: it goes to the
//! peer (`cross.rs`). A burst's consecutive plain frames go to their
//! destination as a run ([`Datapath::forward_plain_run`]), looked at once.
//! Anything else, or any doubt, takes the full path, which decides the
//! same way for these frames (and refreshes the remembered decision).

use super::{Datapath, FrameCtx, Port, Slot, MAX_FRAME};
use crate::fdb::Learned;
use crate::forward::L2Header;
use crate::stats::DropReason;
use crate::vhost_user::chain::Seg;
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::{Burst, BURST};
use crate::vlan::Tagging;
use crate::wire::EthernetAddress;
use std::sync::Arc;
use std::time::Instant;

const ETH_VLAN: u16 = 0x8100;
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;

/// A frame's destination and source MAC as it carries them (bytes 0-7,
/// then 8-11, little-endian): compared in two instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MacPair(u64, u32);

impl MacPair {
    /// The pair a frame from `src` to `dst` carries.
    pub(super) fn new(dst: &EthernetAddress, src: &EthernetAddress) -> Self {
        let mut m = [0u8; 12];
        m[..6].copy_from_slice(&dst.0);
        m[6..].copy_from_slice(&src.0);
        let (lo, hi) = m.split_at(8);
        let lo: [u8; 8] = lo.try_into().unwrap_or_default();
        let hi: [u8; 4] = hi.try_into().unwrap_or_default();
        Self(u64::from_le_bytes(lo), u32::from_le_bytes(hi))
    }

    /// The destination address, then the source address.
    fn addresses(self) -> (EthernetAddress, EthernetAddress) {
        let mut m = [0u8; 12];
        m[..8].copy_from_slice(&self.0.to_le_bytes());
        m[8..].copy_from_slice(&self.1.to_le_bytes());
        (
            EthernetAddress::from_bytes(&m[..6]),
            EthernetAddress::from_bytes(&m[6..]),
        )
    }

    /// The source address.
    fn src(self) -> EthernetAddress {
        self.addresses().1
    }
}

/// A plain frame's fields, each read once from the guest's buffer straight
/// into a value: the guest may write its buffer meanwhile, and only these
/// values are looked at and carried over. (Copied into a stack buffer and
/// read back, they cost a store-buffer drain per frame: `Span::read_at`.)
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look {
    /// The virtio-net header's first ten bytes (flags to checksum offset),
    /// little-endian: bytes 0-7, then 8-9.
    header: [u64; 2],
    /// Destination then source MAC, as they came.
    macs: MacPair,
    ethertype: u16,
    /// The IPv4 protocol byte, when the first buffer holds it.
    ip_proto: Option<u8>,
    hdr_len: usize,
}

impl Look {
    /// The fields of a chain whose first buffer holds the virtio-net header
    /// and the Ethernet header; None otherwise (the full path reads
    /// across buffers). The IPv4 protocol only when `proto` (LRO may
    /// merge): it lies in the frame's second line.
    #[inline(always)]
    pub(super) fn read(mem: &GuestMem, first: Seg, hdr_len: usize, proto: bool) -> Option<Look> {
        if (first.len as usize) < hdr_len + 14 {
            return None;
        }
        let span = mem.span(first.addr, u64::from(first.len))?;
        let h = hdr_len;
        let header = [
            u64::from_le_bytes(span.read_at::<8>(0)?),
            u64::from(u16::from_le_bytes(span.read_at::<2>(8)?)),
        ];
        let macs = MacPair(
            u64::from_le_bytes(span.read_at::<8>(h)?),
            u32::from_le_bytes(span.read_at::<4>(h + 8)?),
        );
        let ethertype = u16::from_be_bytes(span.read_at::<2>(h + 12)?);
        let ip_proto = if proto {
            span.read_at::<1>(h + 14 + 9).map(|[p]| p)
        } else {
            None
        };
        Some(Look {
            header,
            macs,
            ethertype,
            ip_proto,
            hdr_len,
        })
    }

    /// The first bytes of every frame in `burst` into `looks`, read
    /// together: in a loop this short the core has many of their lines in
    /// flight at once, where read frame by frame each one, from the guest's
    /// core, stalled the next frame's work. (Filled in place: returned, the
    /// array would be copied, wide loads of what was just stored.)
    #[inline(always)]
    pub(super) fn read_burst(
        mem: &GuestMem,
        burst: &Burst,
        hdr_len: usize,
        route: &PlainRoute,
        looks: &mut [Option<Look>; BURST],
    ) {
        for (k, look) in looks.iter_mut().enumerate().take(burst.len()) {
            let (_, segs, _) = burst.chain(k);
            *look = segs
                .first()
                .and_then(|&f| Look::read(mem, f, hdr_len, route.lro));
        }
    }

    /// No offload metadata: flags and GSO type zero.
    fn plain_header(&self) -> bool {
        self.header[0] & 0xffff == 0
    }

    fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The MACs, destination then source, as they came.
    fn macs(&self) -> MacPair {
        self.macs
    }

    fn src(&self) -> EthernetAddress {
        self.macs.src()
    }

    /// Whether LRO might merge the frame: a TCP segment, or a header not
    /// read far enough to tell.
    fn maybe_tcp(&self) -> bool {
        match self.ethertype {
            ETH_IPV4 => self.ip_proto.map_or(true, |p| p == IPPROTO_TCP),
            ETH_IPV6 => true,
            _ => false,
        }
    }

    /// The source's virtio-net header length.
    pub(crate) fn hdr_len(&self) -> usize {
        self.hdr_len
    }

    /// The header's first ten bytes (flags to checksum offset), carried
    /// over to the destination, as little-endian words.
    pub(crate) fn header(&self) -> [u64; 2] {
        self.header
    }
}

/// Where a port's plain frames go, worked out once for a burst: each frame
/// then only checks its own header against it. Anything that may change
/// it (a frame on the full path, a failed delivery) works it out again.
#[derive(Debug, Clone, Copy)]
pub(super) struct PlainRoute {
    /// The destination slot.
    to: usize,
    /// The remembered decision's MACs; None for a cross-connected port,
    /// whose every plain frame goes to its peer.
    macs: Option<MacPair>,
    /// The source's address is still to be learned from a frame.
    learn: bool,
    /// The destination's LRO might merge a TCP segment.
    lro: bool,
    /// The source's address stays with another port (the FDB's rule for
    /// moves): each frame is counted.
    kept: bool,
}

impl PlainRoute {
    /// The length of a frame of `len` bytes (a header of `hdr_len`
    /// first) that goes along this route on the fast case, as `look`
    /// shows it; None when it is not plain for it.
    #[inline(always)]
    fn plain_len(&self, look: &Look, len: u64, hdr_len: usize) -> Option<u64> {
        let frame_len = len - hdr_len as u64;
        let plain = look.plain_header()
            && look.ethertype() != ETH_VLAN
            && frame_len <= MAX_FRAME
            && self.macs.map_or(true, |m| m == look.macs())
            && !(self.lro && look.maybe_tcp());
        plain.then_some(frame_len)
    }
}

/// Frames a burst forwarded on the fast case, counted once at its end.
#[derive(Debug, Default)]
pub(super) struct PlainTally {
    frames: u64,
    bytes: u64,
    kept: u64,
}

impl Datapath {
    /// The fast case's route for slot `i`'s frames at `now`; None when
    /// its frames take the full path: no remembered decision that holds
    /// (or one that is not a plain delivery to one port), or a destination
    /// with an LRO aggregate open.
    pub(super) fn plain_route(&self, i: usize, now: Instant) -> Option<PlainRoute> {
        let me = self.table.slots[i].as_ref()?;
        let (to, macs, learn, kept) = match me.rt.cross {
            // Cross-connected: to its peer as it came, nothing learned.
            Some(j) => (j, None, false, false),
            None => {
                let m = me.rt.flow.as_ref()?;
                if !m.holds_any_untagged(now, self.fdb.generation(), self.table.gen)
                    || me.direct_to.is_some()
                {
                    return None;
                }
                // A unicast, or a flood that reaches one port (`sole_recipient`).
                let (Ok(d), Some((j, Tagging::Untagged))) = (m.decision, m.to) else {
                    return None;
                };
                if d.learned == Learned::PortLimit || j == i {
                    return None;
                }
                let kept = d.learned == Learned::Kept;
                (
                    j,
                    Some(MacPair::new(&m.l2.dst, &m.l2.src)),
                    me.needs_mac,
                    kept,
                )
            }
        };
        let dst = self.table.slots[to].as_ref()?;
        if dst.rt.lro.as_ref().is_some_and(|c| c.agg.active()) {
            return None;
        }
        Some(PlainRoute {
            to,
            macs,
            learn,
            lro: dst.policies.effective_lro(),
            kept,
        })
    }

    /// Forwards chain `segs` (`len` bytes, a virtio-net header of `hdr_len`
    /// first) from slot `i` on the fast case, along `route`; `looked` is
    /// its [`Look`] when read already (the burst's are read together,
    /// `forward_from_pair`). Returns
    /// false, having done nothing, when the frame is not plain: the caller
    /// takes the full path (and works the route out again after it).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_plain(
        &mut self,
        cx: FrameCtx,
        mem: &Arc<GuestMem>,
        segs: &[Seg],
        len: u64,
        hdr_len: usize,
        route: &mut Option<PlainRoute>,
        tally: &mut PlainTally,
        looked: Option<Look>,
    ) -> bool {
        let (i, now) = (cx.from, cx.now);
        let Some(r) = route.as_mut() else {
            return false;
        };
        let Some(look) = looked.or_else(|| Look::read(mem, *segs.first()?, hdr_len, r.lro)) else {
            return false;
        };
        let Some(frame_len) = r.plain_len(&look, len, hdr_len) else {
            return false;
        };
        let j = r.to;
        let Some(Slot {
            port: Port::VhostUser(p),
            ..
        }) = self.table.slots[j].as_mut()
        else {
            return false;
        };
        let Some(result) = p.deliver_plain(
            mem,
            segs,
            &look,
            frame_len,
            &mut self.scratch.rx_chain,
            cx.rx_hint,
            &mut self.scratch.copies,
        ) else {
            return false;
        };
        tally.frames += 1;
        tally.bytes += frame_len;
        tally.kept += u64::from(r.kept);
        // (A hostile ring resets its port: `reset` makes the copies first.)
        let ok = result.is_ok();
        self.delivered(j, result, now);
        if r.learn {
            r.learn = false;
            self.table.learn_mac(i, look.src());
        }
        if !ok {
            // A drop, or a hostile ring that reset the destination.
            *route = self.plain_route(i, now);
        }
        true
    }

    /// Forwards chain `segs` from slot `i` on the fast case when no
    /// remembered decision held for its burst (`route` is None): a plain
    /// frame by its own bytes (no offload, untagged) is decided anew first,
    /// as the full path decides (its source learned, the decision
    /// remembered), and takes the fast case if that decision is a plain
    /// route. The FDB's generation moves with every address learned or
    /// moved, anywhere on the worker, and a source that moves between two
    /// ports moves it on every frame (a loop; the anchor harness's round
    /// trip, whose echo sends each frame back as it came): such frames would
    /// otherwise all take the full path. Returns false, having forwarded
    /// nothing, as [`Datapath::forward_plain`]; a decision it made is
    /// remembered, and the full path takes it from there (no second
    /// learning).
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_decided_anew(
        &mut self,
        cx: FrameCtx,
        mem: &Arc<GuestMem>,
        segs: &[Seg],
        len: u64,
        hdr_len: usize,
        route: &mut Option<PlainRoute>,
        tally: &mut PlainTally,
    ) -> bool {
        let (i, now) = (cx.from, cx.now);
        if route.is_some()
            || len.saturating_sub(hdr_len as u64) > MAX_FRAME
            || !self.table.slots[i]
                .as_ref()
                .is_some_and(|s| s.direct_to.is_none())
        {
            return false;
        }
        let Some(look) = segs
            .first()
            .and_then(|s| Look::read(mem, *s, hdr_len, false))
        else {
            return false;
        };
        if !look.plain_header() || look.ethertype() == ETH_VLAN {
            return false;
        }
        let (dst, src) = look.macs().addresses();
        let l2 = L2Header {
            dst,
            src,
            tag: None,
            announce: crate::forward::is_announce(look.ethertype().into()),
        };
        // A decision that still holds is one that is not a plain route (a
        // flood to several ports, an LRO aggregate open, ...): deciding
        // again changes nothing, and the full path takes it as it is.
        if self.remembered(i, &l2, now).is_some() {
            return false;
        }
        let Some((decision, _)) = self.decide_flow(cx, &l2) else {
            return false;
        };
        *route = self.plain_route(i, now);
        // A destination with LRO looks further into the frame.
        let looked = route.as_ref().filter(|r| !r.lro).map(|_| look);
        let done = self.forward_plain(cx, mem, segs, len, hdr_len, route, tally, looked);
        // A move or a flap is counted and said here, taken or not: the
        // decision is remembered settled (`Learned::settled`), so the full
        // path, deciding from it, does not count it again.
        if let Ok(d) = decision {
            if matches!(d.learned, Learned::Flapped { .. } | Learned::Moved { .. }) {
                self.teller
                    .learned(cx, &self.table.slots, &l2, d.vid, d.learned);
            }
        }
        done
    }

    /// Forwards the plain frames of `burst` from frame `from` on, from slot
    /// `i` along `route`, as [`Datapath::forward_plain`] forwards one, with
    /// one look at the destination for the run (`deliver_plain_run`) and
    /// its counters updated once. `looks` are the burst's [`Look`]s. Stops
    /// at the first frame that is not plain, or does not go into one
    /// receive buffer, or at a fault of the receive ring (whose port is
    /// then reset); returns the frames taken. The caller forwards the
    /// frame it stopped at on its own.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward_plain_run(
        &mut self,
        i: usize,
        mem: &Arc<GuestMem>,
        burst: &Burst,
        from: usize,
        hdr_len: usize,
        now: Instant,
        route: &mut Option<PlainRoute>,
        tally: &mut PlainTally,
        looks: &[Option<Look>; BURST],
    ) -> usize {
        let Some(r) = route.as_mut() else {
            return 0;
        };
        let j = r.to;
        let Some(Slot {
            port: Port::VhostUser(p),
            stats,
            rt,
            ..
        }) = self.table.slots[j].as_mut()
        else {
            return 0;
        };
        let plain = |k: usize| {
            let f = from + k;
            let look = (*looks.get(f)?)?;
            let (_, segs, len) = (f < burst.len()).then(|| burst.chain(f))?;
            let frame_len = r.plain_len(&look, len, hdr_len)?;
            Some((*segs.first()?, look, frame_len))
        };
        let run = p.deliver_plain_run(mem, plain, burst.len() - from, &mut self.scratch.copies);
        if run.taken == 0 {
            return 0;
        }
        stats
            .rx
            .frames(u64::from(run.delivered), run.delivered_bytes);
        if run.delivered > 0 {
            rt.delivered_n(j, run.delivered, &mut self.rx_touched);
        }
        if run.full > 0 {
            stats.rx.drops_n(DropReason::RingFull, run.full);
            // The guest must hear about what it has, to return buffers.
            rt.urgent = true;
        }
        tally.frames += run.taken as u64;
        tally.bytes += run.taken_bytes;
        tally.kept += u64::from(r.kept) * run.taken as u64;
        if r.learn {
            r.learn = false;
            if let Some(look) = looks[from] {
                self.table.learn_mac(i, look.src());
            }
        }
        if let Some(e) = &run.fault {
            self.rx_ring_hostile(j, now, e);
        }
        if run.full > 0 || run.fault.is_some() {
            *route = self.plain_route(i, now);
        }
        run.taken
    }

    /// Counts what a burst forwarded from slot `i` on the fast case.
    pub(super) fn count_plain(&mut self, i: usize, tally: PlainTally) {
        if tally.frames == 0 {
            return;
        }
        if let Some(me) = self.table.slots[i].as_ref() {
            me.stats.tx.frames(tally.frames, tally.bytes);
            if tally.kept > 0 {
                crate::stats::bump(&me.stats.tx.mac_kept, tally.kept);
            }
        }
        self.clock.perf.fast_frames(tally.frames);
    }
}

#[cfg(test)]
mod tests {
    use super::MacPair;
    use crate::wire::EthernetAddress;

    #[test]
    fn a_mac_pair_is_the_frames_first_twelve_bytes_and_gives_its_source_back() {
        let dst = EthernetAddress([1, 2, 3, 4, 5, 6]);
        let src = EthernetAddress([7, 8, 9, 10, 11, 12]);
        let p = MacPair::new(&dst, &src);
        // As `Look::read` loads them from a frame that starts dst, src.
        assert_eq!(p, MacPair(0x0807_0605_0403_0201, 0x0c0b_0a09));
        assert_eq!(p.src(), src);
        assert_ne!(p, MacPair::new(&src, &dst));
    }
}
