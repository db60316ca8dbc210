//! The endpoint's two queues and what moves frames through them: frames
//! are copied into transmit buffers and published, received frames are
//! copied out (or only counted) and their buffers offered again.
//!
//! Per frame this is a few direct stores and one copy (`ring`'s accessors);
//! what can be decided once per burst is: freeing what the switch sent,
//! the header's bytes, the available-index store and the kick.

use super::ring::DriverRing;
use super::{EndpointError, EndpointStats, BUF_SIZE, MAX_FRAME};
use crate::vhost_user::device::feature;
use crate::wire::virtio_net::{self, VirtioNetHdr, VirtioNetHdrRepr};
use vmm_sys_util::eventfd::EventFd;

pub(super) const RXQ: usize = 0;
pub(super) const TXQ: usize = 1;

/// The rings and their notifiers: everything that moves frames.
pub(super) struct Queues {
    pub rx: DriverRing,
    pub tx: DriverRing,
    pub kick: [EventFd; 2],
    pub features: u64,
    pub stats: EndpointStats,
}

/// Frames at least this long are compared with what their buffer holds
/// before they are written (see `send_staged`). Below it, writing is left
/// alone: comparing a short frame costs the rate loop a noticeable share
/// of its instructions (callgrind on `rate_step`) for one or two lines
/// saved.
const REUSE_FROM: usize = 256;

/// A virtio-net header as the bytes that precede a frame.
type Header = [u8; virtio_net::HEADER_LEN];

impl Queues {
    /// Sends `frames` as one burst with the offload metadata `hdr`: one
    /// available-index update, at most one kick. Returns how many went out
    /// before the ring filled.
    pub fn send_burst(&mut self, hdr: &VirtioNetHdrRepr, frames: &[&[u8]]) -> usize {
        let h = header(hdr);
        self.reclaim();
        self.tx.stage();
        let mut n = 0;
        for f in frames {
            if self.send_staged(&h, f).is_err() {
                break;
            }
            n += 1;
        }
        self.tx.flush();
        self.kick_if_needed();
        n
    }

    /// Sends one frame and kicks if the switch wants it.
    pub fn send(&mut self, hdr: &VirtioNetHdrRepr, frame: &[u8]) -> Result<(), EndpointError> {
        self.reclaim();
        self.send_staged(&header(hdr), frame)?;
        self.kick_if_needed();
        Ok(())
    }

    /// Frees the transmit buffers the switch is done with.
    fn reclaim(&mut self) {
        while let Some((id, _)) = self.tx.reap() {
            self.tx.release(id);
        }
    }

    /// Writes and publishes one frame (visible unless the ring is staging); no kick.
    fn send_staged(&mut self, h: &Header, frame: &[u8]) -> Result<(), EndpointError> {
        if frame.len() > MAX_FRAME {
            return Err(EndpointError::TooLarge);
        }
        let total = h.len() + frame.len();
        if total <= BUF_SIZE as usize {
            // The common case: the header and frame in one buffer.
            let id = self.tx.take().ok_or(EndpointError::TxFull)?;
            // A buffer that already holds a large frame (a rate test sends
            // the same frames again and again) is not written again, as a
            // DPDK sender reuses its mbufs: rewriting 1.5 KB the switch just
            // read takes every line back from the switch's core, and the
            // endpoint, not the switch, would then set a large frame's rate.
            let written = self.tx.buffer(id).is_some_and(|b| {
                (frame.len() >= REUSE_FROM && b.holds_parts(h, frame)) || b.write_parts(h, frame)
            });
            if !written {
                self.tx.release(id);
                return Err(EndpointError::TooLarge);
            }
            self.tx.publish(id, total as u32, false);
        } else {
            self.send_chain(h, frame, total)?;
        }
        self.stats.tx_frames += 1;
        Ok(())
    }

