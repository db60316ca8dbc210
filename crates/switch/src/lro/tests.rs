//! LRO's rules and its in-place building, against a real split queue in
//! memfd-backed guest memory with a driver posting receive buffers (the
//! endpoint's ring): what the guest reaps is checked as its stack would
//! (GSO frames cut again, every piece's checksums, the byte stream).

use super::place::{Delivered, InPlace, MAX_CHAINS};
use super::*;
use crate::endpoint::ring::{DriverRing, RingLayout};
use crate::offload;
use crate::vhost_user::buffers::{self, Src};
use crate::vhost_user::chain::{Chain, Seg};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::protocol::MemoryRegion;
use crate::vhost_user::queue::{ActiveQueue, RingAddrs};
use crate::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};
use crate::wire::virtio_net::{VirtioNetHdr, HEADER_LEN};
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress};

const MSS: usize = 1000;

/// A guest's receive queue: the driver (posting buffers, reaping frames)
/// and the device side the aggregate is built on.
struct Guest {
    mem: Arc<GuestMem>,
    ring: DriverRing,
    q: ActiveQueue,
    chain: Chain,
    /// Each posted chain's buffers (address, length), by head.
    posted: Vec<Vec<(u64, u32)>>,
}

impl Guest {
    /// A queue of `size` entries with `chains` chains posted, chain `k`
    /// made of `shape(k).0` buffers of `buf` bytes, the last holding `shape(k).1`.
    fn new(size: u16, buf: u32, chains: usize, shape: impl Fn(usize) -> (usize, u32)) -> Self {
        let layout = RingLayout::at(0, size, buf);
        let bytes = layout.end().div_ceil(4096) * 4096;
        let f = crate::sys::memfd::create("lro-test", bytes).unwrap();
        let r = MemoryRegion {
            guest_phys_addr: 0,
            memory_size: bytes,
            userspace_addr: 0,
            mmap_offset: 0,
        };
        let mem = Arc::new(
            GuestMem::from_table(vec![(r, f)], crate::vhost_user::memory::DEFAULT_MAX_MEMORY)
                .unwrap(),
        );
        let mut ring = DriverRing::new(mem.mem(), layout, false);
        let mut posted = vec![Vec::new(); usize::from(size)];
        for k in 0..chains {
            let (n, last) = shape(k);
            assert!(last <= buf);
            let ids: Vec<u16> = (0..n).map(|_| ring.take().unwrap()).collect();
            ring.publish_chain(mem.mem(), &ids, last, true);
            let mut lens = vec![buf; n];
            lens[n - 1] = last;
            posted[usize::from(ids[0])] = ids
                .iter()
                .zip(&lens)
                .map(|(&id, &l)| (layout.buffer(id).0, l))
                .collect();
        }
        let q = ActiveQueue::start(
            mem.clone(),
            size,
            RingAddrs {
                desc: GuestAddress(layout.desc),
                avail: GuestAddress(layout.avail),
                used: GuestAddress(layout.used),
            },
            0,
            false,
            None,
            true,
        )
        .unwrap();
        Self {
            mem,
            ring,
            q,
            chain: Chain::new(),
            posted,
        }
    }

    /// Uniform single-buffer chains.
    fn simple(chains: usize, buf: u32) -> Self {
        Self::new(256, buf, chains, |_| (1, buf))
    }

    /// Chains not yet taken by the device.
    fn available(&mut self) -> usize {
        let mut n = 0;
        while self.q.take(&mut self.chain, 32).unwrap() {
            n += 1;
        }
        self.q.untake(n);
        n
    }

    /// Delivers a frame as the data path does without LRO (one copy into
    /// popped chains); false when the ring has no room.
    fn deliver(&mut self, vhdr: &VirtioNetHdrRepr, frame: &[u8]) -> bool {
        let total = (HEADER_LEN + frame.len()) as u64;
        let mut segs: Vec<Seg> = Vec::new();
        let mut heads = Vec::new();
        let mut cap = 0;
        while cap < total {
            if !self.q.take(&mut self.chain, 1).unwrap() {
                self.q.untake(heads.len());
                return false;
            }
            segs.extend_from_slice(self.chain.segs());
            heads.push((self.chain.head, self.chain.len()));
            cap += self.chain.len();
        }
        let mut h = *vhdr;
        h.num_buffers = heads.len() as u16;
        let mut hb = [0u8; HEADER_LEN];
        h.emit(&mut hb, HEADER_LEN).unwrap();
        let mut bytes = hb.to_vec();
        bytes.extend_from_slice(frame);
        assert_eq!(
            buffers::write(self.mem.mem(), &segs, 0, &bytes),
            bytes.len()
        );
        let mut left = total;
        for (head, cap) in heads {
            let n = left.min(cap);
            left -= n;
            self.q.add_used(head, n as u32).unwrap();
        }
        true
    }

