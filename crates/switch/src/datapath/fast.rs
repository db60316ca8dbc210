//! The fast case: a plain frame from a guest to a guest on this worker.
//!
//! Plain means the frame needs none of the policies the full path
//! (`classify.rs`, `deliver.rs`) applies: no offload metadata in its
//! virtio-net header (flags and GSO type zero), untagged and leaving
//! untagged, its flow's forwarding decision remembered from the frame
//! before (same addresses, time, FDB and ports) and delivering to one
//! port (a unicast, or a flood only one port receives), a destination whose LRO
//! cannot take it (LRO off, or not a TCP segment) and with no aggregate
//! open, and a receive chain it fits. Such a frame leaves exactly as it
//! came: its header's first ten bytes carried over, its bytes copied once.
//! A cross-connected port's plain frame needs no decision: it goes to the
//! peer (`cross.rs`).
//! Anything else, or any doubt, takes the full path, which decides the
//! same way for these frames (and refreshes the remembered decision).

use super::{Datapath, Port, MAX_FRAME};
use crate::fdb::Learned;
use crate::vhost_user::chain::Seg;
use crate::vhost_user::memory::GuestMem;
use crate::vlan::Tagging;
use crate::wire::EthernetAddress;
use std::time::Instant;

/// Bytes of a frame's start the decision looks at: the virtio-net header
/// (at most 12), the Ethernet header, and an IPv4 header up to its protocol
/// (an IPv6 header's next header comes before that).
const LOOK: usize = 12 + 14 + 10;

const ETH_VLAN: u16 = 0x8100;
const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;

/// A plain frame's first bytes, read once from the guest's buffer.
pub(crate) struct Look {
    bytes: [u8; LOOK],
    /// Bytes read (the first buffer may be shorter than [`LOOK`]).
    got: usize,
    hdr_len: usize,
}

impl Look {
    /// The first bytes of a chain whose first buffer holds the virtio-net
    /// header and the Ethernet header; None otherwise (the full path reads
    /// across buffers).
    #[inline]
    fn read(mem: &GuestMem, first: Seg, hdr_len: usize) -> Option<Look> {
        let n = (first.len as usize).min(LOOK);
        if n < hdr_len + 14 {
            return None;
        }
        let mut bytes = [0u8; LOOK];
        // Copied once: the guest may write its buffer meanwhile, and only
        // the copy is looked at.
        mem.span(first.addr, n as u64)?.read_into(&mut bytes);
        Some(Look {
            bytes,
            got: n,
            hdr_len,
        })
    }

    /// No offload metadata: flags and GSO type zero.
    fn plain_header(&self) -> bool {
        self.bytes[0] == 0 && self.bytes[1] == 0
    }

    fn ethertype(&self) -> u16 {
        let h = self.hdr_len;
        u16::from_be_bytes([self.bytes[h + 12], self.bytes[h + 13]])
    }

    /// The MACs, destination then source, as they came.
    fn macs(&self) -> [u8; 12] {
        let h = self.hdr_len;
        let mut m = [0u8; 12];
        m.copy_from_slice(&self.bytes[h..h + 12]);
        m
    }

    fn src(&self) -> EthernetAddress {
        let h = self.hdr_len;
        EthernetAddress::from_bytes(&self.bytes[h + 6..h + 12])
    }

    /// Whether LRO might merge the frame: a TCP segment, or a header not
    /// read far enough to tell.
    fn maybe_tcp(&self) -> bool {
        let l3 = self.hdr_len + 14;
        match self.ethertype() {
            ETH_IPV4 => self.got <= l3 + 9 || self.bytes[l3 + 9] == IPPROTO_TCP,
            ETH_IPV6 => true,
            _ => false,
        }
    }

    /// The source's virtio-net header length.
    pub(crate) fn hdr_len(&self) -> usize {
        self.hdr_len
    }

    /// The header's first ten bytes (flags to checksum offset), carried
    /// over to the destination.
    pub(crate) fn header(&self) -> [u8; 10] {
        let mut h = [0u8; 10];
        h.copy_from_slice(&self.bytes[..10]);
        h
    }
}

impl Datapath {
    /// Forwards chain `segs` (`len` bytes, a virtio-net header of `hdr_len`
    /// first) from slot `i` on the fast case. Returns false, having done
    /// nothing, when the frame is not plain: the caller takes the full path.
    #[inline]
    pub(super) fn forward_plain(
        &mut self,
        i: usize,
        mem: &GuestMem,
        segs: &[Seg],
        len: u64,
        hdr_len: usize,
        now: Instant,
    ) -> bool {
        let Some(&first) = segs.first() else {
            return false;
        };
        let Some(look) = Look::read(mem, first, hdr_len) else {
            return false;
        };
        let frame_len = len - hdr_len as u64;
        if !look.plain_header() || look.ethertype() == ETH_VLAN || frame_len > MAX_FRAME {
            return false;
        }
        let Some(me) = self.slots[i].as_ref() else {
            return false;
        };
        let (j, learn) = match me.rt.cross {
            // Cross-connected: to its peer as it came, nothing learned.
            Some(j) => (j, false),
            None => {
                let Some(m) = me.rt.flow.as_ref() else {
                    return false;
                };
                if !m.holds_untagged(&look.macs(), now, self.fdb.generation(), self.topo_gen)
                    || me.direct_to.is_some()
                {
                    return false;
                }
                // A unicast, or a flood that reaches one port (`sole_recipient`).
                let (Ok(d), Some((j, Tagging::Untagged))) = (m.decision, m.to) else {
                    return false;
                };
                if d.learned == Learned::PortLimit || j == i {
                    return false;
                }
                (j, me.needs_mac)
            }
        };
        let Some(dst) = self.slots[j].as_mut() else {
            return false;
        };
        let lro_open = dst.rt.lro.as_ref().is_some_and(|c| c.agg.active());
        let lro_may = dst.policies.effective_lro() && look.maybe_tcp();
        let Port::VhostUser(p) = &mut dst.port else {
            return false;
        };
        if lro_open || lro_may {
            return false;
        }
        let result = match p.deliver_plain(
            mem,
            segs,
            &look,
            frame_len,
            &mut self.rx_chain,
            self.rx_hint,
        ) {
            Some(r) => r,
            None => return false,
        };
        if let Some(me) = self.slots[i].as_ref() {
            me.stats.tx.frame(frame_len as usize);
        }
        self.perf.fast_frame();
        self.delivered(j, result, now);
        if learn {
            self.learn_mac(i, look.src());
        }
        true
    }
}
