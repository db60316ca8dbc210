//! Frames assembled in the switch's own memory: a classified frame with
//! its egress L2 header (and a virtio-net header first, for a tap or an
//! AF_PACKET socket) written into a port's output buffer. Tap, uplink and
//! VXLAN delivery share it.

use crate::datapath::{DeliverError, Frame};
use crate::stats::DropReason;
use crate::vlan::Tagging;

/// Assembles a frame with a virtio-net header of `hl` bytes in `out`;
/// returns (bytes to send, frame bytes without the header).
pub(crate) fn assemble(
    out: &mut [u8],
    hl: usize,
    f: &Frame<'_>,
    tagging: Tagging,
) -> Result<(usize, usize), DeliverError> {
    let (l2, l2_len) = f.egress_l2(tagging);
    let (rest_off, rest_len) = f.rest();
    let total = hl + l2_len + rest_len as usize;
    if total > out.len() {
        return Err(DeliverError::Drop(DropReason::Malformed));
    }
    if hl > 0 {
        let _ = f.egress_vhdr(l2_len, 0).emit(&mut out[..hl], hl);
    }
    out[hl..hl + l2_len].copy_from_slice(&l2[..l2_len]);
    let got = f.src.read(rest_off, &mut out[hl + l2_len..total]);
    if got != rest_len as usize {
        return Err(DeliverError::Drop(DropReason::Malformed));
    }
    Ok((total, l2_len + rest_len as usize))
}
