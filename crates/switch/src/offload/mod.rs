//! Checksum and segmentation offloads between ports that negotiated
//! different things.
//!
//! A virtio-net header carries a frame's offload state: `NEEDS_CSUM` (the
//! transport checksum field holds only the pseudo-header sum; whoever
//! delivers the frame to a stack that cannot take that completes it) and
//! `gso_type`/`gso_size` (a TCP "super-frame" of up to 64 KiB that must be
//! cut into `gso_size` segments before a stack that cannot take it sees it).
//! Between two ports that both negotiated an offload the metadata crosses
//! unchanged (the cheap case, and the point of offloads); otherwise the
//! switch does the work here, in software, on a local copy of the frame.
//!
//! Pure functions over byte slices: no I/O, no allocation.

use crate::vhost_user::device::feature;
use crate::wire::checksum;
use crate::wire::virtio_net::{
    VirtioNetHdrRepr, FLAG_DATA_VALID, FLAG_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};

mod segment;
pub use segment::segment;

/// Most segments one GSO frame may be cut into (a 64 KiB frame at an MSS
/// of 64 bytes): bounds the work a hostile sender can cause with one frame.
pub const MAX_SEGMENTS: usize = 1024;

/// The offloads a port takes (as a destination) or may use (as a source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps {
    /// Partially checksummed frames (`NEEDS_CSUM`).
    pub csum: bool,
    /// TCP over IPv4 GSO frames.
    pub tso4: bool,
    /// TCP over IPv6 GSO frames.
    pub tso6: bool,
    /// GSO frames with the ECN bit.
    pub ecn: bool,
}

impl Caps {
    /// Everything (tap and AF_PACKET sockets: the kernel takes any TCP GSO frame).
    pub const ALL: Caps = Caps {
        csum: true,
        tso4: true,
        tso6: true,
        ecn: true,
    };
    /// Nothing: fully checksummed, MTU-sized frames only.
    pub const NONE: Caps = Caps {
        csum: false,
        tso4: false,
        tso6: false,
        ecn: false,
    };

    /// What a virtio-net driver with `features` accepts on its receive queue.
    pub fn guest_rx(features: u64) -> Self {
        let csum = features & feature::GUEST_CSUM != 0;
        Self {
            csum,
            // GUEST_TSO* depend on GUEST_CSUM (VIRTIO 1.2, 5.1.3.1).
            tso4: csum && features & feature::GUEST_TSO4 != 0,
            tso6: csum && features & feature::GUEST_TSO6 != 0,
            ecn: csum && features & feature::GUEST_ECN != 0,
        }
    }

    /// What a virtio-net driver with `features` may send on its transmit queue.
    pub fn guest_tx(features: u64) -> Self {
        let csum = features & feature::CSUM != 0;
        Self {
            csum,
            tso4: csum && features & feature::HOST_TSO4 != 0,
            tso6: csum && features & feature::HOST_TSO6 != 0,
            ecn: csum && features & feature::HOST_ECN != 0,
        }
    }
}

/// What delivering a frame to a destination takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// The destination takes the frame and its metadata as they are.
    Pass,
    /// The checksum must be completed first.
    Checksum,
    /// The GSO frame must be cut into segments first.
    Segment,
}

/// Why a frame's offload metadata is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// Metadata out of range, or an offload the sender did not negotiate.
    #[error("invalid offload metadata")]
    Malformed,
    /// A valid offload this switch cannot complete in software (UDP GSO,
    /// IPv6 extension headers, IP options under TSO, a segment too large).
    #[error("offload not supported in software")]
    Unsupported,
}

/// Checks a frame's offload metadata against what its sender negotiated.
/// `l3` is where the network header starts (after MACs, tags, EtherType).
pub fn check(
    h: &VirtioNetHdrRepr,
    frame_len: usize,
    l3: usize,
    sender: Caps,
) -> Result<(), Reject> {
    if h.flags & FLAG_NEEDS_CSUM != 0 {
        let start = usize::from(h.csum_start);
        if !sender.csum || start < l3 || start + usize::from(h.csum_offset) + 2 > frame_len {
            return Err(Reject::Malformed);
        }
    }
    if h.gso_type == GSO_NONE {
        return Ok(());
    }
    let allowed = match h.gso_type & !GSO_ECN {
        GSO_TCPV4 => sender.tso4,
        GSO_TCPV6 => sender.tso6,
        // UDP fragmentation and UDP segmentation are never offered.
        _ => return Err(Reject::Unsupported),
    };
    if !allowed
        || (h.gso_type & GSO_ECN != 0 && !sender.ecn)
        || h.flags & FLAG_NEEDS_CSUM == 0
        || h.gso_size == 0
    {
        return Err(Reject::Malformed);
    }
    Ok(())
}

/// What delivering a frame with header `h` to a destination taking `dest` needs.
pub fn work(h: &VirtioNetHdrRepr, dest: Caps) -> Work {
    if h.gso_type != GSO_NONE {
        let ok = match h.gso_type & !GSO_ECN {
            GSO_TCPV4 => dest.tso4,
            GSO_TCPV6 => dest.tso6,
            _ => false,
        } && (h.gso_type & GSO_ECN == 0 || dest.ecn);
        if ok {
            Work::Pass
        } else {
            Work::Segment
        }
    } else if h.flags & FLAG_NEEDS_CSUM != 0 && !dest.csum {
        Work::Checksum
    } else {
        Work::Pass
    }
}

/// The flags a destination may see: without checksum offload a driver must
/// get zero (VIRTIO 1.2, 5.1.6.4.1), so DATA_VALID is dropped.
pub fn egress_flags(flags: u8, dest: Caps) -> u8 {
    if dest.csum {
        flags
    } else {
        flags & !(FLAG_DATA_VALID | FLAG_NEEDS_CSUM)
    }
}

/// Completes the checksum of a `NEEDS_CSUM` frame in place (the field holds
/// the pseudo-header sum, which the sum from `csum_start` includes) and
/// returns the header to deliver it with. `frame` starts at the MACs.
pub fn complete_checksum(
    frame: &mut [u8],
    h: &VirtioNetHdrRepr,
) -> Result<VirtioNetHdrRepr, Reject> {
    let start = usize::from(h.csum_start);
    let at = start + usize::from(h.csum_offset);
    if at + 2 > frame.len() {
        return Err(Reject::Malformed);
    }
    let c = checksum::fold(checksum::sum(&frame[start..]));
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(VirtioNetHdrRepr {
        flags: h.flags & !FLAG_NEEDS_CSUM,
        gso_type: GSO_NONE,
        hdr_len: 0,
        gso_size: 0,
        csum_start: 0,
        csum_offset: 0,
        num_buffers: h.num_buffers,
    })
}

#[cfg(test)]
mod tests;
