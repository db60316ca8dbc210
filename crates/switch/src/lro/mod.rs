//! Software LRO: consecutive in-order TCP segments of one flow, on their
//! way to one guest, merged into a single GSO frame (up to 64 KiB) that
//! the guest's stack takes in one go: one receive buffer chain, one
//! interrupt's worth of work, one pass through its TCP stack instead of
//! forty. Only toward a driver that negotiated TSO receive (GUEST_TSO4/6
//! with GUEST_CSUM) and mergeable buffers.
//!
//! A segment extends the aggregate only if nothing about the byte stream
//! or its meaning changes by merging: same MACs and tag, same IP header
//! except identification and lengths (no fragments, no IPv6 extension
//! headers), same ports, sequence number exactly where the aggregate ends,
//! same acknowledgment number, identical options (timestamps included),
//! flags ACK alone (PSH allowed on the last segment), a payload no larger
//! than the first segment's (a shorter one, or PSH, ends the aggregate),
//! and a checksum that verifies (or that the sender left to offload).
//! Anything else (SYN, FIN, RST, URG, ECE, CWR, a gap, a retransmission,
//! another flow) is not merged; the caller delivers the aggregate first,
//! so nothing is reordered.
//!
//! Two layers: [`Lro`] holds the rules and the aggregate's headers, as
//! pure functions of bytes; [`place::InPlace`] builds the aggregate
//! straight in the receiving guest's buffers (each payload byte copied
//! once, checksummed on the way), and patches the headers there when it
//! ends.

pub mod place;
#[cfg(test)]
mod tests;

use crate::wire::checksum;
use crate::wire::tcp::flags;
use crate::wire::virtio_net::{
    VirtioNetHdrRepr, FLAG_DATA_VALID, FLAG_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};

/// Largest IP packet an aggregate may become (the IPv4 total length field,
/// and IPv6's payload length without jumbograms).
pub const MAX_IP_LEN: usize = 65535;
/// Header bytes a caller must read to let [`Segment::parse`] decide: MACs,
/// tag, IPv6, and a TCP header with 40 bytes of options.
pub const PEEK_LEN: usize = 18 + 40 + 60;

/// A TCP segment's shape, read from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the TCP header.
    pub l4: usize,
    /// Offset of the payload.
    pub hdr_end: usize,
    /// Sequence number.
    pub seq: u32,
    /// Flags.
    pub flags: u8,
    /// Payload bytes.
    pub payload: usize,
}

impl Segment {
    /// Reads a frame's headers (`hdr`: at least its first [`PEEK_LEN`]
    /// bytes, or all of it) when it is a plain TCP segment with a payload
    /// that merging could take: IPv4 without options or fragments, or IPv6
    /// without extension headers; no GSO.
    pub fn parse(hdr: &[u8], frame_len: usize, l3: usize, vhdr: &VirtioNetHdrRepr) -> Option<Self> {
        if vhdr.gso_type != GSO_NONE {
            return None;
        }
        let et = u16::from_be_bytes([*hdr.get(l3 - 2)?, *hdr.get(l3 - 1)?]);
        let (v6, l4, ip_len) = match et {
            0x0800 => {
                let ip = hdr.get(l3..l3 + 20)?;
                let frag = u16::from_be_bytes([ip[6], ip[7]]);
                if ip[0] != 0x45 || ip[9] != 6 || frag & 0x3fff != 0 {
                    return None;
                }
                (
                    false,
                    l3 + 20,
                    usize::from(u16::from_be_bytes([ip[2], ip[3]])),
                )
            }
            0x86dd => {
                let ip = hdr.get(l3..l3 + 40)?;
                if ip[0] >> 4 != 6 || ip[6] != 6 {
                    return None;
                }
                (
                    true,
                    l3 + 40,
                    40 + usize::from(u16::from_be_bytes([ip[4], ip[5]])),
                )
            }
            _ => return None,
        };
        // The IP length must describe the frame exactly (no padding, no
        // truncation): the aggregate's lengths are computed from it.
        if l3 + ip_len != frame_len {
            return None;
        }
        let t = hdr.get(l4..l4 + 20)?;
        let thl = usize::from(t[12] >> 4) * 4;
        if thl < 20 || t[12] & 0x0f != 0 || l4 + thl > hdr.len().min(frame_len) {
            return None;
        }
        Some(Self {
            v6,
            l3,
            l4,
            hdr_end: l4 + thl,
            seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
            flags: t[13],
            payload: frame_len - l4 - thl,
        })
    }

