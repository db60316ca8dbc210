//! Software LRO toward a port: in-order MTU segments from a sender without
//! offloads reach a receiver that negotiated TSO receive as a few GSO
//! frames carrying the same byte stream; off (live) or toward a receiver
//! without TSO, every segment is delivered as it came.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::PolicyUpdate;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::offload;
use vnio_switch::vhost_user::device::feature;
use vnio_switch::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};
use vnio_switch::wire::virtio_net::{GSO_NONE, GSO_TCPV4};

const MSS: usize = 1448;
const SEGS: usize = 120;

fn ep(dir: &Dir, port: usize, n: u8, offloads: u64) -> Endpoint {
    let mut cfg = EndpointConfig::new(mac(n), ip(n));
    cfg.offloads = offloads;
    Endpoint::connect(&dir.sock(&format!("p{port}")), cfg).unwrap()
}

/// The stream's segments from endpoint 1 to endpoint `to`.
fn segments(to: u8) -> (Vec<Vec<u8>>, Vec<u8>) {
    let data = pattern(SEGS * MSS, 3);
    let frames = (0..SEGS)
        .map(|i| {
            let mut f = TcpFrame {
                seq: 5000 + (i * MSS) as u32,
                ip_id: i as u16,
                options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
                payload: data[i * MSS..(i + 1) * MSS].to_vec(),
                ..Default::default()
            }
            .build(false);
            f[..6].copy_from_slice(&mac(to).0);
            f[6..12].copy_from_slice(&mac(1).0);
            f
        })
        .collect();
    (frames, data)
}

/// Sends the stream, collects what arrives, and returns (frames received,
/// the reassembled payload).
fn transfer(a: &mut Endpoint, b: &mut Endpoint, to: u8) -> (usize, Vec<u8>) {
    let (frames, _) = segments(to);
    // One burst, as a guest's transmit batch: the switch sees the segments together.
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    assert_eq!(a.send_burst(&refs), SEGS);
    let l3 = 14;
    let hdr_end = 14 + 20 + 32;
    let mut buf = vec![0u8; 70_000];
    let mut got = 0;
    let mut bytes = Vec::new();
    let end = Instant::now() + T;
    while bytes.len() < SEGS * MSS && Instant::now() < end {
        let Some((h, n)) = b.poll_recv_with(&mut buf) else {
            continue;
        };
        got += 1;
        let f = &buf[..n];
        if h.gso_type == GSO_NONE {
            assert!(tcp_checksums_ok(f, l3, false));
            bytes.extend_from_slice(&f[hdr_end..]);
        } else {
            assert_eq!(h.gso_type, GSO_TCPV4);
            assert_eq!(usize::from(h.gso_size), MSS);
            // Cut again as the receiving stack would; every piece must check.
            let mut seg = vec![0u8; 4096];
            offload::segment(f, &h, l3, false, &mut seg, |s, _| {
                assert!(tcp_checksums_ok(s, l3, false));
                bytes.extend_from_slice(&s[hdr_end..]);
                true
            })
            .unwrap();
        }
    }
    (got, bytes)
}

fn learn(eps: &mut [&mut Endpoint]) {
    for e in eps.iter_mut() {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&e.mac().0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        e.send_frame(&f).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = vec![0u8; 70_000];
    for e in eps.iter_mut() {
        while e.poll_recv(&mut buf).is_some() {}
    }
}

#[test]
fn segments_reach_a_tso_receiver_as_few_large_frames() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("lro");
        let sw = switch(&dir, 3);
        let mut a = ep(&dir, 1, 1, 0);
        let rx = feature::GUEST_CSUM | feature::GUEST_TSO4;
        let mut b = ep(&dir, 2, 2, rx);
        let mut c = ep(&dir, 3, 3, 0);
        learn(&mut [&mut a, &mut b, &mut c]);
        let (_, data) = segments(2);

        let (frames, bytes) = transfer(&mut a, &mut b, 2);
        assert_eq!(bytes, data, "the stream arrived intact");
        assert!(frames <= SEGS / 4, "{frames} frames for {SEGS} segments");
        let merged = |n: &str| {
            sw.handle()
                .list()
                .unwrap()
                .into_iter()
                .find(|p| p.name == n)
                .unwrap()
                .stats
                .rx
                .lro_merged
        };
        assert_eq!(merged("p2") as usize, SEGS - frames);

        // A receiver without TSO gets every segment as it was.
        let (frames, bytes) = transfer(&mut a, &mut c, 3);
        assert_eq!((frames, bytes.len()), (SEGS, SEGS * MSS));
        assert_eq!(merged("p3"), 0);

        // LRO off, live: one frame per segment.
        let info = sw
            .handle()
            .set_port(
                "p2",
                PolicyUpdate {
                    lro: Some(false),
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(!info.policy.lro);
        let before = merged("p2");
        let (frames, bytes) = transfer(&mut a, &mut b, 2);
        assert_eq!((frames, bytes), (SEGS, data));
        assert_eq!(merged("p2"), before);
    });
}