    /// What the driver reaps: each frame's header and bytes.
    fn received(&mut self) -> Vec<(VirtioNetHdrRepr, Vec<u8>)> {
        self.q.flush();
        let mut out = Vec::new();
        while let Some((id, len)) = self.ring.reap(self.mem.mem()) {
            let mut data = self.chain_bytes(id, len);
            let h = VirtioNetHdr::new_checked(&data[..HEADER_LEN], HEADER_LEN)
                .and_then(|v| VirtioNetHdrRepr::parse(&v))
                .unwrap();
            for _ in 1..h.num_buffers {
                let (id, len) = self.ring.reap(self.mem.mem()).expect("num_buffers chains");
                data.extend(self.chain_bytes(id, len));
            }
            out.push((h, data[HEADER_LEN..].to_vec()));
        }
        out
    }

    fn chain_bytes(&mut self, id: u16, mut len: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for &(addr, l) in &self.posted[usize::from(id)] {
            let n = len.min(l);
            let mut b = vec![0u8; n as usize];
            self.mem
                .mem()
                .read_slice(&mut b, GuestAddress(addr))
                .unwrap();
            v.extend(b);
            len -= n;
        }
        assert_eq!(len, 0, "used length within the chain");
        v
    }
}

/// The data path's use of [`InPlace`]: each frame joins the aggregate or
/// ends it (and maybe starts the next); a frame neither takes is delivered
/// as it came. Returns the aggregates delivered (`None` for frames
/// delivered alone, or dropped for want of buffers).
fn feed(
    g: &mut Guest,
    agg: &mut InPlace,
    frames: &[(Vec<u8>, VirtioNetHdrRepr)],
    l3: usize,
) -> Vec<Option<Delivered>> {
    feed_tagged(g, agg, frames, l3, None)
}

