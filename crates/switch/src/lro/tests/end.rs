//! What ends an aggregate or never joins one: a short ring, reordering,
//! flags, options, bad checksums; random streams stay in order and intact.

use super::*;

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
