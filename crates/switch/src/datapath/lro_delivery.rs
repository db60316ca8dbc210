//! LRO toward vhost-user ports: segments merged in place into the
//! destination's receive buffers, and when an aggregate ends.

use super::{Datapath, Frame, FrameCtx, Port, Table};
use crate::lro;
use crate::lro::place::{Delivered, PlaceError};
use crate::offload::Caps;
use crate::stats::DropReason;
use crate::vhost_user::device::RX_QUEUE;
use crate::vlan::Tagging;
use std::time::Instant;

/// An LRO aggregate ends once no segment has joined it for this long: the
/// flow paused (maybe waiting for this very data), so holding it only adds
/// latency. At high rates segments come closer than this and merge; at low
/// rates the guest has time for each segment anyway.
pub const LRO_IDLE: std::time::Duration = std::time::Duration::from_micros(10);
/// An LRO aggregate never waits longer than this after its first segment.
pub const LRO_HOLD: std::time::Duration = std::time::Duration::from_micros(50);

impl Datapath {
    /// Software LRO toward slot `j`: merges the frame into the port's
    /// aggregate (built in place in the port's receive buffers) when it can
    /// (returns true: nothing else to do now); otherwise ends the aggregate
    /// first (so nothing is reordered), maybe starting a new one with this
    /// frame.
    pub(super) fn lro_offer(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        tagging: Tagging,
        caps: Caps,
        cx: FrameCtx,
    ) -> bool {
        let now = cx.now;
        let Datapath {
            table: Table { slots, .. },
            scratch,
            ..
        } = self;
        let rx_chain = &mut scratch.rx_chain;
        let want = cx.rx_hint;
        let Some(slot) = slots[j].as_mut() else {
            return false;
        };
        let wanted = slot.policies.effective_lro() && caps.csum;
        let (Port::VhostUser(p), Some(ctx)) = (&mut slot.port, slot.rt.lro.as_mut()) else {
            return false;
        };
        let len = frame.frame_len as usize;
        let mut peek = [0u8; lro::PEEK_LEN];
        let mut hdr = frame.head;
        // Not toward a multiqueue vNIC: an aggregate lives in one receive
        // queue, and steering picks the queue per frame.
        let seg = if wanted && p.device.mrg_rxbuf() && p.device.queue_pairs() == 1 {
            if hdr.len() < lro::PEEK_LEN.min(len) {
                // The headers beyond what forwarding read (only frames that may merge).
                let n = frame
                    .src
                    .read(frame.hdr_len as u64, &mut peek[..lro::PEEK_LEN.min(len)]);
                hdr = &peek[..n];
            }
            lro::Segment::parse(hdr, len, 14 + frame.src_tag_len as usize, &frame.vhdr)
                .filter(|s| if s.v6 { caps.tso6 } else { caps.tso4 })
        } else {
            None
        };
        let Some(seg) = seg else {
            if ctx.agg.active() {
                self.lro_deliver(j, now);
            }
            return false;
        };
        let hdr_len = p.device.vnet_hdr_len();
        let Some(q) = p.device.queue(RX_QUEUE) else {
            return false;
        };
        let src_off = frame.hdr_len as u64;
        let mut ended = Ok(None);
        let mut hostile = None;
        let absorbed = 'offer: {
            if ctx.agg.active() && ctx.tagging == tagging {
                match ctx.agg.append(
                    q,
                    rx_chain,
                    &seg,
                    hdr,
                    &frame.vhdr,
                    &frame.src,
                    src_off,
                    want,
                ) {
                    Ok(true) => {
                        crate::stats::bump(&slot.stats.rx.lro_merged, 1);
                        ctx.last = now;
                        return true;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        hostile = Some(e);
                        break 'offer true;
                    }
                }
            }
            if ctx.agg.active() {
                ended = ctx.agg.finish(q);
                if ended.is_err() {
                    break 'offer false;
                }
            }
            let (l2, l2_len) = frame.egress_l2(tagging);
            match ctx.agg.start(
                q,
                rx_chain,
                &seg,
                hdr,
                &frame.vhdr,
                &frame.src,
                src_off,
                &l2[..l2_len],
                frame.src_tag_len as usize,
                hdr_len,
                want,
            ) {
                Ok(started) => {
                    if started {
                        ctx.tagging = tagging;
                        ctx.started = now;
                        ctx.last = now;
                    }
                    started
                }
                Err(e) => {
                    hostile = Some(e);
                    true
                }
            }
        };
        if let Some(e) = hostile {
            ended = Err(PlaceError::Hostile(e));
        }
        self.lro_account(j, ended, now);
        absorbed
    }

    /// The end of a batch: the worker found nothing to forward for a while
    /// and is about to sleep. Every LRO aggregate ends now (the flow paused,
    /// perhaps waiting for this very data) rather than at its deadline,
    /// which would take a timer and a wake-up. True when one was delivered
    /// (a polling round must publish it and call the guest first).
    pub fn end_batch(&mut self, now: Instant) -> bool {
        let mut delivered = false;
        for j in 0..self.table.slots.len() {
            let active = self
                .table
                .slots
                .get(j)
                .and_then(Option::as_ref)
                .and_then(|s| s.rt.lro.as_ref())
                .is_some_and(|l| l.agg.active());
            if active {
                self.lro_deliver(j, now);
                delivered = true;
            }
        }
        delivered
    }

    /// Ends slot `j`'s aggregate if its time is up; otherwise returns when it will be.
    pub(super) fn lro_due(&mut self, j: usize, now: Instant) -> Option<Instant> {
        let ctx = self.table.slots.get(j)?.as_ref()?.rt.lro.as_ref()?;
        if !ctx.agg.active() {
            return None;
        }
        let due = (ctx.last + LRO_IDLE).min(ctx.started + LRO_HOLD);
        if now >= due {
            self.lro_deliver(j, now);
            None
        } else {
            Some(due)
        }
    }

    /// Ends slot `j`'s aggregate, if any: delivered into the buffers it was built in.
    pub(super) fn lro_deliver(&mut self, j: usize, now: Instant) {
        let Some(s) = self.table.slots.get_mut(j).and_then(Option::as_mut) else {
            return;
        };
        let (Port::VhostUser(p), Some(ctx)) = (&mut s.port, s.rt.lro.as_mut()) else {
            return;
        };
        if !ctx.agg.active() {
            return;
        }
        let ended = match p.device.queue(RX_QUEUE) {
            Some(q) => ctx.agg.finish(q),
            None => {
                ctx.agg.abandon();
                Ok(None)
            }
        };
        self.lro_account(j, ended, now);
    }

    /// Counts how an aggregate ended (a broken ring resets the port).
    pub(super) fn lro_account(
        &mut self,
        j: usize,
        ended: Result<Option<Delivered>, PlaceError>,
        now: Instant,
    ) {
        let Some(s) = self.table.slots.get_mut(j).and_then(Option::as_mut) else {
            return;
        };
        match ended {
            Ok(None) => {}
            Ok(Some(d)) => {
                s.stats.rx.frame(d.len);
                s.rt.delivered(j, &mut self.rx_touched);
            }
            Err(PlaceError::Unmapped) => s.stats.rx.drop(DropReason::BadDescriptor),
            Err(PlaceError::Hostile(e)) => {
                if let Some(l) = s.rt.lro.as_mut() {
                    l.agg.abandon();
                }
                self.rx_ring_hostile(j, now, &e);
            }
        }
    }
}
