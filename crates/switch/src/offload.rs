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
use crate::wire::tcp::{self, TcpSegment};
use crate::wire::virtio_net::{
    VirtioNetHdrRepr, FLAG_DATA_VALID, FLAG_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};

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

/// The layer-3 facts segmentation needs.
enum Net {
    V4 { id: u16, ihl: usize },
    V6,
}

/// Cuts a TCP GSO frame into segments of `gso_size` payload bytes, each
/// built in `out` and handed to `emit` with its header. `frame` starts at
/// the MACs; `l3` is the network header's offset. With `partial` the
/// segments leave their checksums to the destination (`NEEDS_CSUM`);
/// otherwise each is fully checksummed. `emit` returns false to stop early
/// (the destination is full). Returns the segments emitted.
///
/// Per segment, as a TSO NIC does: IPv4 total length, identification
/// (+1 per segment) and header checksum; IPv6 payload length; TCP sequence
/// number (+ gso_size per segment); FIN and PSH only on the last segment,
/// CWR only on the first.
pub fn segment(
    frame: &[u8],
    h: &VirtioNetHdrRepr,
    l3: usize,
    partial: bool,
    out: &mut [u8],
    mut emit: impl FnMut(&[u8], &VirtioNetHdrRepr) -> bool,
) -> Result<usize, Reject> {
    let l4 = usize::from(h.csum_start);
    if l4 < l3 || l4 > frame.len() {
        return Err(Reject::Malformed);
    }
    // The headers are read field by field: a GSO frame's length fields
    // describe the whole super-frame (or are left 0 by some drivers), so the
    // length-checking views do not apply; the frame's own length is the truth.
    let ip = &frame[l3..l4];
    let (net, addrs) = match h.gso_type & !GSO_ECN {
        GSO_TCPV4 => {
            if ip.len() < 20 || ip[0] >> 4 != 4 {
                return Err(Reject::Malformed);
            }
            if usize::from(ip[0] & 0x0f) * 4 != ip.len() || ip[9] != 6 {
                // IP options are fine (the header is copied); anything between
                // the IP and TCP headers is not.
                return Err(Reject::Unsupported);
            }
            let mut s = [0u8; 4];
            let mut d = [0u8; 4];
            s.copy_from_slice(&ip[12..16]);
            d.copy_from_slice(&ip[16..20]);
            (
                Net::V4 {
                    id: u16::from_be_bytes([ip[4], ip[5]]),
                    ihl: ip.len(),
                },
                Addrs::V4(s, d),
            )
        }
        GSO_TCPV6 => {
            if ip.len() < 40 || ip[0] >> 4 != 6 {
                return Err(Reject::Malformed);
            }
            if ip.len() != 40 || ip[6] != 6 {
                // Extension headers are not walked.
                return Err(Reject::Unsupported);
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&ip[8..24]);
            d.copy_from_slice(&ip[24..40]);
            (Net::V6, Addrs::V6(s, d))
        }
        _ => return Err(Reject::Unsupported),
    };
    cut(frame, h, l3, l4, &net, &addrs, partial, out, &mut emit)
}

