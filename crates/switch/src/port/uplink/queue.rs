//! An uplink's receive queue: an AF_PACKET socket and its mapped ring,
//! frames read in place with the VLAN tag the driver stripped put back.

use super::{BUF_LEN, HDR_LEN};
use crate::sys::packet::{BpfInsn, RxRing};
use std::io;

/// What the receive ring handed over.
#[derive(Debug, PartialEq, Eq)]
pub enum Rx<'a> {
    /// A frame, virtio-net header first.
    Frame(&'a [u8]),
    /// A frame the kernel truncated (larger than a slot, and no full copy
    /// could be queued).
    Unsupported,
}

/// One receive queue: a socket and its ring.
#[derive(Debug)]
pub struct RxQueue {
    pub(super) ring: RxRing,
    /// Frames larger than a slot land here.
    big: Box<[u8]>,
    /// The filter program in force.
    pub(super) program: Vec<BpfInsn>,
    /// When the kernel received the frame last peeked (CLOCK_REALTIME).
    pub stamp: std::time::Duration,
    /// The direct-mode port this queue belongs to: its frames go straight
    /// there, without switching.
    pub direct: Option<crate::PortId>,
    /// Frames and bytes taken from this queue (written by the worker only).
    pub packets: u64,
    /// Bytes of those frames (virtio-net header included).
    pub bytes: u64,
    kernel_drops: u64,
}

impl RxQueue {
    pub(super) fn open(
        ifname: &str,
        frame_size: usize,
        frames: usize,
        program: Vec<BpfInsn>,
    ) -> io::Result<Self> {
        Ok(Self {
            ring: RxRing::open(ifname, frame_size, frames, Some(&program))?,
            big: vec![0u8; BUF_LEN].into_boxed_slice(),
            program,
            stamp: std::time::Duration::ZERO,
            direct: None,
            packets: 0,
            bytes: 0,
            kernel_drops: 0,
        })
    }

    /// The next received frame, its stripped tag re-inserted in place.
    /// Call [`RxQueue::release`] once done with it.
    #[inline]
    pub fn peek(&mut self) -> Option<Rx<'_>> {
        let f = self.ring.peek()?;
        self.stamp = f.stamp;
        if f.copied {
            return Some(self.peek_copy());
        }
        let f = self.ring.peek()?;
        if f.truncated || f.len < HDR_LEN + 14 {
            return Some(Rx::Unsupported);
        }
        // The slot has room before the header for a tag.
        reinsert_tag(f.buf, f.at, f.len, f.vlan_tci)
    }

    /// The full copy of a frame larger than a slot, from the socket.
    #[cold]
    fn peek_copy(&mut self) -> Rx<'_> {
        match self.ring.recv_copy(&mut self.big[4..]) {
            Ok((n, tci)) if n >= HDR_LEN + 14 => {
                reinsert_tag(&mut self.big, 4, n, tci).unwrap_or(Rx::Unsupported)
            }
            _ => Rx::Unsupported,
        }
    }

    /// Hands the frame [`RxQueue::peek`] returned back to the kernel.
    #[inline]
    pub fn release(&mut self) {
        self.ring.release();
    }

    /// Frames the kernel dropped because this queue's ring was full.
    pub fn kernel_drops(&mut self) -> u64 {
        // The kernel's counter resets on every read: keep the total here.
        self.kernel_drops += self.ring.take_drops().map_or(0, u64::from);
        self.kernel_drops
    }
}

/// `buf[at..at + len]` is a header and frame; with `tci`, moves [hdr][dst
/// src] 4 bytes back and puts the tag after the MACs.
#[inline]
fn reinsert_tag(buf: &mut [u8], at: usize, len: usize, tci: Option<u16>) -> Option<Rx<'_>> {
    let Some(tci) = tci else {
        return Some(Rx::Frame(&buf[at..at + len]));
    };
    if at < 4 {
        return Some(Rx::Unsupported);
    }
    let at = at - 4;
    buf.copy_within(at + 4..at + 4 + HDR_LEN + 12, at);
    buf[at + HDR_LEN + 12..at + HDR_LEN + 14].copy_from_slice(&[0x81, 0x00]);
    buf[at + HDR_LEN + 14..at + HDR_LEN + 16].copy_from_slice(&tci.to_be_bytes());
    shift_offload_offsets(&mut buf[at..at + HDR_LEN], 4);
    Some(Rx::Frame(&buf[at..at + len + 4]))
}

/// Moves a virtio-net header's offsets (checksum start, GSO header length)
/// by `by` bytes: the kernel counts them in the frame without the tag the
/// driver stripped, and the tag goes back in before them.
fn shift_offload_offsets(h: &mut [u8], by: u16) {
    use crate::wire::virtio_net::{FLAG_NEEDS_CSUM, GSO_NONE};
    let bump = |h: &mut [u8], at: usize| {
        let v = u16::from_le_bytes([h[at], h[at + 1]]).wrapping_add(by);
        h[at..at + 2].copy_from_slice(&v.to_le_bytes());
    };
    if h[0] & FLAG_NEEDS_CSUM != 0 {
        bump(h, 6);
    }
    if h[1] != GSO_NONE {
        bump(h, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_a_reinserted_tag() {
        let mut h = [1u8, 1, 54, 0, 0xa8, 5, 34, 0, 16, 0];
        shift_offload_offsets(&mut h, 4);
        assert_eq!(h, [1, 1, 58, 0, 0xa8, 5, 38, 0, 16, 0]);
        let mut plain = [0u8, 0, 54, 0, 0, 0, 34, 0, 16, 0];
        shift_offload_offsets(&mut plain, 4);
        assert_eq!(plain, [0, 0, 54, 0, 0, 0, 34, 0, 16, 0]);
    }
}
