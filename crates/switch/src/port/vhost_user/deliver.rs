//! Delivery into a guest's receive queue.

use super::VhostUserPort;
use crate::datapath::Copies;
use crate::datapath::{DeliverError, Frame, Look, MAX_MERGE};
use crate::stats::{DropReason, PortStats};
use crate::vhost_user::buffers::{self, Src};
use crate::vhost_user::chain::{Chain, ChainError, Seg, MAX_SEGS};
use crate::vhost_user::device::{rx_queue, RX_QUEUE};
use crate::vhost_user::memory::GuestMem;
use crate::vlan::Tagging;
use crate::wire::virtio_net;
use std::sync::Arc;

/// Receive buffers gathered for one frame (several chains with MRG_RXBUF).
pub(crate) struct RxPlan {
    segs: [Seg; MAX_SEGS],
    nsegs: usize,
    heads: [(u16, u32); MAX_MERGE],
    nheads: usize,
    cap: u64,
}

impl RxPlan {
    /// Room for the most buffers a frame may span.
    pub(crate) fn new() -> Self {
        Self {
            segs: [Seg::default(); MAX_SEGS],
            nsegs: 0,
            heads: [(0, 0); MAX_MERGE],
            nheads: 0,
            cap: 0,
        }
    }
}

/// One plain frame of a run (`VhostUserPort::deliver_plain_run`): the
/// source's first buffer, its [`Look`], its length without the header.
pub(crate) type PlainFrame = (Seg, Look, u64);

/// What a run of plain frames came to at the destination.
#[derive(Debug, Default)]
pub(crate) struct PlainRun {
    /// Frames taken from the source's burst: delivered, dropped for want
    /// of a receive chain, or struck by the receive ring's fault.
    pub(crate) taken: usize,
    /// Their bytes (without the virtio-net header).
    pub(crate) taken_bytes: u64,
    /// Frames delivered, and their bytes.
    pub(crate) delivered: u32,
    pub(crate) delivered_bytes: u64,
    /// Frames dropped: the receive queue had no chain.
    pub(crate) full: u64,
    /// The receive ring's fault that ended the run (the port must be reset).
    pub(crate) fault: Option<ChainError>,
}

impl VhostUserPort {
    /// Delivers a frame into the guest's receive queue (a multiqueue
    /// guest's: the one its flow steers to, counted in `stats`' pair
    /// counters): the first available chain when it fits (most frames),
    /// else several with mergeable receive buffers; `hint`: chains to pop
    /// ahead (frames still to come in the burst).
    pub(crate) fn deliver_frame(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        plan: &mut RxPlan,
        chain: &mut Chain,
        hint: usize,
        stats: &PortStats,
    ) -> Result<usize, DeliverError> {
        if self.device.queue_pairs() == 1 {
            return self.deliver_on(RX_QUEUE, f, tagging, plan, chain, hint);
        }
        let ready = self.device.ready_rx_pairs();
        let mut pair = super::steer::pair_for(&self.steer, f, ready | self.lent_mask());
        if ready & 1 << pair == 0 {
            // Steered to a pair another worker serves (a flood, or a frame
            // that came through another worker): among the pairs here.
            pair = super::steer::pair_for(&self.steer, f, ready);
        }
        let r = self.deliver_on(rx_queue(pair), f, tagging, plan, chain, hint);
        match r {
            Ok(bytes) => stats.pair(pair).rx.frame(bytes),
            Err(DeliverError::Drop(DropReason::RingFull)) => {
                crate::stats::bump(&stats.pair(pair).rx_ring_full, 1)
            }
            Err(_) => {}
        }
        r
    }

