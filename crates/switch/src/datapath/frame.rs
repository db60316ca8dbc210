//! A frame being forwarded: where its bytes are and what its headers say.

use crate::lro;
use crate::vhost_user::buffers::Src;
use crate::vlan::Tagging;
use crate::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_NONE};

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