    /// Frame length.
    pub fn len(&self) -> usize {
        self.hdr_end + self.payload
    }

    /// True when the segment carries no payload (never merged).
    pub fn is_empty(&self) -> bool {
        self.payload == 0
    }

    /// True when the flags allow merging: ACK, and PSH at most.
    fn mergeable_flags(&self) -> bool {
        self.flags & !flags::PSH == flags::ACK
    }

    /// True when the segment may start an aggregate: ACK alone (a PSH
    /// segment is delivered at once: nothing will follow it) and a payload.
    pub fn can_start(&self) -> bool {
        self.flags == flags::ACK && self.payload > 0 && self.len() <= MAX_IP_LEN + 18
    }

    /// True when the segment's TCP checksum verifies: `hdr` holds its
    /// headers (at least up to the payload), `payload_sum` is the
    /// [`checksum::sum`] of its payload. The TCP header is a multiple of
    /// four bytes, so the payload's sum adds as it is.
    pub fn verifies(&self, hdr: &[u8], payload_sum: u32) -> bool {
        let Some(th) = hdr.get(self.l4..self.hdr_end) else {
            return false;
        };
        let tcp_len = self.hdr_end - self.l4 + self.payload;
        let s = checksum::add(
            self.pseudo(hdr, tcp_len),
            checksum::add(checksum::sum(th), payload_sum),
        );
        checksum::fold(s) == 0
    }

    /// The pseudo-header sum for a TCP length of `tcp_len`, from header bytes.
    fn pseudo(&self, hdr: &[u8], tcp_len: usize) -> u32 {
        let l3 = self.l3;
        if self.v6 {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&hdr[l3 + 8..l3 + 24]);
            d.copy_from_slice(&hdr[l3 + 24..l3 + 40]);
            checksum::pseudo_header_v6(&s, &d, 6, tcp_len as u32)
        } else {
            let mut s = [0u8; 4];
            let mut d = [0u8; 4];
            s.copy_from_slice(&hdr[l3 + 12..l3 + 16]);
            d.copy_from_slice(&hdr[l3 + 16..l3 + 20]);
            checksum::pseudo_header(s, d, 6, tcp_len as u16)
        }
    }
}

/// What is being aggregated.
#[derive(Debug, Clone, Copy)]
struct Flow {
    seg: Segment,
    /// Sequence number the next segment must carry.
    next_seq: u32,
    /// The first segment's payload size (the GSO size).
    mss: usize,
    /// Segments in the aggregate.
    segs: u32,
    /// A short or PSH segment was appended: nothing may follow it.
    closed: bool,
    /// PSH seen.
    psh: bool,
    /// The last segment's window.
    window: [u8; 2],
    /// The first segment's header, as it came.
    vhdr: VirtioNetHdrRepr,
}

/// One port's aggregate: its rules and its headers. Where its bytes are
/// is the caller's business ([`place::InPlace`] on the data path).
#[derive(Debug, Clone)]
pub struct Lro {
    /// The first segment's headers (MACs to the end of TCP options), as
    /// they came; patched in place by [`Lro::finish`].
    hdr: [u8; PEEK_LEN],
    /// Which of those bytes a segment must repeat to join (0xff) and which
    /// may differ (0: IP identification, lengths and checksums; sequence
    /// number, flags, window, checksum and urgent pointer).
    mask: [u8; PEEK_LEN],
    /// The aggregate's frame length so far.
    len: usize,
    flow: Option<Flow>,
}

impl Default for Lro {
    fn default() -> Self {
        Self::new()
    }
}