    /// [`VhostUserPort::deliver_frame`] into receive queue `qi`.
    #[inline]
    fn deliver_on(
        &mut self,
        qi: usize,
        f: &Frame<'_>,
        tagging: Tagging,
        plan: &mut RxPlan,
        chain: &mut Chain,
        hint: usize,
    ) -> Result<usize, DeliverError> {
        let hdr_len = self.device.vnet_hdr_len();
        let mrg = self.device.mrg_rxbuf();
        let Some(q) = self.device.queue(qi) else {
            return Err(DeliverError::Drop(DropReason::RingFull));
        };
        let (l2, l2_len) = f.egress_l2(tagging);
        let (rest_off, rest_len) = f.rest();
        let out_frame_len = l2_len as u64 + rest_len;
        let total = hdr_len as u64 + out_frame_len;

        match q.take(chain, hint) {
            Ok(true) => {}
            Ok(false) => return Err(DeliverError::Drop(DropReason::RingFull)),
            Err(e) => return Err(DeliverError::Hostile(e)),
        }
        // Most frames fit the first chain: its buffers are used as they are.
        let single = chain.len() >= total;
        if !single {
            // Mergeable receive buffers: more chains until the frame fits.
            if !mrg {
                q.untake(1);
                return Err(DeliverError::Drop(DropReason::RingFull));
            }
            plan.nsegs = 0;
            plan.nheads = 0;
            plan.cap = 0;
            loop {
                if plan.nsegs + chain.segs().len() > MAX_SEGS {
                    q.untake(plan.nheads + 1);
                    return Err(DeliverError::Drop(DropReason::RingFull));
                }
                plan.segs[plan.nsegs..plan.nsegs + chain.segs().len()]
                    .copy_from_slice(chain.segs());
                plan.nsegs += chain.segs().len();
                plan.heads[plan.nheads] = (chain.head(), chain.len() as u32);
                plan.nheads += 1;
                plan.cap += chain.len();
                if plan.cap >= total {
                    break;
                }
                if plan.nheads == MAX_MERGE {
                    q.untake(plan.nheads);
                    return Err(DeliverError::Drop(DropReason::RingFull));
                }
                match q.take(chain, hint) {
                    Ok(true) => {}
                    Ok(false) => {
                        q.untake(plan.nheads);
                        return Err(DeliverError::Drop(DropReason::RingFull));
                    }
                    Err(e) => return Err(DeliverError::Hostile(e)),
                }
            }
        }
        let (segs, nheads) = if single {
            (chain.segs(), 1)
        } else {
            (&plan.segs[..plan.nsegs], plan.nheads)
        };

        let mut hb = [0u8; virtio_net::HEADER_LEN];
        let _ = f.egress_vhdr(l2_len, nheads as u16).emit(&mut hb, hdr_len);
        let at = {
            let mem: &GuestMem = q.mem();
            let mut at = if write_header(mem, segs, &hb, hdr_len) {
                // Header words stored only where they change
                // (`Span::write_header`), then the MACs (and tag).
                hdr_len as u64 + buffers::write(mem, segs, hdr_len as u64, &l2[..l2_len]) as u64
            } else {
                // Header and MACs (and tag) in one write.
                let mut head = [0u8; virtio_net::HEADER_LEN + 16];
                head[..hdr_len].copy_from_slice(&hb[..hdr_len]);
                head[hdr_len..hdr_len + l2_len].copy_from_slice(&l2[..l2_len]);
                buffers::write(mem, segs, 0, &head[..hdr_len + l2_len]) as u64
            };
            at += match f.src {
                Src::Guest {
                    mem: smem,
                    segs: ssegs,
                } => buffers::copy(smem, ssegs, rest_off, mem, segs, at, rest_len),
                Src::Local(b) => {
                    let from = (rest_off as usize).min(b.len());
                    let to = (from + rest_len as usize).min(b.len());
                    buffers::write(mem, segs, at, &b[from..to]) as u64
                }
            };
            at
        };
        if at != total {
            // Unmapped memory under a validated buffer: the memory table changed under us.
            q.untake(nheads);
            return Err(DeliverError::Drop(DropReason::BadDescriptor));
        }
        if single {
            q.add_used(chain.head(), total as u32)
                .map_err(DeliverError::Hostile)?;
        } else {
            let mut left = total;
            for &(head, cap) in &plan.heads[..plan.nheads] {
                let used = left.min(u64::from(cap));
                left -= used;
                q.add_used(head, used as u32)
                    .map_err(DeliverError::Hostile)?;
            }
        }
        Ok(out_frame_len as usize)
    }

    /// Delivers plain frames (the fast case, `datapath/fast.rs`) while
    /// `next(k)` gives the run's k-th, as [`VhostUserPort::deliver_plain`]
    /// delivers one, with one look at the port for them all (its pairs,
    /// header length and receive queue); `left`: frames still to come in
    /// the burst, to pop receive chains ahead. A frame that does not go
    /// into one receive buffer ends the run with nothing taken (the caller
    /// delivers it on its own); one that finds no chain is dropped and the
    /// run goes on, as one by one; a fault of the receive ring ends it.
    #[inline(always)]
    pub(crate) fn deliver_plain_run(
        &mut self,
        smem: &Arc<GuestMem>,
        mut next: impl FnMut(usize) -> Option<PlainFrame>,
        left: usize,
        copies: &mut Copies,
    ) -> PlainRun {
        let mut run = PlainRun::default();
        if self.pairs > 1 {
            return run;
        }
        let hdr_len = self.device.vnet_hdr_len();
        let Some(q) = self.device.queue(RX_QUEUE) else {
            return run;
        };
        while let Some((s, look, frame_len)) = next(run.taken) {
            match q.take_first(left - run.taken) {
                Ok(Some((head, d, len))) => {
                    let total = hdr_len as u64 + frame_len;
                    if len < total
                        || !queue_copy(copies, smem, s, &look, frame_len, q.mem(), d, hdr_len)
                    {
                        q.untake(1);
                        break;
                    }
                    if let Err(e) = q.add_used(head, total as u32) {
                        run.fault = Some(e);
                    } else {
                        run.delivered += 1;
                        run.delivered_bytes += frame_len;
                    }
                }
                Ok(None) => run.full += 1,
                Err(e) => run.fault = Some(e),
            }
            run.taken += 1;
            run.taken_bytes += frame_len;
            if run.fault.is_some() {
                break;
            }
        }
        run
    }

