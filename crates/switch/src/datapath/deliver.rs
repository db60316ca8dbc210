//! Delivery: a classified frame into a destination port, with the offload
//! work the destination did not negotiate done in software.

use super::{head_of, Datapath, DeliverError, Frame, FrameCtx, Scratch, Slot, Table};
use crate::offload::{self, Caps, Reject, Work};
use crate::port::DeliverCx;
use crate::stats::DropReason;
use crate::vhost_user::buffers::Src;
use crate::vhost_user::chain::ChainError;
use crate::vlan::Tagging;
use std::time::Instant;

impl Datapath {
    /// Delivers a frame to slot `j`, doing in software the offload work the
    /// destination did not negotiate.
    pub(super) fn deliver_to(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        tagging: Tagging,
        cx: FrameCtx,
    ) {
        let Some(caps) = self.table.slots[j].as_ref().map(|s| s.port.rx_caps()) else {
            return;
        };
        if self.lro_offer(j, frame, tagging, caps, cx) {
            return;
        }
        let mut f = *frame;
        f.vhdr.flags = offload::egress_flags(f.vhdr.flags, caps);
        match offload::work(&frame.vhdr, caps) {
            Work::Pass => {
                self.deliver_one(j, &f, tagging, cx);
            }
            work => self.deliver_soft(j, frame, work, caps, tagging, cx),
        }
    }

    /// Slot `j`'s receive ring offered a chain that failed validation: a
    /// `bad_descriptor` drop, and the port reset (at delivery, or while
    /// readying a chain in an idle round).
    pub(super) fn rx_ring_hostile(&mut self, j: usize, now: Instant, e: &ChainError) {
        if let Some(s) = &self.table.slots[j] {
            s.stats.rx.drop(DropReason::BadDescriptor);
        }
        self.reset(j, now, &format_args!("receive queue: {e}"));
    }

    /// The software fallback: the frame is copied out once (it is read in
    /// full anyway to checksum it), completed or cut into segments, and each
    /// result delivered like a frame from a local port. A hostile receive
    /// ring stops it; its port is reset once the frame is done with.
    pub(super) fn deliver_soft(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        work: Work,
        caps: Caps,
        tagging: Tagging,
        cx: FrameCtx,
    ) {
        let Datapath {
            table: Table { slots, .. },
            scratch,
            rx_touched,
            ..
        } = self;
        let Scratch {
            soft,
            seg,
            rx_chain,
            plan,
            ..
        } = scratch;
        let Some(dst) = slots[j].as_mut() else {
            return;
        };
        let mut hostile = None;
        let mut deliver = |f: &Frame<'_>| {
            let mut out = DeliverCx {
                chain: rx_chain,
                plan,
                hint: cx.rx_hint,
                to_vtep: cx.to_vtep,
                stats: &dst.stats,
            };
            let result = dst.port.deliver(f, tagging, &mut out);
            match account(dst, j, result, rx_touched) {
                Ok(ok) => ok,
                Err(e) => {
                    hostile = Some(e);
                    false
                }
            }
        };
        let len = frame.frame_len as usize;
        let got = frame.src.read(frame.hdr_len as u64, &mut soft[..len]);
        let l3 = 14 + frame.src_tag_len as usize;
        let result = if got != len {
            Err(DropReason::Malformed)
        } else if work == Work::Checksum {
            match offload::complete_checksum(&mut soft[..len], &frame.vhdr) {
                Ok(mut h) => {
                    h.flags = offload::egress_flags(h.flags, caps);
                    let bytes = &soft[..len];
                    let f = Frame {
                        src: Src::Local(bytes),
                        head: head_of(bytes),
                        hdr_len: 0,
                        vhdr: h,
                        ..*frame
                    };
                    if deliver(&f) {
                        crate::stats::bump(&dst.stats.rx.sw_checksums, 1);
                    }
                    Ok(())
                }
                Err(_) => Err(DropReason::Malformed),
            }
        } else {
            let mut failed = false;
            let cut = offload::segment(&soft[..len], &frame.vhdr, l3, caps.csum, seg, |b, h| {
                let f = Frame {
                    src: Src::Local(b),
                    head: head_of(b),
                    hdr_len: 0,
                    vhdr: *h,
                    frame_len: b.len() as u64,
                    ..*frame
                };
                failed = !deliver(&f);
                !failed
            });
            match cut {
                Ok(_) => {
                    if !failed {
                        crate::stats::bump(&dst.stats.rx.sw_segmented, 1);
                    }
                    Ok(())
                }
                Err(Reject::Malformed) => Err(DropReason::Malformed),
                Err(Reject::Unsupported) => Err(DropReason::Offload),
            }
        };
        if let Err(r) = result {
            dst.stats.rx.drop(r);
        }
        if let Some(e) = hostile {
            self.rx_ring_hostile(j, cx.now, &e);
        }
    }

    pub(super) fn deliver_one(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        tagging: Tagging,
        cx: FrameCtx,
    ) -> bool {
        let Datapath {
            table: Table { slots, .. },
            scratch,
            ..
        } = self;
        let Some(dst) = slots[j].as_mut() else {
            return false;
        };
        let mut out = DeliverCx {
            chain: &mut scratch.rx_chain,
            plan: &mut scratch.plan,
            hint: cx.rx_hint,
            to_vtep: cx.to_vtep,
            stats: &dst.stats,
        };
        let result = dst.port.deliver(frame, tagging, &mut out);
        self.delivered(j, result, cx.now)
    }

    /// Accounts for a delivery to slot `j`: counted, or dropped (a full ring
    /// calls the guest at once), or the destination reset when it was hostile.
    #[inline]
    pub(super) fn delivered(
        &mut self,
        j: usize,
        result: Result<usize, DeliverError>,
        now: Instant,
    ) -> bool {
        let Some(dst) = self.table.slots[j].as_mut() else {
            return false;
        };
        match account(dst, j, result, &mut self.rx_touched) {
            Ok(ok) => ok,
            Err(e) => {
                self.rx_ring_hostile(j, now, &e);
                false
            }
        }
    }
}

/// Counts a delivery to `dst` (slot `j`): the frame, or its drop (a full
/// ring calls the guest at once). Whether it was delivered; `Err`: the
/// receive ring was hostile, for the caller to reset the port.
#[inline]
fn account(
    dst: &mut Slot,
    j: usize,
    result: Result<usize, DeliverError>,
    rx_touched: &mut Vec<usize>,
) -> Result<bool, ChainError> {
    match result {
        Ok(bytes) => {
            dst.stats.rx.frame(bytes);
            dst.rt.delivered(j, rx_touched);
            Ok(true)
        }
        Err(DeliverError::Drop(r)) => {
            dst.stats.rx.drop(r);
            // The guest must hear about what it has, to return buffers.
            dst.rt.urgent |= r == DropReason::RingFull;
            Ok(false)
        }
        Err(DeliverError::Hostile(e)) => Err(e),
    }
}
