//! A frame being forwarded: where its bytes are and what its headers say.

use crate::lro;
use crate::vhost_user::buffers::Src;
use crate::vlan::Tagging;
use crate::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_NONE};
use std::net::Ipv4Addr;
use std::time::Instant;

/// A local frame's first bytes, as [`Frame::head`].
pub(super) fn head_of(b: &[u8]) -> &[u8] {
    &b[..b.len().min(lro::PEEK_LEN)]
}

/// A frame being forwarded: where it is and what its first bytes say.
#[derive(Clone, Copy)]
pub(crate) struct Frame<'a> {
    pub(crate) src: Src<'a>,
    /// Its first bytes from the MACs, as read already (the L2 header at
    /// least; up to [`lro::PEEK_LEN`] of a local frame).
    pub(crate) head: &'a [u8],
    pub(crate) hdr_len: usize,
    pub(crate) vhdr: VirtioNetHdrRepr,
    pub(crate) macs: [u8; 12],
    pub(crate) src_tag_len: u64,
    pub(crate) tci_pcp: u16,
    pub(crate) frame_len: u64,
}

impl Frame<'_> {
    /// The L2 header as it leaves with `tagging` (MACs, then a tag when tagged); its length.
    pub(crate) fn egress_l2(&self, tagging: Tagging) -> ([u8; 16], usize) {
        let mut l2 = [0u8; 16];
        l2[..12].copy_from_slice(&self.macs);
        match tagging {
            Tagging::Untagged => (l2, 12),
            Tagging::Tagged(vid) => {
                l2[12..14].copy_from_slice(&[0x81, 0x00]);
                l2[14..16].copy_from_slice(&(self.tci_pcp | vid).to_be_bytes());
                (l2, 16)
            }
        }
    }

    /// Offset and length of what follows the source's MACs and tag.
    pub(crate) fn rest(&self) -> (u64, u64) {
        (
            self.hdr_len as u64 + 12 + self.src_tag_len,
            self.frame_len - 12 - self.src_tag_len,
        )
    }

    /// The virtio-net header for an egress L2 header of `l2_len` bytes:
    /// offload metadata carried over, offsets moved by the tag change.
    pub(crate) fn egress_vhdr(&self, l2_len: usize, num_buffers: u16) -> VirtioNetHdrRepr {
        let delta = l2_len as i32 - 12 - self.src_tag_len as i32;
        let mut vh = self.vhdr;
        if vh.flags & FLAG_NEEDS_CSUM != 0 {
            vh.csum_start = (i32::from(vh.csum_start) + delta) as u16;
        }
        if vh.gso_type != GSO_NONE {
            vh.hdr_len = (i32::from(vh.hdr_len) + delta) as u16;
        }
        vh.num_buffers = num_buffers;
        vh
    }
}

/// What forwarding one frame depends on besides its bytes: where it came
/// from, when, and what the burst and the tunnel say about it. Passed down
/// with the frame (a copy: nothing is set around calls).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameCtx {
    /// The slot the frame came from.
    pub(crate) from: usize,
    /// The round's time.
    pub(crate) now: Instant,
    /// Frames of the transmit burst still to forward, this one included:
    /// how many receive chains a destination pops ahead when it runs out
    /// (one frame in flight pops one: no latency for the rest).
    pub(crate) rx_hint: usize,
    /// The VTEP the frame came from (a VXLAN port's frame): its source
    /// address is learned behind it.
    pub(crate) from_vtep: Option<Ipv4Addr>,
    /// The VTEP the frame goes to when delivered to a VXLAN port: its
    /// destination's, from the FDB; `None` floods to the port's remotes.
    pub(crate) to_vtep: Option<Ipv4Addr>,
}

impl FrameCtx {
    /// The source of a frame from another worker: no slot here.
    pub(crate) const REMOTE: usize = usize::MAX;

    /// A frame from slot `from` at `now`, on its own (no burst, no tunnel).
    #[inline]
    pub(crate) fn new(from: usize, now: Instant) -> Self {
        Self {
            from,
            now,
            rx_hint: 1,
            from_vtep: None,
            to_vtep: None,
        }
    }
}