    /// Delivers a plain frame (the fast case, `datapath/fast.rs`): the
    /// source's header carried over with one receive chain, the frame's
    /// `frame_len` bytes after the source's header (`look`) copied once.
    /// None, with nothing taken, when the frame needs more than the first
    /// available chain (the full path merges buffers) or the port is a
    /// multiqueue vNIC (the full path steers).
    ///
    /// Always inlined: returned through memory, its result was written
    /// field by field and read back whole, a load the store buffer cannot
    /// forward. That load then waited for every older store to commit,
    /// the frame's own stores into the guest's lines among them: in the
    /// placement where those lines live on the other core, the worker
    /// stalled there, once per frame (`perf annotate` shows it).
    ///
    /// The copy of a frame that fits one receive buffer waits in `copies`
    /// for the end of the burst (`datapath/copies/`): the caller makes
    /// them before the source chain goes back to its guest.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn deliver_plain(
        &mut self,
        smem: &Arc<GuestMem>,
        ssegs: &[Seg],
        look: &Look,
        frame_len: u64,
        chain: &mut Chain,
        hint: usize,
        copies: &mut Copies,
    ) -> Option<Result<usize, DeliverError>> {
        if self.pairs > 1 {
            // A multiqueue vNIC (or one of its pairs served here):
            // steering and pair counters, on the full path.
            return None;
        }
        let hdr_len = self.device.vnet_hdr_len();
        let Some(q) = self.device.queue(RX_QUEUE) else {
            return Some(Err(DeliverError::Drop(DropReason::RingFull)));
        };
        match q.take(chain, hint) {
            Ok(true) => {}
            Ok(false) => return Some(Err(DeliverError::Drop(DropReason::RingFull))),
            Err(e) => return Some(Err(DeliverError::Hostile(e))),
        }
        let total = hdr_len as u64 + frame_len;
        if chain.len() < total {
            q.untake(1);
            return None;
        }
        let mem = q.mem();
        let segs = chain.segs();
        // Most frames: one source buffer, one receive buffer, one copy,
        // made with the burst's others.
        let queued = match (ssegs.first(), segs.first()) {
            (Some(&s), Some(&d)) => queue_copy(copies, smem, s, look, frame_len, mem, d, hdr_len),
            _ => false,
        };
        let at = if queued {
            total
        } else {
            let [lo, hi] = look.header();
            let words = [lo, hi | 1 << 16];
            let skip = look.hdr_len() as u64;
            let mut hb = [0u8; 16];
            hb[..8].copy_from_slice(&words[0].to_le_bytes());
            hb[8..].copy_from_slice(&words[1].to_le_bytes());
            let (smem, mem): (&GuestMem, &GuestMem) = (smem, mem);
            let at = buffers::write(mem, segs, 0, &hb[..hdr_len]) as u64;
            at + buffers::copy(smem, ssegs, skip, mem, segs, at, frame_len)
        };
        if at != total {
            q.untake(1);
            return Some(Err(DeliverError::Drop(DropReason::BadDescriptor)));
        }
        Some(
            q.add_used(chain.head(), total as u32)
                .map(|()| frame_len as usize)
                .map_err(DeliverError::Hostile),
        )
    }
}

/// Writes the virtio-net header `hb` (`hdr_len` bytes, 10 or 12) at the
/// start of receive buffers `segs` when the first holds all of it, each
/// word only where it changes, as the fast case does
/// (`Span::write_words_with`); false, with nothing written, otherwise.
fn write_header(
    mem: &GuestMem,
    segs: &[Seg],
    hb: &[u8; virtio_net::HEADER_LEN],
    hdr_len: usize,
) -> bool {
    let Some(first) = segs.first().filter(|s| s.len as usize >= hdr_len) else {
        return false;
    };
    let Some(span) = mem.span(first.addr, hdr_len as u64) else {
        return false;
    };
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&hb[..8]);
    hi[..hdr_len - 8].copy_from_slice(&hb[8..hdr_len]);
    span.write_header([u64::from_le_bytes(lo), u64::from_le_bytes(hi)], hdr_len)
}

/// Queues a plain frame's copy (`frame_len` bytes after the source's
/// header in its first buffer `s`) with its header into receive buffer
/// `d` of `mem`: false, with nothing queued, when the frame is not all in
/// `s` or does not fit `d`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn queue_copy(
    copies: &mut Copies,
    smem: &Arc<GuestMem>,
    s: Seg,
    look: &Look,
    frame_len: u64,
    mem: &Arc<GuestMem>,
    d: Seg,
    hdr_len: usize,
) -> bool {
    // The source's first ten bytes, and one buffer with mergeable
    // receive buffers (the field is only in the 12-byte header).
    let [lo, hi] = look.header();
    let words = [lo, hi | 1 << 16];
    let skip = look.hdr_len() as u64;
    u64::from(s.len) >= skip + frame_len
        && copies.push(
            smem.maps(),
            s.addr + skip,
            frame_len,
            mem.maps(),
            d.addr,
            u64::from(d.len),
            words,
            hdr_len,
        )
}
