//! Unit tests of [`super`] (offload/mod.rs and segment.rs): the
//! decisions per destination, checksum completion, and segmentation
//! checked field by field against what a TSO NIC does.

use super::{check, complete_checksum, egress_flags, feature, segment, work, Caps, Reject, Work};
use crate::wire::tcp::{flags, TcpSegment};
use crate::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};
use crate::wire::virtio_net::{
    VirtioNetHdrRepr, FLAG_DATA_VALID, FLAG_NEEDS_CSUM, GSO_ECN, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};

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