    /// A frame longer than one buffer as a descriptor chain: buffer k holds
    /// bytes `[k * BUF_SIZE, (k + 1) * BUF_SIZE)` of header-then-frame.
    fn send_chain(&mut self, h: &Header, frame: &[u8], total: usize) -> Result<(), EndpointError> {
        let b = BUF_SIZE as usize;
        let nbuf = total.div_ceil(b);
        if nbuf > self.tx.available() {
            return Err(EndpointError::TxFull);
        }
        let mut ids = [0u16; MAX_FRAME / BUF_SIZE as usize + 2];
        for id in &mut ids[..nbuf] {
            *id = self.tx.take().ok_or(EndpointError::TxFull)?;
        }
        let hl = h.len();
        let mut ok = true;
        for (k, &id) in ids[..nbuf].iter().enumerate() {
            let (lo, hi) = (k * b, ((k + 1) * b).min(total));
            // Only the first buffer holds (all of) the header.
            let head: &[u8] = if k == 0 { h } else { &[] };
            let body = &frame[lo.max(hl) - hl..hi - hl];
            ok &= self
                .tx
                .buffer(id)
                .is_some_and(|s| s.write_parts(head, body));
        }
        if !ok {
            for &id in &ids[..nbuf] {
                self.tx.release(id);
            }
            return Err(EndpointError::TooLarge);
        }
        let last = (total - (nbuf - 1) * b) as u32;
        self.tx.publish_chain(&ids[..nbuf], last, false);
        Ok(())
    }

    fn kick_if_needed(&mut self) {
        if self.tx.needs_kick() {
            let _ = self.kick[TXQ].write(1);
            self.stats.kicks += 1;
        }
    }

    /// Receives one frame into `buf` (cut to its length) with its header;
    /// its buffers are offered again at once.
    pub fn recv(&mut self, buf: &mut [u8]) -> Option<(VirtioNetHdrRepr, usize)> {
        let (id, len) = self.rx.reap()?;
        let mut h: Header = [0; virtio_net::HEADER_LEN];
        if let Some(s) = self.rx.buffer(id) {
            s.read_into(&mut h);
        }
        let hdr = VirtioNetHdr::new_checked(&h[..], h.len())
            .and_then(|v| VirtioNetHdrRepr::parse(&v))
            .unwrap_or_default();
        let mut total = self.copy_out(id, len, buf, 0);
        // With mergeable buffers the frame may continue in further buffers.
        let nbuf = hdr.num_buffers.max(1);
        self.rx.publish(id, BUF_SIZE, true);
        for _ in 1..nbuf {
            let Some((id, len)) = self.rx.reap() else {
                break;
            };
            total += self.copy_out(id, len, buf, total);
            self.rx.publish(id, BUF_SIZE, true);
        }
        self.kick_rx_if_needed();
        self.stats.rx_frames += 1;
        Some((hdr, total))
    }

    /// Receives up to `max` frames without reading them: their buffers are
    /// offered again as one batch (one index update, at most one kick).
    /// Returns how many.
    pub fn drain(&mut self, max: usize) -> usize {
        let mergeable = self.features & feature::MRG_RXBUF != 0;
        self.rx.stage();
        let mut n = 0;
        while n < max {
            let Some((id, _)) = self.rx.reap() else {
                break;
            };
            let nbuf = if mergeable { self.num_buffers(id) } else { 1 };
            self.rx.publish(id, BUF_SIZE, true);
            for _ in 1..nbuf {
                let Some((id, _)) = self.rx.reap() else {
                    break;
                };
                self.rx.publish(id, BUF_SIZE, true);
            }
            n += 1;
        }
        self.rx.flush();
        self.kick_rx_if_needed();
        self.stats.rx_frames += n as u64;
        n
    }

    /// The buffers the frame starting in buffer `id` spans (its header's
    /// `num_buffers`, at least 1).
    fn num_buffers(&self, id: u16) -> u16 {
        let mut nb = [0u8; 2];
        if let Some(s) = self.rx.buffer_part(id, 10, 2) {
            s.read_into(&mut nb);
        }
        u16::from_le_bytes(nb).max(1)
    }

    /// Copies the `len` bytes the switch wrote in buffer `id` (less the
    /// header in the first) to `buf[at..]`, as many as fit; returns how many.
    fn copy_out(&self, id: u16, len: u32, buf: &mut [u8], at: usize) -> usize {
        let skip = if at == 0 {
            virtio_net::HEADER_LEN as u32
        } else {
            0
        };
        let n = len.min(BUF_SIZE).saturating_sub(skip);
        let Some(out) = buf.get_mut(at..) else {
            return 0;
        };
        match self.rx.buffer_part(id, skip, n) {
            Some(s) => s.read_into(out),
            None => 0,
        }
    }

    fn kick_rx_if_needed(&mut self) {
        if self.rx.needs_kick() {
            let _ = self.kick[RXQ].write(1);
        }
    }
}

/// `hdr` as the bytes that precede a frame.
fn header(hdr: &VirtioNetHdrRepr) -> Header {
    let mut h: Header = [0; virtio_net::HEADER_LEN];
    let _ = hdr.emit(&mut h, virtio_net::HEADER_LEN);
    h
}