/// Source and destination addresses, for the pseudo-header.
enum Addrs {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Addrs {
    fn pseudo(&self, tcp_len: usize) -> u32 {
        match self {
            Addrs::V4(s, d) => checksum::pseudo_header(*s, *d, 6, tcp_len as u16),
            Addrs::V6(s, d) => checksum::pseudo_header_v6(s, d, 6, tcp_len as u32),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn cut(
    frame: &[u8],
    h: &VirtioNetHdrRepr,
    l3: usize,
    l4: usize,
    net: &Net,
    addrs: &Addrs,
    partial: bool,
    out: &mut [u8],
    emit: &mut dyn FnMut(&[u8], &VirtioNetHdrRepr) -> bool,
) -> Result<usize, Reject> {
    let th = TcpSegment::new_checked(&frame[l4..]).map_err(|_| Reject::Malformed)?;
    let hdr_end = l4 + th.header_len();
    let (seq0, flags0) = (th.seq(), th.flags());
    let payload = &frame[hdr_end..];
    let mss = usize::from(h.gso_size);
    if mss == 0 {
        return Err(Reject::Malformed);
    }
    let nseg = payload.len().div_ceil(mss).max(1);
    if nseg > MAX_SEGMENTS {
        return Err(Reject::Malformed);
    }
    if hdr_end + mss.min(payload.len()) > out.len() {
        return Err(Reject::Unsupported);
    }
    let mut sent = 0;
    for i in 0..nseg {
        let from = i * mss;
        let to = (from + mss).min(payload.len());
        let len = hdr_end + (to - from);
        out[..hdr_end].copy_from_slice(&frame[..hdr_end]);
        out[hdr_end..len].copy_from_slice(&payload[from..to]);
        let seg = &mut out[..len];
        match *net {
            Net::V4 { id, ihl } => {
                let ip = &mut seg[l3..l3 + ihl];
                ip[2..4].copy_from_slice(&((len - l3) as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&id.wrapping_add(i as u16).to_be_bytes());
                ip[10..12].copy_from_slice(&[0, 0]);
                let c = checksum::checksum(ip);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
            }
            Net::V6 => {
                seg[l3 + 4..l3 + 6].copy_from_slice(&((len - l3 - 40) as u16).to_be_bytes());
            }
        }
        let mut f = flags0;
        if i + 1 < nseg {
            f &= !(tcp::flags::FIN | tcp::flags::PSH);
        }
        if i > 0 {
            f &= !tcp::flags::CWR;
        }
        let tcp_len = len - l4;
        let pseudo = addrs.pseudo(tcp_len);
        let mut t = TcpSegment::new_checked(&mut seg[l4..]).map_err(|_| Reject::Malformed)?;
        t.set_seq(seq0.wrapping_add(from as u32));
        t.set_flags(f);
        let seg_hdr = if partial {
            t.set_checksum(checksum::fold_partial(pseudo));
            VirtioNetHdrRepr {
                flags: FLAG_NEEDS_CSUM,
                csum_start: l4 as u16,
                csum_offset: 16,
                ..VirtioNetHdrRepr::default()
            }
        } else {
            t.set_checksum(0);
            let c = checksum::fold(checksum::add(pseudo, checksum::sum(&seg[l4..])));
            seg[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
            VirtioNetHdrRepr::default()
        };
        sent += 1;
        if !emit(&out[..len], &seg_hdr) {
            break;
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::flags;
    use crate::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};

    fn gso_hdr(f: &TcpFrame, mss: u16) -> VirtioNetHdrRepr {
        VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: if f.v6 { GSO_TCPV6 } else { GSO_TCPV4 },
            hdr_len: (f.l4() + 20 + f.options.len()) as u16,
            gso_size: mss,
            csum_start: f.l4() as u16,
            csum_offset: 16,
            num_buffers: 0,
        }
    }

    fn cut_all(f: &TcpFrame, mss: u16, partial: bool) -> Vec<(Vec<u8>, VirtioNetHdrRepr)> {
        let frame = f.build(true);
        let mut out = vec![0u8; 16384];
        let mut segs = Vec::new();
        let n = segment(
            &frame,
            &gso_hdr(f, mss),
            f.l3(),
            partial,
            &mut out,
            |s, h| {
                segs.push((s.to_vec(), *h));
                true
            },
        )
        .unwrap();
        assert_eq!(n, segs.len());
        segs
    }

    fn check_segments(f: &TcpFrame, mss: u16) {
        let segs = cut_all(f, mss, false);
        let thl = 20 + f.options.len();
        let hdr_end = f.l4() + thl;
        assert_eq!(segs.len(), f.payload.len().div_ceil(usize::from(mss)));
        let mut joined = Vec::new();
        for (i, (s, h)) in segs.iter().enumerate() {
            assert_eq!(*h, VirtioNetHdrRepr::default(), "fully checksummed, no GSO");
            assert!(tcp_checksums_ok(s, f.l3(), f.v6), "segment {i} checksums");
            assert!(s.len() - hdr_end <= usize::from(mss));
            let t = TcpSegment::new_checked(&s[f.l4()..]).unwrap();
            assert_eq!(t.seq(), f.seq.wrapping_add((i * usize::from(mss)) as u32));
            assert_eq!(t.options(), &f.options[..]);
            let last = i + 1 == segs.len();
            assert_eq!(
                t.flags() & flags::PSH != 0,
                last && f.flags & flags::PSH != 0
            );
            assert_eq!(
                t.flags() & flags::FIN != 0,
                last && f.flags & flags::FIN != 0
            );
            assert_eq!(
                t.flags() & flags::CWR != 0,
                i == 0 && f.flags & flags::CWR != 0
            );
            if f.v6 {
                let pl = u16::from_be_bytes([s[f.l3() + 4], s[f.l3() + 5]]);
                assert_eq!(usize::from(pl), s.len() - f.l3() - 40);
            } else {
                let tl = u16::from_be_bytes([s[f.l3() + 2], s[f.l3() + 3]]);
                assert_eq!(usize::from(tl), s.len() - f.l3());
                let id = u16::from_be_bytes([s[f.l3() + 4], s[f.l3() + 5]]);
                assert_eq!(id, f.ip_id.wrapping_add(i as u16));
            }
            assert_eq!(&s[..12], &f.build(true)[..12], "MACs (and tag) kept");
            joined.extend_from_slice(&s[hdr_end..]);
        }
        assert_eq!(joined, f.payload, "the byte stream is intact");
    }

    #[test]
    fn segments_ipv4_tso_like_a_nic() {
        let f = TcpFrame {
            payload: pattern(10_000, 1),
            options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            flags: flags::ACK | flags::PSH | flags::CWR,
            ip_id: 0xfffe,
            seq: 0xffff_f000,
            ..Default::default()
        };
        check_segments(&f, 1448);
        check_segments(
            &TcpFrame {
                vlan: Some(10),
                ..f.clone()
            },
            1000,
        );
        check_segments(
            &TcpFrame {
                flags: flags::ACK | flags::FIN,
                ..f
            },
            9000,
        );
    }

    #[test]
    fn segments_ipv6_tso() {
        let f = TcpFrame {
            v6: true,
            payload: pattern(5_001, 2),
            flags: flags::ACK | flags::PSH,
            ..Default::default()
        };
        check_segments(&f, 1428);
    }

    #[test]
    fn partial_segments_complete_to_valid_checksums() {
        let f = TcpFrame {
            payload: pattern(4000, 3),
            ..Default::default()
        };
        for (mut s, h) in cut_all(&f, 1448, true) {
            assert_eq!(h.flags, FLAG_NEEDS_CSUM);
            assert_eq!((usize::from(h.csum_start), h.csum_offset), (f.l4(), 16));
            assert!(!tcp_checksums_ok(&s, f.l3(), false));
            let done = complete_checksum(&mut s, &h).unwrap();
            assert_eq!(done.flags, 0);
            assert!(tcp_checksums_ok(&s, f.l3(), false));
        }
    }

    #[test]
    fn completes_a_partial_checksum_in_place() {
        for v6 in [false, true] {
            let f = TcpFrame {
                v6,
                vlan: Some(7),
                payload: pattern(777, 4),
                ..Default::default()
            };
            let mut frame = f.build(true);
            let h = VirtioNetHdrRepr {
                flags: FLAG_NEEDS_CSUM,
                csum_start: f.l4() as u16,
                csum_offset: 16,
                ..Default::default()
            };
            complete_checksum(&mut frame, &h).unwrap();
            assert_eq!(frame, f.build(false));
        }
    }

    #[test]
    fn stops_when_the_destination_is_full() {
        let f = TcpFrame {
            payload: pattern(10_000, 5),
            ..Default::default()
        };
        let frame = f.build(true);
        let mut out = vec![0u8; 2048];
        let mut n = 0;
        let sent = segment(
            &frame,
            &gso_hdr(&f, 1000),
            f.l3(),
            false,
            &mut out,
            |_, _| {
                n += 1;
                n < 3
            },
        )
        .unwrap();
        assert_eq!((sent, n), (3, 3));
    }

    #[test]
    fn refuses_what_it_cannot_cut() {
        let f = TcpFrame {
            payload: pattern(70_000, 6),
            ..Default::default()
        };
        let frame = f.build(true);
        let mut out = vec![0u8; 256];
        let h = gso_hdr(&f, 64);
        assert_eq!(
            segment(&frame, &h, f.l3(), false, &mut out, |_, _| true),
            Err(Reject::Malformed),
            "more than MAX_SEGMENTS"
        );
        let h = gso_hdr(&f, 1448);
        assert_eq!(
            segment(&frame, &h, f.l3(), false, &mut out, |_, _| true),
            Err(Reject::Unsupported),
            "segment larger than the output buffer"
        );
        let mut bad = frame.clone();
        bad[f.l3() + 9] = 17;
        assert_eq!(
            segment(
                &bad,
                &gso_hdr(&f, 1448),
                f.l3(),
                false,
                &mut vec![0; 4096],
                |_, _| true
            ),
            Err(Reject::Unsupported),
            "not TCP"
        );
        let mut udp = gso_hdr(&f, 1448);
        udp.gso_type = crate::wire::virtio_net::GSO_UDP;
        assert_eq!(
            segment(&frame, &udp, f.l3(), false, &mut vec![0; 4096], |_, _| true),
            Err(Reject::Unsupported)
        );
    }

    #[test]
    fn checks_metadata_against_the_sender() {
        let f = TcpFrame {
            payload: pattern(3000, 7),
            ..Default::default()
        };
        let len = f.build(true).len();
        let h = gso_hdr(&f, 1448);
        assert_eq!(check(&h, len, f.l3(), Caps::ALL), Ok(()));
        assert_eq!(check(&h, len, f.l3(), Caps::NONE), Err(Reject::Malformed));
        let csum_only = Caps {
            csum: true,
            ..Caps::NONE
        };
        assert_eq!(check(&h, len, f.l3(), csum_only), Err(Reject::Malformed));
        let plain = VirtioNetHdrRepr {
            gso_type: GSO_NONE,
            gso_size: 0,
            ..h
        };
        assert_eq!(check(&plain, len, f.l3(), csum_only), Ok(()));
        let mut off = plain;
        off.csum_start = (len - 17) as u16;
        assert_eq!(check(&off, len, f.l3(), Caps::ALL), Err(Reject::Malformed));
        off.csum_start = 4;
        assert_eq!(check(&off, len, f.l3(), Caps::ALL), Err(Reject::Malformed));
        let no_csum = VirtioNetHdrRepr { flags: 0, ..h };
        assert_eq!(
            check(&no_csum, len, f.l3(), Caps::ALL),
            Err(Reject::Malformed)
        );
        let ecn = VirtioNetHdrRepr {
            gso_type: GSO_TCPV4 | GSO_ECN,
            ..h
        };
        let no_ecn = Caps {
            ecn: false,
            ..Caps::ALL
        };
        assert_eq!(check(&ecn, len, f.l3(), no_ecn), Err(Reject::Malformed));
        let udp = VirtioNetHdrRepr {
            gso_type: crate::wire::virtio_net::GSO_UDP,
            ..h
        };
        assert_eq!(
            check(&udp, len, f.l3(), Caps::ALL),
            Err(Reject::Unsupported)
        );
    }

    #[test]
    fn decides_the_work_per_destination() {
        let f = TcpFrame::default();
        let gso = gso_hdr(&f, 1448);
        let csum = VirtioNetHdrRepr {
            gso_type: GSO_NONE,
            ..gso
        };
        let plain = VirtioNetHdrRepr::default();
        let only_csum = Caps {
            csum: true,
            ..Caps::NONE
        };
        let v4 = Caps {
            tso6: false,
            ecn: false,
            ..Caps::ALL
        };
        assert_eq!(work(&gso, Caps::ALL), Work::Pass);
        assert_eq!(work(&gso, v4), Work::Pass);
        assert_eq!(work(&gso, only_csum), Work::Segment);
        let gso6 = VirtioNetHdrRepr {
            gso_type: GSO_TCPV6,
            ..gso
        };
        assert_eq!(work(&gso6, v4), Work::Segment);
        let ecn = VirtioNetHdrRepr {
            gso_type: GSO_TCPV4 | GSO_ECN,
            ..gso
        };
        assert_eq!(work(&ecn, v4), Work::Segment);
        assert_eq!(work(&csum, Caps::NONE), Work::Checksum);
        assert_eq!(work(&csum, only_csum), Work::Pass);
        assert_eq!(work(&plain, Caps::NONE), Work::Pass);
        assert_eq!(egress_flags(FLAG_DATA_VALID, Caps::NONE), 0);
        assert_eq!(egress_flags(FLAG_DATA_VALID, only_csum), FLAG_DATA_VALID);
        // Features: TSO without GUEST_CSUM means nothing.
        assert_eq!(Caps::guest_rx(feature::GUEST_TSO4), Caps::NONE);
        assert_eq!(
            Caps::guest_rx(feature::GUEST_TSO4 | feature::GUEST_CSUM),
            Caps {
                csum: true,
                tso4: true,
                ..Caps::NONE
            }
        );
        assert_eq!(
            Caps::guest_tx(feature::CSUM | feature::HOST_TSO6 | feature::HOST_ECN),
            Caps {
                csum: true,
                tso6: true,
                ecn: true,
                ..Caps::NONE
            }
        );
    }
}