fn feed_tagged(
    g: &mut Guest,
    agg: &mut InPlace,
    frames: &[(Vec<u8>, VirtioNetHdrRepr)],
    l3: usize,
    out_tag: Option<u16>,
) -> Vec<Option<Delivered>> {
    let mut out = Vec::new();
    for (f, h) in frames {
        let seg = Segment::parse(f, f.len(), l3, h);
        let src = Src::Local(f);
        if let Some(seg) = &seg {
            if agg.active()
                && agg
                    .append(&mut g.q, &mut g.chain, seg, f, h, &src, 0, 8)
                    .unwrap()
            {
                continue;
            }
        }
        if agg.active() {
            out.push(agg.finish(&mut g.q).unwrap());
        }
        let src_tag = l3 - 14;
        // The frame keeps its tag, or leaves with `out_tag` instead.
        let mut l2 = f[..12 + src_tag].to_vec();
        if let Some(v) = out_tag {
            l2.truncate(12);
            l2.extend_from_slice(&[0x81, 0, (v >> 8) as u8, v as u8]);
        }
        let started = seg.is_some_and(|seg| {
            agg.start(
                &mut g.q,
                &mut g.chain,
                &seg,
                f,
                h,
                &src,
                0,
                &l2,
                src_tag,
                HEADER_LEN,
                8,
            )
            .unwrap()
        });
        if !started {
            // Delivered alone with the egress L2 header.
            let mut o = l2.clone();
            o.extend_from_slice(&f[12 + src_tag..]);
            g.deliver(h, &o);
            out.push(None);
        }
    }
    if agg.active() {
        out.push(agg.finish(&mut g.q).unwrap());
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

fn partial(f: &TcpFrame) -> (Vec<u8>, VirtioNetHdrRepr) {
    (
        f.build(true),
        VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            csum_start: f.l4() as u16,
            csum_offset: 16,
            ..Default::default()
        },
    )
}

/// The payload a receiver reassembles from what it reaped (GSO frames
/// cut again as a stack would), checking every piece's checksums.
fn reassemble(got: &[(VirtioNetHdrRepr, Vec<u8>)], l3: usize, v6: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut take = |s: &[u8]| {
        assert!(
            tcp_checksums_ok(s, l3, v6),
            "checksums of a delivered segment"
        );
        let hl = Segment::parse(s, s.len(), l3, &VirtioNetHdrRepr::default())
            .unwrap()
            .hdr_end;
        bytes.extend_from_slice(&s[hl..]);
    };
    for (h, f) in got {
        if h.gso_type != GSO_NONE {
            assert_eq!(h.flags, FLAG_NEEDS_CSUM);
            let mut seg = vec![0u8; 70_000];
            offload::segment(f, h, l3, false, &mut seg, |s, _| {
                take(s);
                true
            })
            .unwrap();
        } else if h.flags & FLAG_NEEDS_CSUM != 0 {
            let mut c = f.clone();
            offload::complete_checksum(&mut c, h).unwrap();
            take(&c);
        } else {
            take(f);
        }
    }
    bytes
}

fn counts(out: &[Option<Delivered>]) -> Vec<u32> {
    out.iter().map(|d| d.map_or(1, |d| d.segs)).collect()
}

#[test]
fn merges_an_in_order_stream_into_64k_frames_in_the_guests_buffers() {
    for v6 in [false, true] {
        let base = TcpFrame {
            v6,
            options: vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8],
            ..Default::default()
        };
        let segs = stream(&base, 100, MSS);
        let frames: Vec<_> = segs.iter().map(plain).collect();
        let l3 = base.l3();
        let mut g = Guest::simple(200, 2048);
        let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
        // 100 segments of 1000 bytes: at most 65535 bytes of IP packet each.
        let per = (MAX_IP_LEN - (base.l4() - l3) - 32) / MSS;
        assert_eq!(out.len(), 100usize.div_ceil(per), "v6={v6}");
        assert_eq!(out[0].unwrap().segs as usize, per);
        let got = g.received();
        assert_eq!(got.len(), out.len());
        let (h, f) = &got[0];
        assert_eq!(h.gso_type, if v6 { GSO_TCPV6 } else { GSO_TCPV4 });
        assert_eq!((usize::from(h.gso_size), h.flags), (MSS, FLAG_NEEDS_CSUM));
        assert_eq!(usize::from(h.csum_start), base.l4());
        assert_eq!(usize::from(h.hdr_len), base.l4() + 32);
        assert_eq!(f.len(), out[0].unwrap().len);
        // 2 KiB buffers: the frame spans as many chains as its bytes need.
        assert_eq!(
            usize::from(h.num_buffers),
            (HEADER_LEN + f.len()).div_ceil(2048)
        );
        let all: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(reassemble(&got, l3, v6), all, "byte stream intact");
        assert_eq!(
            g.available(),
            200 - got
                .iter()
                .map(|(h, _)| usize::from(h.num_buffers))
                .sum::<usize>()
        );
    }
}

#[test]
fn segments_straddle_odd_buffers_and_chains() {
    // Buffers of odd sizes (so payloads start at odd offsets in them), some
    // chains of three descriptors, and buffers smaller than the headers.
    let base = TcpFrame {
        options: vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8],
        ..Default::default()
    };
    let l3 = base.l3();
    type Shape = fn(usize) -> (usize, u32);
    let shapes: [(u32, usize, Shape); 3] = [
        (1001, 1000, |k| (1, [777, 1001, 333][k % 3])),
        (513, 330, |k| (3, [7, 513][k % 2])),
        // Smaller than the headers, and too small for a whole segment in
        // 64 chains: aggregates end at the limit of chains per frame.
        (61, 1000, |k| (1, [37, 61][k % 2])),
    ];
    for (buf, chains, shape) in shapes {
        let segs = stream(&base, 30, MSS);
        let frames: Vec<_> = segs.iter().map(plain).collect();
        let mut g = Guest::new(1024, buf, chains, shape);
        let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
        let got = g.received();
        assert_eq!(got.len(), out.len());
        let all: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(reassemble(&got, l3, false), all);
        assert!(got
            .iter()
            .all(|(h, _)| usize::from(h.num_buffers) <= MAX_CHAINS));
    }
}

