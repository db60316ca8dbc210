//! Checksum and TSO offloads between poll-mode endpoints that negotiated
//! different features: metadata crosses unchanged between ports that both
//! have an offload, and the switch completes checksums and segments GSO
//! frames in software for ports that do not; the byte stream survives.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::device::feature;
use vnio_switch::wire::tcp::{flags, TcpSegment};
use vnio_switch::wire::testing::{pattern, tcp_checksums_ok, TcpFrame};
use vnio_switch::wire::virtio_net::{
    VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_TCPV6,
};

const TX_OFFLOADS: u64 = feature::CSUM | feature::HOST_TSO4 | feature::HOST_TSO6;
const RX_OFFLOADS: u64 =
    feature::GUEST_CSUM | feature::GUEST_TSO4 | feature::GUEST_TSO6 | feature::GUEST_ECN;

fn ep(dir: &Dir, port: usize, n: u8, offloads: u64) -> Endpoint {
    let mut cfg = EndpointConfig::new(mac(n), ip(n));
    cfg.offloads = offloads;
    let e = Endpoint::connect(&dir.sock(&format!("p{port}")), cfg).unwrap();
    assert_eq!(e.features() & offloads, offloads, "negotiated");
    e
}

/// A frame from endpoint `from` to endpoint `to`.
fn addressed(f: &TcpFrame, partial: bool, from: u8, to: u8) -> Vec<u8> {
    let mut b = f.build(partial);
    b[..6].copy_from_slice(&mac(to).0);
    b[6..12].copy_from_slice(&mac(from).0);
    b
}

fn gso(f: &TcpFrame, mss: u16) -> VirtioNetHdrRepr {
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

fn recv(e: &mut Endpoint, n: usize) -> Vec<(VirtioNetHdrRepr, Vec<u8>)> {
    let mut buf = vec![0u8; 70_000];
    let mut out = Vec::new();
    let end = Instant::now() + T;
    while out.len() < n {
        match e.poll_recv_with(&mut buf) {
            Some((h, len)) => out.push((h, buf[..len].to_vec())),
            None if Instant::now() < end => std::thread::yield_now(),
            None => panic!("got {} of {n} frames", out.len()),
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    if let Some((h, len)) = e.poll_recv_with(&mut buf) {
        panic!("more than {n} frames: {h:?} {:?}", &buf[..len.min(64)]);
    }
    out
}

/// Every endpoint announces itself (the switch learns where each MAC is)
/// and drains what the others announced. `trunk_mac` sends tagged (VLAN 1).
fn learn(eps: &mut [&mut Endpoint], trunk_mac: Option<u8>) {
    for e in eps.iter_mut() {
        let mut f = [0u8; 64];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&e.mac().0);
        if Some(e.mac()) == trunk_mac.map(mac) {
            f[12..16].copy_from_slice(&[0x81, 0, 0, 1]);
            f[16..18].copy_from_slice(&[0x88, 0xb5]);
        } else {
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
        }
        e.send_frame(&f).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut buf = vec![0u8; 70_000];
    for e in eps.iter_mut() {
        while e.poll_recv(&mut buf).is_some() {}
    }
}

fn switch_with_trunk(dir: &Dir) -> Switch {
    let mut ports: Vec<PortSpec> = (1..=5)
        .map(|i| {
            PortSpec::vhost_user(
                &format!("p{i}"),
                dir.sock(&format!("p{i}")),
                SocketMode::Server,
            )
        })
        .collect();
    // p5 gets VLAN 1 tagged: offsets in the header move by the tag.
    ports[4].trunk = vec![1];
    Switch::start(Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports,
    })
    .unwrap()
}

#[test]
fn gso_and_partial_checksums_meet_every_kind_of_receiver() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("offload");
        let sw = switch_with_trunk(&dir);
        let mut r = Receivers::connect(&dir);
        for v6 in [false, true] {
            let f = TcpFrame {
                v6,
                payload: pattern(30_000, 9),
                options: vec![1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6],
                flags: flags::ACK | flags::PSH,
                ..Default::default()
            };
            let h = gso(&f, 1448);
            r.tso_receivers_take_the_super_frame(&f, &h);
            r.a_plain_receiver_gets_checksummed_segments(&f, &h);
            r.a_checksum_receiver_gets_partial_segments(&f, &h);
        }
        r.a_partial_checksum_is_completed_or_passed();
        r.a_jumbo_frame_crosses_as_it_is();

        let stats = |n: &str| {
            sw.handle()
                .list()
                .unwrap()
                .into_iter()
                .find(|p| p.name == n)
                .unwrap()
                .stats
        };
        assert_eq!(stats("p2").rx.sw_segmented, 2);
        assert_eq!(stats("p2").rx.sw_checksums, 1);
        assert_eq!(stats("p3").rx.sw_segmented + stats("p3").rx.sw_checksums, 0);
        assert_eq!(stats("p4").rx.sw_segmented, 2);
        assert_eq!(stats("p1").tx.drops["malformed"], 0);
    });
}