/// True when a segment's checksum can be trusted: the sender left it to
/// offload, or a device validated it.
pub fn trusted(vhdr: &VirtioNetHdrRepr) -> bool {
    vhdr.flags & (FLAG_NEEDS_CSUM | FLAG_DATA_VALID) != 0
}

/// The bytes of a segment's headers that must be the same in every
/// segment of an aggregate: MACs and tag; IPv4's version, header length,
/// TOS, fragment flags, TTL, protocol and addresses (IPv6's all but the
/// payload length); the TCP ports, acknowledgment number, data offset and
/// every option. Zero elsewhere.
fn header_mask(seg: &Segment) -> [u8; PEEK_LEN] {
    let mut m = [0u8; PEEK_LEN];
    m[..seg.hdr_end].fill(0xff);
    let (l3, l4) = (seg.l3, seg.l4);
    if seg.v6 {
        m[l3 + 4..l3 + 6].fill(0);
    } else {
        // Total length, identification; header checksum.
        m[l3 + 2..l3 + 6].fill(0);
        m[l3 + 10..l3 + 12].fill(0);
    }
    // Sequence number; flags (checked apart), window, checksum, urgent pointer.
    m[l4 + 4..l4 + 8].fill(0);
    m[l4 + 13..l4 + 20].fill(0);
    m
}

/// True when `x` and `y` agree on every byte `mask` selects (the three of
/// one length). Eight bytes a turn, without a call per field: this runs
/// for every segment offered.
fn same_masked(x: &[u8], y: &[u8], mask: &[u8]) -> bool {
    let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or_default());
    let mut diff = 0u64;
    let (xs, ys, ms) = (x.chunks_exact(8), y.chunks_exact(8), mask.chunks_exact(8));
    let tail = (xs.remainder(), ys.remainder(), ms.remainder());
    for ((a, b), m) in xs.zip(ys).zip(ms) {
        diff |= (word(a) ^ word(b)) & word(m);
    }
    for ((a, b), m) in tail.0.iter().zip(tail.1).zip(tail.2) {
        diff |= u64::from((a ^ b) & m);
    }
    diff == 0
}

/// How an aggregate comes out: its headers (MACs to the end of the TCP
/// header, lengths and checksums patched when it merged several segments),
/// its virtio-net header (before any tag change and `num_buffers`), its
/// frame length and the segments in it.
#[derive(Debug, Clone, Copy)]
pub struct Finished<'a> {
    /// Headers, from the MACs to the payload.
    pub hdr: &'a [u8],
    /// The virtio-net header to deliver it with.
    pub vhdr: VirtioNetHdrRepr,
    /// Frame length.
    pub len: usize,
    /// Segments merged.
    pub segs: u32,
}

impl Lro {
    /// No aggregate.
    pub fn new() -> Self {
        Self {
            hdr: [0; PEEK_LEN],
            mask: [0; PEEK_LEN],
            len: 0,
            flow: None,
        }
    }

    /// Drops the aggregate (the port went away).
    pub fn clear(&mut self) {
        self.flow = None;
        self.len = 0;
    }

    /// True while an aggregate is being built.
    pub fn active(&self) -> bool {
        self.flow.is_some()
    }

    /// Segments in the current aggregate.
    pub fn segments(&self) -> u32 {
        self.flow.map_or(0, |f| f.segs)
    }

    /// The aggregate's frame length so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no bytes are aggregated.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when segment `seg` (headers in `hdr`) may join the aggregate:
    /// nothing about the byte stream changes by merging it.
    pub fn accepts(&self, seg: &Segment, hdr: &[u8]) -> bool {
        let Some(f) = self.flow else { return false };
        if hdr.len() < seg.hdr_end {
            return false;
        }
        !f.closed
            && seg.v6 == f.seg.v6
            && seg.l3 == f.seg.l3
            && seg.hdr_end == f.seg.hdr_end
            && seg.mergeable_flags()
            && seg.payload > 0
            && seg.payload <= f.mss
            && seg.seq == f.next_seq
            && self.len + seg.payload - f.seg.l3 <= MAX_IP_LEN
            && same_masked(
                &hdr[..seg.hdr_end],
                &self.hdr[..seg.hdr_end],
                &self.mask[..seg.hdr_end],
            )
    }