/// Frames at `b` until `n` arrived or `T` passed: (header, bytes, when).
fn collect(
    b: &mut Endpoint,
    n: usize,
) -> Vec<(vnio_switch::wire::VirtioNetHdrRepr, Vec<u8>, Instant)> {
    let mut buf = vec![0u8; 70_000];
    let mut v = Vec::new();
    let end = Instant::now() + T;
    while v.len() < n && Instant::now() < end {
        if let Some((h, len)) = b.poll_recv_with(&mut buf) {
            v.push((h, buf[..len].to_vec(), Instant::now()));
        }
    }
    v
}

#[test]
fn another_frame_ends_the_aggregate_first_and_a_pause_ends_it_in_time() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("lro-flush");
        let sw = switch(&dir, 2);
        let mut a = ep(&dir, 1, 1, 0);
        let mut b = ep(&dir, 2, 2, feature::GUEST_CSUM | feature::GUEST_TSO4);
        learn(&mut [&mut a, &mut b]);
        let (frames, data) = segments(2);
        // Five segments, a frame of another kind to the same port, five more: one burst.
        let mut other = vec![0u8; 60];
        other[..6].copy_from_slice(&mac(2).0);
        other[6..12].copy_from_slice(&mac(1).0);
        other[12..14].copy_from_slice(&[0x88, 0xb5]);
        let mut burst: Vec<&[u8]> = frames[..5].iter().map(|f| f.as_slice()).collect();
        burst.push(&other);
        burst.extend(frames[5..10].iter().map(|f| f.as_slice()));
        assert_eq!(a.send_burst(&burst), 11);
        let got = collect(&mut b, 3);
        let kinds: Vec<(u8, usize)> = got.iter().map(|(h, f, _)| (h.gso_type, f.len())).collect();
        let hdr_end = 14 + 20 + 32;
        assert_eq!(
            kinds,
            vec![
                (GSO_TCPV4, hdr_end + 5 * MSS),
                (GSO_NONE, 60),
                (GSO_TCPV4, hdr_end + 5 * MSS)
            ],
            "the aggregate before the other frame, the rest after it"
        );
        assert_eq!(&got[0].1[hdr_end..], &data[..5 * MSS]);
        assert_eq!(&got[2].1[hdr_end..], &data[5 * MSS..10 * MSS]);

        // Three segments, then nothing: the aggregate does not wait for more.
        let t0 = Instant::now();
        let burst: Vec<&[u8]> = frames[10..13].iter().map(|f| f.as_slice()).collect();
        assert_eq!(a.send_burst(&burst), 3);
        let got = collect(&mut b, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), hdr_end + 3 * MSS);
        let waited = got[0].2 - t0;
        // The bound is 50 µs after the first segment; a loaded host adds its scheduling.
        assert!(waited < Duration::from_millis(500), "{waited:?}");
        let merged = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p2")
            .unwrap();
        assert_eq!(merged.stats.rx.lro_merged, 4 + 4 + 2);
    });
}

/// The library's window-limited TCP stream (what the lab's `lro` scenario
/// and examples/lro.rs run): every byte arrives as sent, none lost, as MTU
/// frames with LRO off and as aggregates with it on.
#[test]
fn the_tcp_stream_helper_arrives_whole_and_lro_merges_it() {
    use std::sync::atomic::AtomicBool;
    use vnio_switch::endpoint::tcp_stream::{self, Flow, QUEUE};
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("lro-stream");
        let sw = switch(&dir, 2);
        let open = |port: usize, n: u8, offloads: u64| {
            let mut cfg = EndpointConfig::new(mac(n), ip(n));
            cfg.offloads = offloads;
            cfg.queue_size = QUEUE;
            Endpoint::connect(&dir.sock(&format!("p{port}")), cfg).unwrap()
        };
        let mut a = open(1, 1, 0);
        let mut b = open(2, 2, feature::GUEST_CSUM | feature::GUEST_TSO4);
        learn(&mut [&mut a, &mut b]);
        let flow = Flow {
            src: mac(1),
            dst: mac(2),
            partial: false,
        };
        let stop = AtomicBool::new(false);
        let mut per_mib = Vec::new();
        for lro in [false, true] {
            sw.handle()
                .set_port(
                    "p2",
                    PolicyUpdate {
                        lro: Some(lro),
                        ..Default::default()
                    },
                )
                .unwrap();
            let s = tcp_stream::run(&mut a, &mut b, &flow, Duration::from_millis(300), &stop);
            assert_eq!((s.bad, s.lost), (0, 0), "LRO {lro}: {s:?}");
            assert!(s.bytes > 100 * MSS as u64, "LRO {lro}: {s:?}");
            per_mib.push(s.frames as f64 / (s.bytes as f64 / (1 << 20) as f64));
            std::thread::sleep(Duration::from_millis(5));
            let mut buf = vec![0u8; 70_000];
            while a.poll_recv(&mut buf).is_some() || b.poll_recv(&mut buf).is_some() {}
        }
        // 1448-byte segments make 724 frames per MiB; aggregates far fewer.
        assert!((700.0..760.0).contains(&per_mib[0]), "{per_mib:?}");
        assert!(per_mib[1] < per_mib[0] / 4.0, "{per_mib:?}");
    });
}
