//! What merges: in-order streams into large frames in the guest's
//! buffers, across odd buffers and chains, with a tag added, checksummed.

use super::*;

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
