//! A VXLAN port's receive half: one `recvmmsg` batch of datagrams, each
//! checked (VNI, I flag) and turned in place into a frame with an empty
//! virtio-net header. Separate from the port because the data path takes
//! it out of the port while it forwards the frames it holds.

use super::{Count, Peers, RX_BATCH, RX_OFF};
use crate::stats::DropReason;
use crate::sys::udp::Incoming;
use crate::wire::virtio_net;
use crate::wire::vxlan::{self, VxlanPacket, VxlanRepr};
use std::net::Ipv4Addr;

/// A received datagram's inner frame, ready to forward: `len` bytes at
/// `off` in the receive buffer, a zeroed 12-byte virtio-net header first.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame {
    /// Offset in the receive buffer ([`VxlanRx::frame`] reads it).
    pub off: usize,
    /// Length, virtio-net header included.
    pub len: usize,
    /// The sending VTEP.
    pub from: Ipv4Addr,
}

/// The receive half, taken out of the port while its frames are forwarded
/// (they are read in place from its buffer).
#[derive(Debug)]
pub struct VxlanRx {
    pub(super) buf: Box<[u8]>,
    pub(super) slot: usize,
    pub(super) meta: [Incoming; RX_BATCH],
    pub(super) n: usize,
    pub(super) next: usize,
    pub(super) vni: u32,
    /// Per VTEP (same order as the port's remotes, then "other").
    pub(super) counts: Box<[Count]>,
    pub(super) peers: Peers,
}

impl VxlanRx {
    /// The next datagram of the batch: its inner frame, or why it is dropped.
    pub fn next_frame(&mut self) -> Option<Result<RxFrame, DropReason>> {
        if self.next >= self.n {
            return None;
        }
        let k = self.next;
        self.next += 1;
        let m = self.meta[k];
        let slot = &mut self.buf[k * self.slot..(k + 1) * self.slot];
        if m.truncated {
            return Some(Err(DropReason::TooBig));
        }
        let from = *m.from.ip();
        // A stranger's datagram is not looked into.
        let Some(v) = self.peers.row(from) else {
            return Some(Err(DropReason::UnknownVtep));
        };
        let d = &slot[RX_OFF..RX_OFF + m.len];
        let Ok(p) = VxlanPacket::new_checked(d) else {
            return Some(Err(DropReason::Malformed));
        };
        match VxlanRepr::parse(&p) {
            Ok(r) if r.vni == self.vni => {}
            _ => return Some(Err(DropReason::Vni)),
        }
        let inner = m.len - vxlan::HEADER_LEN;
        slot[..virtio_net::HEADER_LEN].fill(0);
        self.counts[v].packets += 1;
        self.counts[v].bytes += inner as u64;
        Some(Ok(RxFrame {
            off: k * self.slot,
            len: virtio_net::HEADER_LEN + inner,
            from,
        }))
    }

    /// The bytes of a frame [`VxlanRx::next_frame`] returned.
    pub fn frame(&self, f: &RxFrame) -> &[u8] {
        &self.buf[f.off..f.off + f.len]
    }
}