/// 1: sends with offloads; 2: takes nothing; 3: takes everything;
/// 4: takes partial checksums but not TSO; 5: takes everything, on a trunk.
struct Receivers {
    a: Endpoint,
    plain: Endpoint,
    full: Endpoint,
    csum_only: Endpoint,
    tagged: Endpoint,
}

impl Receivers {
    fn connect(dir: &Dir) -> Receivers {
        let mut r = Receivers {
            a: ep(dir, 1, 1, TX_OFFLOADS),
            plain: ep(dir, 2, 2, 0),
            full: ep(dir, 3, 3, RX_OFFLOADS),
            csum_only: ep(dir, 4, 4, feature::GUEST_CSUM),
            tagged: ep(dir, 5, 5, RX_OFFLOADS),
        };
        learn(
            &mut [
                &mut r.a,
                &mut r.plain,
                &mut r.full,
                &mut r.csum_only,
                &mut r.tagged,
            ],
            Some(5),
        );
        r
    }

    /// Both sides negotiated TSO: the super-frame crosses as it is; through
    /// a trunk with one tag in, offsets moved by 4.
    fn tso_receivers_take_the_super_frame(&mut self, f: &TcpFrame, h: &VirtioNetHdrRepr) {
        let v6 = f.v6;
        let sent = addressed(f, true, 1, 3);
        self.a.send_frame_with(h, &sent).unwrap();
        let got = recv(&mut self.full, 1);
        assert_eq!(got[0].1, sent, "v6={v6}: bytes unchanged");
        assert_eq!(
            VirtioNetHdrRepr {
                num_buffers: 0,
                ..got[0].0
            },
            *h,
            "v6={v6}: metadata unchanged"
        );

        // The same through a trunk: one tag in, offsets moved by 4.
        self.a
            .send_frame_with(h, &addressed(f, true, 1, 5))
            .unwrap();
        let got = recv(&mut self.tagged, 1);
        assert_eq!(&got[0].1[12..16], &[0x81, 0, 0, 1], "tagged");
        assert_eq!(got[0].0.csum_start, h.csum_start + 4);
        assert_eq!(got[0].0.hdr_len, h.hdr_len + 4);
        assert_eq!(&got[0].1[16..], &sent[12..]);
    }

    /// No offloads: segments with complete checksums, the stream intact.
    fn a_plain_receiver_gets_checksummed_segments(&mut self, f: &TcpFrame, h: &VirtioNetHdrRepr) {
        let v6 = f.v6;
        let nseg = 30_000usize.div_ceil(1448);
        let hdr_end = f.l4() + 32;
        self.a
            .send_frame_with(h, &addressed(f, true, 1, 2))
            .unwrap();
        let segs = recv(&mut self.plain, nseg);
        let mut stream = Vec::new();
        for (i, (sh, s)) in segs.iter().enumerate() {
            assert_eq!((sh.flags, sh.gso_type), (0, GSO_NONE));
            assert!(tcp_checksums_ok(s, f.l3(), v6), "v6={v6} segment {i}");
            let t = TcpSegment::new_checked(&s[f.l4()..]).unwrap();
            assert_eq!(t.seq(), f.seq + (i * 1448) as u32);
            assert_eq!(t.flags() & flags::PSH != 0, i + 1 == nseg);
            stream.extend_from_slice(&s[hdr_end..]);
        }
        assert_eq!(stream, f.payload, "v6={v6}: byte-identical stream");
    }

    /// Partial checksums accepted, TSO not: segments left partial.
    fn a_checksum_receiver_gets_partial_segments(&mut self, f: &TcpFrame, h: &VirtioNetHdrRepr) {
        let nseg = 30_000usize.div_ceil(1448);
        self.a
            .send_frame_with(h, &addressed(f, true, 1, 4))
            .unwrap();
        let segs = recv(&mut self.csum_only, nseg);
        for (sh, s) in &segs {
            assert_eq!(sh.flags, FLAG_NEEDS_CSUM);
            assert_eq!(usize::from(sh.csum_start), f.l4());
            let mut s = s.clone();
            vnio_switch::offload::complete_checksum(&mut s, sh).unwrap();
            assert!(tcp_checksums_ok(&s, f.l3(), f.v6));
        }
    }