#[test]
fn a_short_ring_ends_the_aggregate_and_leaks_no_chain() {
    let base = TcpFrame::default();
    let l3 = base.l3();
    // Room for about 10 segments: the aggregate ends where the ring does.
    let mut g = Guest::simple(6, 2048);
    let segs = stream(&base, 20, MSS);
    let frames: Vec<_> = segs.iter().map(plain).collect();
    let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
    let got = g.received();
    assert_eq!(got.len(), 1, "the rest found no buffers");
    let n = out[0].unwrap().segs as usize;
    assert!((10..=12).contains(&n), "{n} segments in 6 x 2 KiB");
    assert_eq!(usize::from(got[0].0.num_buffers), 6);
    let all: Vec<u8> = segs[..n].iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(reassemble(&got, l3, false), all);
    assert_eq!(g.available(), 0);

    // A segment that needs a new chain, then fails its checksum: the chain
    // popped for it goes back.
    let mut g = Guest::simple(4, 1100);
    let mut frames: Vec<_> = stream(&base, 3, MSS).iter().map(plain).collect();
    let last = frames[2].0.len() - 1;
    frames[2].0[last] ^= 1;
    let mut agg = InPlace::new();
    for (f, h) in &frames[..2] {
        let seg = Segment::parse(f, f.len(), l3, h).unwrap();
        let src = Src::Local(f);
        if !agg.active() {
            assert!(agg
                .start(
                    &mut g.q,
                    &mut g.chain,
                    &seg,
                    f,
                    h,
                    &src,
                    0,
                    &f[..12],
                    0,
                    HEADER_LEN,
                    8
                )
                .unwrap());
        } else {
            assert!(agg
                .append(&mut g.q, &mut g.chain, &seg, f, h, &src, 0, 8)
                .unwrap());
        }
    }
    let (f, h) = &frames[2];
    let seg = Segment::parse(f, f.len(), l3, h).unwrap();
    assert!(!agg
        .append(&mut g.q, &mut g.chain, &seg, f, h, &Src::Local(f), 0, 8)
        .unwrap());
    assert_eq!(
        agg.chains(),
        3,
        "a chain was popped for the corrupt segment"
    );
    let d = agg.finish(&mut g.q).unwrap().unwrap();
    assert_eq!(d.segs, 2);
    assert_eq!(
        g.available(),
        2,
        "two chains used, the others back in the ring"
    );
}

#[test]
fn out_of_order_and_retransmitted_segments_are_not_merged() {
    let base = TcpFrame::default();
    let s = stream(&base, 6, MSS);
    let l3 = base.l3();
    // 0 1 3 2 2(retransmit) 4 5
    let order = [0, 1, 3, 2, 2, 4, 5];
    let frames: Vec<_> = order.iter().map(|&i| plain(&s[i])).collect();
    let mut g = Guest::simple(32, 2048);
    let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
    assert_eq!(
        counts(&out),
        vec![2, 1, 1, 1, 2],
        "nothing merged across a gap"
    );
    // What came out is what went in, in the same order.
    let seqs: Vec<u32> = g
        .received()
        .iter()
        .map(|(_, f)| u32::from_be_bytes(f[l3 + 24..l3 + 28].try_into().unwrap()))
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
        let mut g = Guest::simple(32, 2048);
        let frames: Vec<_> = s.iter().map(plain).collect();
        let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
        let got = g.received();
        if merged {
            // PSH is taken as the aggregate's last segment.
            assert_eq!(counts(&out), vec![2, 2], "flag {flag:#x}");
            assert_eq!(got[0].1[base.l4() + 13], flags::ACK | flags::PSH);
        } else {
            assert_eq!(counts(&out), vec![1, 1, 2], "flag {flag:#x}");
            assert_eq!(got[1].1, frames[1].0, "delivered as it came");
        }
        assert_eq!(reassemble(&got, l3, false).len(), 4 * MSS);
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
        let mut g = Guest::simple(32, 2048);
        let out = feed(
            &mut g,
            &mut InPlace::new(),
            &s.iter().map(plain).collect::<Vec<_>>(),
            l3,
        );
        assert_eq!(counts(&out), vec![2, 1], "variant {k}");
    }
    // A short segment is merged but nothing follows it.
    let mut s = stream(&base, 4, MSS);
    s[1].payload.truncate(500);
    s[2].seq = s[1].seq + 500;
    s[3].seq = s[2].seq + 1000;
    let mut g = Guest::simple(32, 2048);
    let out = feed(
        &mut g,
        &mut InPlace::new(),
        &s.iter().map(plain).collect::<Vec<_>>(),
        l3,
    );
    assert_eq!(counts(&out), vec![2, 2]);
    // A window update rides on the aggregate: the last one wins.
    let mut s = stream(&base, 3, MSS);
    s[2].window = 999;
    let mut g = Guest::simple(32, 2048);
    let out = feed(
        &mut g,
        &mut InPlace::new(),
        &s.iter().map(plain).collect::<Vec<_>>(),
        l3,
    );
    assert_eq!(out.len(), 1);
    let got = g.received();
    assert_eq!(
        &got[0].1[base.l4() + 14..base.l4() + 16],
        &999u16.to_be_bytes()
    );
}

