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
//! so nothing is reordered. The caller also ends the aggregate at the end
//! of every polling round, which bounds the time a segment waits to one round.
//!
//! The state and the header rules are here, as pure functions of bytes;
//! the data path copies the bytes in and delivers what comes out.

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

    /// True when the flags allow merging: ACK, and PSH at most.
    fn mergeable_flags(&self) -> bool {
        self.flags & !flags::PSH == flags::ACK
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

/// One port's aggregate.
pub struct Lro {
    buf: Box<[u8]>,
    len: usize,
    flow: Option<Flow>,
}

impl std::fmt::Debug for Lro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lro")
            .field("len", &self.len)
            .field("flow", &self.flow)
            .finish()
    }
}

impl Default for Lro {
    fn default() -> Self {
        Self::new()
    }
}

/// True when a segment's checksum can be trusted: the sender left it to
/// offload, or a device validated it.
fn trusted(vhdr: &VirtioNetHdrRepr) -> bool {
    vhdr.flags & (FLAG_NEEDS_CSUM | FLAG_DATA_VALID) != 0
}

impl Lro {
    /// An empty aggregate with room for a 64 KiB IP packet and its L2 header.
    pub fn new() -> Self {
        Self {
            buf: vec![0u8; MAX_IP_LEN + 18].into_boxed_slice(),
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

    /// Tries to append segment `seg` (headers in `hdr`, offload header
    /// `vhdr`); `fill` copies its payload into the slice it is given and
    /// returns the bytes copied. False: not merged (the caller ends the
    /// aggregate and delivers the segment on its own).
    pub fn append(
        &mut self,
        seg: &Segment,
        hdr: &[u8],
        vhdr: &VirtioNetHdrRepr,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        let Some(f) = self.flow else { return false };
        let a = &self.buf[..f.seg.hdr_end];
        let same = !f.closed
            && seg.v6 == f.seg.v6
            && seg.l3 == f.seg.l3
            && seg.hdr_end == f.seg.hdr_end
            && seg.mergeable_flags()
            && seg.payload > 0
            && seg.payload <= f.mss
            && seg.seq == f.next_seq
            && self.len + seg.payload - f.seg.l3 <= MAX_IP_LEN
            // MACs and tag.
            && hdr[..seg.l3] == a[..seg.l3]
            // Ports, acknowledgment, data offset, and every option.
            && hdr[seg.l4..seg.l4 + 4] == a[seg.l4..seg.l4 + 4]
            && hdr[seg.l4 + 8..seg.l4 + 13] == a[seg.l4 + 8..seg.l4 + 13]
            && hdr[seg.l4 + 20..seg.hdr_end] == a[seg.l4 + 20..seg.hdr_end]
            && if seg.v6 {
                // Version, class, flow label, next header, hop limit, addresses.
                hdr[seg.l3..seg.l3 + 4] == a[seg.l3..seg.l3 + 4]
                    && hdr[seg.l3 + 6..seg.l3 + 40] == a[seg.l3 + 6..seg.l3 + 40]
            } else {
                // Version, length, TOS; flags; TTL, protocol; addresses.
                hdr[seg.l3..seg.l3 + 2] == a[seg.l3..seg.l3 + 2]
                    && hdr[seg.l3 + 6..seg.l3 + 10] == a[seg.l3 + 6..seg.l3 + 10]
                    && hdr[seg.l3 + 12..seg.l3 + 20] == a[seg.l3 + 12..seg.l3 + 20]
            };
        if !same {
            return false;
        }
        let at = self.len;
        let dst = &mut self.buf[at..at + seg.payload];
        if fill(dst) != seg.payload {
            return false;
        }
        if !trusted(vhdr) {
            // The segment's own checksum: its header, then the payload just copied.
            let tcp_len = seg.hdr_end - seg.l4 + seg.payload;
            let s = checksum::add(
                seg.pseudo(hdr, tcp_len),
                checksum::add(
                    checksum::sum(&hdr[seg.l4..seg.hdr_end]),
                    checksum::sum(&self.buf[at..at + seg.payload]),
                ),
            );
            if checksum::fold(s) != 0 {
                return false;
            }
        }
        self.len += seg.payload;
        let f = self.flow.as_mut().expect("active");
        f.next_seq = f.next_seq.wrapping_add(seg.payload as u32);
        f.segs += 1;
        f.psh |= seg.flags & flags::PSH != 0;
        f.closed = seg.payload < f.mss || seg.flags & flags::PSH != 0;
        f.window = [hdr[seg.l4 + 14], hdr[seg.l4 + 15]];
        true
    }

    /// Starts an aggregate with a whole frame of `frame_len` bytes (`fill`
    /// copies them). False: the segment cannot start one (flags, no
    /// payload, a bad checksum); nothing is kept.
    pub fn start(
        &mut self,
        seg: &Segment,
        vhdr: &VirtioNetHdrRepr,
        frame_len: usize,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> bool {
        self.flow = None;
        self.len = 0;
        // A PSH segment is delivered at once: nothing will follow it.
        if seg.flags != flags::ACK || seg.payload == 0 || frame_len > self.buf.len() {
            return false;
        }
        if fill(&mut self.buf[..frame_len]) != frame_len {
            return false;
        }
        let b = &self.buf[..frame_len];
        if !trusted(vhdr) {
            let s = checksum::add(
                seg.pseudo(b, frame_len - seg.l4),
                checksum::sum(&b[seg.l4..frame_len]),
            );
            if checksum::fold(s) != 0 {
                return false;
            }
        }
        self.len = frame_len;
        self.flow = Some(Flow {
            seg: *seg,
            next_seq: seg.seq.wrapping_add(seg.payload as u32),
            mss: seg.payload,
            segs: 1,
            closed: false,
            psh: false,
            window: [b[seg.l4 + 14], b[seg.l4 + 15]],
            vhdr: *vhdr,
        });
        true
    }

    /// Ends the aggregate: a single segment comes out as it went in; several
    /// come out as one TCP GSO frame with the lengths, the last window and
    /// PSH, and a partial checksum (the guest negotiated checksum offload),
    /// with its virtio-net header. Returns the frame (in this aggregate's
    /// buffer) and header, or `None` when nothing was aggregated.
    pub fn finish(&mut self) -> Option<(&[u8], VirtioNetHdrRepr, u32)> {
        let f = self.flow.take()?;
        let len = std::mem::take(&mut self.len);
        if f.segs == 1 {
            return Some((&self.buf[..len], f.vhdr, 1));
        }
        let s = f.seg;
        let b = &mut self.buf[..len];
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
        let vhdr = VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: if s.v6 { GSO_TCPV6 } else { GSO_TCPV4 },
            hdr_len: s.hdr_end as u16,
            gso_size: f.mss as u16,
            csum_start: s.l4 as u16,
            csum_offset: 16,
            num_buffers: 0,
        };
        Some((&self.buf[..len], vhdr, f.segs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload;
    use crate::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};

    const MSS: usize = 1000;

    /// Offers a built frame the way the data path does; true when merged.
    fn offer(lro: &mut Lro, frame: &[u8], vhdr: &VirtioNetHdrRepr, l3: usize) -> bool {
        let Some(seg) = Segment::parse(frame, frame.len(), l3, vhdr) else {
            return false;
        };
        let fill_payload = |d: &mut [u8]| {
            d.copy_from_slice(&frame[seg.hdr_end..]);
            d.len()
        };
        if lro.active() && lro.append(&seg, frame, vhdr, fill_payload) {
            return true;
        }
        false
    }

    /// Feeds segments; each not merged ends the aggregate (collected) and
    /// may start a new one; returns every frame delivered, in order.
    fn feed(
        frames: &[(Vec<u8>, VirtioNetHdrRepr)],
        l3: usize,
    ) -> Vec<(Vec<u8>, VirtioNetHdrRepr, u32)> {
        let mut lro = Lro::new();
        let mut out = Vec::new();
        for (f, h) in frames {
            if offer(&mut lro, f, h, l3) {
                continue;
            }
            if let Some((b, vh, n)) = lro.finish() {
                out.push((b.to_vec(), vh, n));
            }
            let started = Segment::parse(f, f.len(), l3, h).is_some_and(|seg| {
                lro.start(&seg, h, f.len(), |d| {
                    d.copy_from_slice(f);
                    d.len()
                })
            });
            if !started {
                out.push((f.clone(), *h, 1));
            }
        }
        if let Some((b, vh, n)) = lro.finish() {
            out.push((b.to_vec(), vh, n));
        }
        out
    }

    fn stream(base: &TcpFrame, n: usize, mss: usize) -> Vec<TcpFrame> {
        let data = pattern(n * mss, 7);
        (0..n)
            .map(|i| TcpFrame {
                seq: base.seq.wrapping_add((i * mss) as u32),
                ip_id: base.ip_id.wrapping_add(i as u16),
                payload: data[i * mss..(i + 1) * mss].to_vec(),
                ..base.clone()
            })
            .collect()
    }

    fn plain(f: &TcpFrame) -> (Vec<u8>, VirtioNetHdrRepr) {
        (f.build(false), VirtioNetHdrRepr::default())
    }

    /// The payload a receiver reassembles from what came out (GSO frames
    /// cut again as a stack would), and checks each piece.
    fn received(out: &[(Vec<u8>, VirtioNetHdrRepr, u32)], l3: usize, v6: bool) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (f, h, _) in out {
            if h.gso_type != GSO_NONE {
                let mut seg = vec![0u8; 70_000];
                offload::segment(f, h, l3, false, &mut seg, |s, _| {
                    assert!(tcp_checksums_ok(s, l3, v6));
                    let hl = Segment::parse(s, s.len(), l3, &VirtioNetHdrRepr::default())
                        .unwrap()
                        .hdr_end;
                    bytes.extend_from_slice(&s[hl..]);
                    true
                })
                .unwrap();
            } else {
                assert!(tcp_checksums_ok(f, l3, v6));
                let hl = Segment::parse(f, f.len(), l3, h).unwrap().hdr_end;
                bytes.extend_from_slice(&f[hl..]);
            }
        }
        bytes
    }

    #[test]
    fn merges_an_in_order_stream_into_64k_frames() {
        for v6 in [false, true] {
            let base = TcpFrame {
                v6,
                options: vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8],
                ..Default::default()
            };
            let segs = stream(&base, 100, MSS);
            let frames: Vec<_> = segs.iter().map(plain).collect();
            let l3 = base.l3();
            let out = feed(&frames, l3);
            // 100 segments of 1000 bytes: at most 65535 bytes of IP packet each.
            let per = (MAX_IP_LEN - (base.l4() - l3) - 32) / MSS;
            assert_eq!(out.len(), 100usize.div_ceil(per), "v6={v6}");
            assert_eq!(out[0].2 as usize, per);
            let h = out[0].1;
            assert_eq!(h.gso_type, if v6 { GSO_TCPV6 } else { GSO_TCPV4 });
            assert_eq!((usize::from(h.gso_size), h.flags), (MSS, FLAG_NEEDS_CSUM));
            assert_eq!(usize::from(h.csum_start), base.l4());
            let all: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
            assert_eq!(received(&out, l3, v6), all, "byte stream intact");
        }
    }

    #[test]
    fn out_of_order_and_retransmitted_segments_are_not_merged() {
        let base = TcpFrame::default();
        let s = stream(&base, 6, MSS);
        let l3 = base.l3();
        // 0 1 3 2 2(retransmit) 4 5
        let order = [0, 1, 3, 2, 2, 4, 5];
        let frames: Vec<_> = order.iter().map(|&i| plain(&s[i])).collect();
        let out = feed(&frames, l3);
        let counts: Vec<u32> = out.iter().map(|o| o.2).collect();
        assert_eq!(counts, vec![2, 1, 1, 1, 2], "nothing merged across a gap");
        // What came out is what went in, in the same order.
        let seqs: Vec<u32> = out
            .iter()
            .map(|(f, _, _)| u32::from_be_bytes(f[l3 + 24..l3 + 28].try_into().unwrap()))
            .collect();
        assert_eq!(seqs, vec![s[0].seq, s[3].seq, s[2].seq, s[2].seq, s[4].seq]);
    }

    #[test]
    fn flags_end_or_prevent_an_aggregate() {
        let base = TcpFrame::default();
        let l3 = base.l3();
        for (flag, merged) in [
            (flags::ACK | flags::PSH, true),
            (flags::ACK | flags::FIN, false),
            (flags::SYN | flags::ACK, false),
            (flags::RST | flags::ACK, false),
            (flags::ACK | flags::URG, false),
            (flags::ACK | flags::ECE, false),
            (flags::ACK | flags::CWR, false),
        ] {
            let mut s = stream(&base, 4, MSS);
            s[1].flags = flag;
            let out = feed(&s.iter().map(plain).collect::<Vec<_>>(), l3);
            let counts: Vec<u32> = out.iter().map(|o| o.2).collect();
            if merged {
                // PSH is taken as the aggregate's last segment.
                assert_eq!(counts, vec![2, 2], "flag {flag:#x}");
                let f = &out[0].0;
                assert_eq!(f[base.l4() + 13], flags::ACK | flags::PSH);
            } else {
                assert_eq!(counts, vec![1, 1, 2], "flag {flag:#x}");
            }
        }
    }

    #[test]
    fn options_acks_flows_and_short_segments_end_an_aggregate() {
        let base = TcpFrame {
            options: vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8],
            ..Default::default()
        };
        let l3 = base.l3();
        let variants: [fn(&mut TcpFrame); 5] = [
            |f| f.options[7] = 10,            // a new timestamp
            |f| f.ack += 1,                   // a new acknowledgment
            |f| f.ports.0 += 1,               // another flow
            |f| f.vlan = Some(3),             // another L2 header
            |f| f.options = vec![1, 1, 1, 1], // another header length
        ];
        for (k, change) in variants.iter().enumerate() {
            let mut s = stream(&base, 3, MSS);
            change(&mut s[2]);
            let out = feed(&s.iter().map(plain).collect::<Vec<_>>(), l3);
            let counts: Vec<u32> = out.iter().map(|o| o.2).collect();
            assert_eq!(counts, vec![2, 1], "variant {k}");
        }
        // A short segment is merged but nothing follows it.
        let mut s = stream(&base, 4, MSS);
        s[1].payload.truncate(500);
        s[2].seq = s[1].seq + 500;
        s[3].seq = s[2].seq + 1000;
        let out = feed(&s.iter().map(plain).collect::<Vec<_>>(), l3);
        let counts: Vec<u32> = out.iter().map(|o| o.2).collect();
        assert_eq!(counts, vec![2, 2]);
        // A window update rides on the aggregate: the last one wins.
        let mut s = stream(&base, 3, MSS);
        s[2].window = 999;
        let out = feed(&s.iter().map(plain).collect::<Vec<_>>(), l3);
        assert_eq!(out.len(), 1);
        assert_eq!(
            &out[0].0[base.l4() + 14..base.l4() + 16],
            &999u16.to_be_bytes()
        );
    }

    #[test]
    fn a_bad_checksum_is_never_merged_and_trusted_ones_are_not_checked() {
        let base = TcpFrame::default();
        let l3 = base.l3();
        let s = stream(&base, 3, MSS);
        let mut frames: Vec<_> = s.iter().map(plain).collect();
        let last = frames[1].0.len() - 1;
        frames[1].0[last] ^= 0xff;
        let out = feed(&frames, l3);
        let counts: Vec<u32> = out.iter().map(|o| o.2).collect();
        assert_eq!(
            counts,
            vec![1, 1, 1],
            "the corrupt segment is delivered alone"
        );
        assert_eq!(out[1].0, frames[1].0, "as it came (the guest drops it)");
        // Segments whose checksum the sender left to offload merge without a check.
        let partial: Vec<_> = s
            .iter()
            .map(|f| {
                (
                    f.build(true),
                    VirtioNetHdrRepr {
                        flags: FLAG_NEEDS_CSUM,
                        csum_start: base.l4() as u16,
                        csum_offset: 16,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let out = feed(&partial, l3);
        assert_eq!(out.len(), 1);
        assert_eq!(received(&out, l3, false), pattern(3 * MSS, 7));
    }

    #[test]
    fn padding_fragments_and_gso_frames_are_not_candidates() {
        let base = TcpFrame {
            payload: pattern(10, 1),
            ..Default::default()
        };
        let l3 = base.l3();
        let mut f = base.build(false);
        f.extend_from_slice(&[0; 6]);
        let h = VirtioNetHdrRepr::default();
        assert!(Segment::parse(&f, f.len(), l3, &h).is_none(), "padded");
        let mut frag = base.build(false);
        frag[l3 + 6] |= 0x20;
        assert!(
            Segment::parse(&frag, frag.len(), l3, &h).is_none(),
            "fragment"
        );
        let g = VirtioNetHdrRepr {
            gso_type: GSO_TCPV4,
            ..h
        };
        let ok = base.build(false);
        assert!(
            Segment::parse(&ok, ok.len(), l3, &g).is_none(),
            "already GSO"
        );
        assert!(Segment::parse(&ok, ok.len(), l3, &h).is_some());
    }
}