    /// A partially checksummed (non-GSO) frame: completed for the port
    /// without checksum offload, passed as it is to the one with it.
    fn a_partial_checksum_is_completed_or_passed(&mut self) {
        let f = TcpFrame {
            payload: pattern(1000, 11),
            ..Default::default()
        };
        let h = VirtioNetHdrRepr {
            gso_type: GSO_NONE,
            gso_size: 0,
            hdr_len: 0,
            ..gso(&f, 0)
        };
        self.a
            .send_frame_with(&h, &addressed(&f, true, 1, 2))
            .unwrap();
        let got = recv(&mut self.plain, 1);
        assert_eq!(got[0].0.flags, 0);
        assert_eq!(got[0].1, addressed(&f, false, 1, 2), "checksum completed");
        self.a
            .send_frame_with(&h, &addressed(&f, true, 1, 3))
            .unwrap();
        let got = recv(&mut self.full, 1);
        assert_eq!(got[0].0.flags, FLAG_NEEDS_CSUM);
        assert_eq!(got[0].1, addressed(&f, true, 1, 3));
    }

    /// A 9000-byte frame (a descriptor chain from the endpoint) crosses as it is.
    fn a_jumbo_frame_crosses_as_it_is(&mut self) {
        let jumbo = TcpFrame {
            payload: pattern(9000, 12),
            ..Default::default()
        };
        let j = addressed(&jumbo, false, 1, 2);
        self.a.send_frame(&j).unwrap();
        assert_eq!(recv(&mut self.plain, 1)[0].1, j);
    }
}

#[test]
fn offload_metadata_a_sender_did_not_negotiate_is_dropped() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("offload-bad");
        let sw = switch(&dir, 2);
        // No offloads negotiated by the sender.
        let mut a = ep(&dir, 1, 1, 0);
        let mut b = ep(&dir, 2, 2, RX_OFFLOADS);
        learn(&mut [&mut a, &mut b], None);
        let f = TcpFrame {
            payload: pattern(3000, 13),
            ..Default::default()
        };
        a.send_frame_with(&gso(&f, 1448), &addressed(&f, true, 1, 2))
            .unwrap();
        let mut csum = gso(&f, 0);
        csum.gso_type = GSO_NONE;
        a.send_frame_with(&csum, &addressed(&f, true, 1, 2))
            .unwrap();
        // Both frames are taken before the front-end goes.
        std::thread::sleep(Duration::from_millis(200));
        // Then a sender that did negotiate, with a checksum offset past the end.
        drop(a);
        let mut a = {
            let mut cfg = EndpointConfig::new(mac(1), ip(1));
            cfg.offloads = TX_OFFLOADS;
            // The port accepts a new front-end once the old one is gone.
            let end = Instant::now() + T;
            loop {
                match Endpoint::connect(&dir.sock("p1"), cfg) {
                    Ok(e) => break e,
                    Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => panic!("{e}"),
                }
            }
        };
        let mut past = csum;
        past.csum_start = 60_000;
        a.send_frame_with(&past, &addressed(&f, true, 1, 2))
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = vec![0u8; 70_000];
        assert!(b.poll_recv(&mut buf).is_none(), "nothing delivered");
        let p1 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p1")
            .unwrap();
        assert_eq!(p1.stats.tx.drops["malformed"], 3, "{:?}", p1.stats);
        assert_eq!(
            p1.stats.resets, 0,
            "a bad header costs the frame, not the port"
        );
    });
}

#[test]
fn a_port_configured_without_offloads_offers_none() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("offload-off");
        let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
        p1.kind.vhost_user_mut().unwrap().offloads = false;
        let _sw = Switch::start(Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..Default::default()
            },
            ports: vec![p1],
        })
        .unwrap();
        let mut cfg = EndpointConfig::new(mac(1), ip(1));
        cfg.offloads = TX_OFFLOADS | RX_OFFLOADS;
        let e = Endpoint::connect(&dir.sock("p1"), cfg).unwrap();
        assert_eq!(e.features() & feature::OFFLOADS, 0, "none offered");
        assert_ne!(e.features() & feature::MRG_RXBUF, 0, "the rest is");
    });
}