    /// Starts an aggregate with segment `seg` (headers in `hdr`, offload
    /// header `vhdr`), whose bytes the caller has placed and whose checksum
    /// it has checked ([`Segment::verifies`]) unless [`trusted`]. False:
    /// the segment cannot start one ([`Segment::can_start`]); nothing is kept.
    pub fn begin(&mut self, seg: &Segment, hdr: &[u8], vhdr: &VirtioNetHdrRepr) -> bool {
        self.clear();
        if !seg.can_start() || hdr.len() < seg.hdr_end {
            return false;
        }
        self.hdr[..seg.hdr_end].copy_from_slice(&hdr[..seg.hdr_end]);
        self.mask = header_mask(seg);
        self.len = seg.len();
        self.flow = Some(Flow {
            seg: *seg,
            next_seq: seg.seq.wrapping_add(seg.payload as u32),
            mss: seg.payload,
            segs: 1,
            closed: false,
            psh: false,
            window: [hdr[seg.l4 + 14], hdr[seg.l4 + 15]],
            vhdr: *vhdr,
        });
        true
    }

    /// Adds segment `seg` (headers in `hdr`), which [`Lro::accepts`]
    /// allowed, and whose payload the caller has placed after the
    /// aggregate's bytes and checked.
    pub fn extend(&mut self, seg: &Segment, hdr: &[u8]) {
        let Some(f) = self.flow.as_mut() else { return };
        self.len += seg.payload;
        f.next_seq = f.next_seq.wrapping_add(seg.payload as u32);
        f.segs += 1;
        f.psh |= seg.flags & flags::PSH != 0;
        f.closed = seg.payload < f.mss || seg.flags & flags::PSH != 0;
        f.window = [hdr[seg.l4 + 14], hdr[seg.l4 + 15]];
    }

    /// Ends the aggregate: a single segment comes out as it went in;
    /// several come out as one TCP GSO frame with the lengths, the last
    /// window and PSH, and a partial checksum (the guest negotiated
    /// checksum offload). `None` when nothing was aggregated.
    pub fn finish(&mut self) -> Option<Finished<'_>> {
        let f = self.flow.take()?;
        let len = std::mem::take(&mut self.len);
        let s = f.seg;
        if f.segs == 1 {
            return Some(Finished {
                hdr: &self.hdr[..s.hdr_end],
                vhdr: f.vhdr,
                len,
                segs: 1,
            });
        }
        let b = &mut self.hdr[..s.hdr_end];
        if s.v6 {
            b[s.l3 + 4..s.l3 + 6].copy_from_slice(&((len - s.l3 - 40) as u16).to_be_bytes());
        } else {
            b[s.l3 + 2..s.l3 + 4].copy_from_slice(&((len - s.l3) as u16).to_be_bytes());
            b[s.l3 + 10..s.l3 + 12].fill(0);
            let c = checksum::checksum(&b[s.l3..s.l3 + 20]);
            b[s.l3 + 10..s.l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
        b[s.l4 + 13] = flags::ACK | if f.psh { flags::PSH } else { 0 };
        b[s.l4 + 14..s.l4 + 16].copy_from_slice(&f.window);
        let pseudo = s.pseudo(b, len - s.l4);
        b[s.l4 + 16..s.l4 + 18].copy_from_slice(&checksum::fold_partial(pseudo).to_be_bytes());
        Some(Finished {
            hdr: &self.hdr[..s.hdr_end],
            vhdr: VirtioNetHdrRepr {
                flags: FLAG_NEEDS_CSUM,
                gso_type: if s.v6 { GSO_TCPV6 } else { GSO_TCPV4 },
                hdr_len: s.hdr_end as u16,
                gso_size: f.mss as u16,
                csum_start: s.l4 as u16,
                csum_offset: 16,
                num_buffers: 0,
            },
            len,
            segs: f.segs,
        })
    }
}