#[test]
fn a_bad_checksum_is_never_merged_and_trusted_ones_are_not_checked() {
    let base = TcpFrame::default();
    let l3 = base.l3();
    let s = stream(&base, 3, MSS);
    for bad in [0, 1, 2] {
        let mut frames: Vec<_> = s.iter().map(plain).collect();
        let at = frames[bad].0.len() - 1 - bad * 100;
        frames[bad].0[at] ^= 0xff;
        let mut g = Guest::simple(32, 2048);
        let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
        let got = g.received();
        let i = out.iter().position(Option::is_none).unwrap();
        assert_eq!(
            got[i].1, frames[bad].0,
            "the corrupt segment alone, as it came"
        );
        assert_eq!(out.iter().map(|d| d.map_or(0, |d| d.segs)).sum::<u32>(), 2);
        assert!(!tcp_checksums_ok(&got[i].1, l3, false));
        for (k, (h, f)) in got.iter().enumerate() {
            if k != i {
                assert!(h.flags == 0 || h.gso_type != GSO_NONE);
                assert!(h.gso_type != GSO_NONE || tcp_checksums_ok(f, l3, false));
            }
        }
    }
    // Segments whose checksum the sender left to offload merge without a
    // check; the aggregate's partial checksum is the pseudo-header's.
    let mut g = Guest::simple(32, 2048);
    let out = feed(
        &mut g,
        &mut InPlace::new(),
        &s.iter().map(partial).collect::<Vec<_>>(),
        l3,
    );
    assert_eq!(counts(&out), vec![3]);
    let got = g.received();
    assert_eq!(reassemble(&got, l3, false), pattern(3 * MSS, 7));
    // A lone partial segment comes out exactly as it went in.
    let mut g = Guest::simple(32, 2048);
    let one = partial(&s[0]);
    let out = feed(&mut g, &mut InPlace::new(), std::slice::from_ref(&one), l3);
    assert_eq!(counts(&out), vec![1]);
    let got = g.received();
    assert_eq!(got[0].1, one.0);
    assert_eq!(
        (got[0].0.flags, got[0].0.csum_start),
        (FLAG_NEEDS_CSUM, base.l4() as u16)
    );
}

#[test]
fn a_tag_added_on_egress_moves_the_offsets() {
    let base = TcpFrame::default();
    let l3 = base.l3();
    let s = stream(&base, 5, MSS);
    let mut g = Guest::simple(32, 2048);
    let out = feed_tagged(
        &mut g,
        &mut InPlace::new(),
        &s.iter().map(plain).collect::<Vec<_>>(),
        l3,
        Some(7),
    );
    assert_eq!(counts(&out), vec![5]);
    let got = g.received();
    let (h, f) = &got[0];
    assert_eq!(&f[12..16], &[0x81, 0, 0, 7]);
    assert_eq!(usize::from(h.csum_start), base.l4() + 4);
    assert_eq!(usize::from(h.hdr_len), base.l4() + 4 + 20);
    assert_eq!(reassemble(&got, l3 + 4, false), pattern(5 * MSS, 7));
}

