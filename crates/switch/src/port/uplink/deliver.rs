//! Frames to an uplink: written in place into a transmit ring slot (or
//! the buffer for frames larger than a slot), a virtio-net header first.

use super::{UplinkPort, HDR_LEN};
use crate::datapath::{DeliverError, Frame};
use crate::stats::DropReason;
use crate::vlan::Tagging;

impl UplinkPort {
    /// Queues a classified frame for the wire; its bytes (without the
    /// header) on success.
    #[inline]
    pub(crate) fn deliver_frame(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
    ) -> Result<usize, DeliverError> {
        let need = HDR_LEN + f.egress_l2(tagging).1 + f.rest().1 as usize;
        let Some(out) = self.tx_buf(need) else {
            return Err(DeliverError::Drop(DropReason::RingFull));
        };
        let (len, bytes) = crate::port::assemble(out, HDR_LEN, f, tagging)?;
        if self.tx_commit(len) {
            Ok(bytes)
        } else {
            Err(DeliverError::Drop(DropReason::RingFull))
        }
    }
}
