//! Software TSO: cutting a TCP GSO frame into MSS-sized segments for a
//! destination that cannot take it, as a NIC would. Separate from the
//! decisions in `mod.rs` because it is the one heavy piece of work
//! (headers rewritten and checksummed per segment), with its own header
//! parsing.

use super::{Reject, MAX_SEGMENTS};
use crate::wire::checksum;
use crate::wire::tcp::{self, TcpSegment};
use crate::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_ECN, GSO_TCPV4, GSO_TCPV6};

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