#[test]
fn the_copy_checksums_what_it_writes_across_guest_buffers() {
    // Guest to guest with the sum, pieces at odd offsets on both sides.
    let g = Guest::simple(4, 2048);
    let data = pattern(5000, 3);
    let src = [
        Seg {
            addr: 0x10_001,
            len: 1001,
        },
        Seg {
            addr: 0x12_000,
            len: 3999,
        },
    ];
    let m = g.mem.mem();
    assert_eq!(buffers::write(m, &src, 0, &data), 5000);
    let dst = [
        Seg {
            addr: 0x20_003,
            len: 777,
        },
        Seg {
            addr: 0x21_000,
            len: 6000,
        },
    ];
    let (n, s) = buffers::copy_sum(m, &src, 3, m, &dst, 1, 4990);
    assert_eq!(n, 4990);
    assert_eq!(checksum::fold(s), checksum::checksum(&data[3..4993]));
    let mut back = vec![0u8; 4990];
    assert_eq!(buffers::read(m, &dst, 1, &mut back), 4990);
    assert_eq!(back, &data[3..4993]);
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

fn ack_of(f: &[u8], p: &Segment) -> u32 {
    u32::from_be_bytes(f[p.l4 + 8..p.l4 + 12].try_into().unwrap())
}

/// Pseudo-random streams (xorshift, fixed seeds): gaps, retransmissions,
/// flags, new acknowledgments and options, short segments, bad and offloaded
/// checksums, tags and IPv6, into rings of odd buffer sizes. Whatever merges,
/// the guest's stack sees every segment's (sequence number, payload) in the
/// order sent, each piece of a merged frame checks, and every frame
/// delivered alone or left alone is byte for byte the one sent.
#[test]
fn random_streams_come_out_in_order_and_intact() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for round in 0..60 {
        let base = TcpFrame {
            v6: rnd(3) == 0,
            vlan: (rnd(4) == 0).then_some(5),
            options: if rnd(2) == 0 {
                vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 8]
            } else {
                Vec::new()
            },
            seq: rnd(u64::from(u32::MAX)) as u32,
            ..Default::default()
        };
        let l3 = base.l3();
        let mut seq = base.seq;
        let mut frames = Vec::new();
        let mut sent = Vec::new();
        for i in 0..(20 + rnd(60) as usize) {
            let len = match rnd(10) {
                0 => 1 + rnd(700) as usize,
                _ => 700,
            };
            let mut f = TcpFrame {
                seq,
                ip_id: i as u16,
                payload: pattern(len, i as u32 + round),
                ..base.clone()
            };
            match rnd(24) {
                0 => f.flags |= flags::PSH,
                1 => f.flags |= flags::FIN,
                2 => f.ack += 1,
                3 if !f.options.is_empty() => f.options[7] ^= 1,
                4 => f.seq = f.seq.wrapping_add(1000), // a gap
                5 => f.seq = f.seq.wrapping_sub(700),  // a retransmission
                6 => f.window = 3,
                _ => {}
            }
            seq = f.seq.wrapping_add(len as u32);
            let (mut bytes, h) = if rnd(5) == 0 { partial(&f) } else { plain(&f) };
            if h.flags == 0 && rnd(15) == 0 {
                let last = bytes.len() - 1;
                bytes[last] ^= 0x5a;
            }
            // As sent: a corrupted byte included (that segment goes alone, as it came).
            sent.push((
                f.seq,
                f.ack,
                bytes[f.l4() + 20 + f.options.len()..].to_vec(),
            ));
            frames.push((bytes, h));
        }
        let buf = [331u32, 1500, 2048, 4096][rnd(4) as usize];
        let mut g = Guest::new(1024, buf, 1000, |k| (1, [buf, buf - 1, buf / 2][k % 3]));
        let out = feed(&mut g, &mut InPlace::new(), &frames, l3);
        let got = g.received();
        assert_eq!(got.len(), out.len(), "round {round}: every frame delivered");
        let mut seen = Vec::new();
        let mut alone = 0;
        for (h, f) in &got {
            if h.gso_type != GSO_NONE {
                let mut seg = vec![0u8; 70_000];
                offload::segment(f, h, l3, false, &mut seg, |s, _| {
                    assert!(tcp_checksums_ok(s, l3, base.v6), "round {round}");
                    let p = Segment::parse(s, s.len(), l3, &VirtioNetHdrRepr::default()).unwrap();
                    seen.push((p.seq, ack_of(s, &p), s[p.hdr_end..].to_vec()));
                    true
                })
                .unwrap();
            } else {
                // Alone: exactly as sent (checksum, flags and all).
                assert!(
                    frames.iter().any(|(b, _)| b == f),
                    "round {round}: a frame not as sent"
                );
                let p = Segment::parse(f, f.len(), l3, h).unwrap();
                seen.push((p.seq, ack_of(f, &p), f[p.hdr_end..].to_vec()));
                alone += 1;
            }
        }
        if let Some(k) = (0..seen.len().max(sent.len())).find(|&k| seen.get(k) != sent.get(k)) {
            let show = |v: &[(u32, u32, Vec<u8>)]| v.get(k).map(|(s, a, p)| (*s, *a, p.len()));
            panic!(
                "round {round}: segment {k} of {}: got {:?}, sent {:?} (counts {:?})",
                sent.len(),
                show(&seen),
                show(&sent),
                counts(&out)
            );
        }
        assert!(
            alone < frames.len() || frames.len() < 3,
            "round {round}: something merged"
        );
    }
}
