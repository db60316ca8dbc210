//! Unit tests of [`super`] (vxlan.rs): a port's checks, and real ports
//! over loopback sockets.

use super::{flow_port, VxlanOptions, VxlanPort, MAX_REMOTES, RX_BATCH};
use crate::stats::{DropReason, QueueStats};
use crate::wire::testing::TcpFrame as Tcp;
use crate::wire::vxlan::{self, VxlanPacket, VxlanRepr};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

fn port_on_loopback(remotes: Vec<Ipv4Addr>) -> Option<VxlanPort> {
    VxlanPort::open(VxlanOptions {
        vni: 42,
        local: Ipv4Addr::LOCALHOST,
        remotes,
        accept: vec![],
        dstport: 0,
        evpn: false,
        ttl: None,
        underlay_mtu: 1500,
        capacity_bps: None,
    })
    .ok()
}

/// What the port made of up to `n` datagrams received within 5 s: the
/// sending VTEP of each frame (whose bytes `check` looks at), or why it
/// was dropped.
fn receive(
    p: &mut VxlanPort,
    n: usize,
    check: impl Fn(&[u8]),
) -> Vec<Result<Ipv4Addr, DropReason>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut results = Vec::new();
    while results.len() < n && std::time::Instant::now() < deadline {
        p.on_readable();
        let mut rx = p.take_rx(RX_BATCH).unwrap();
        while let Some(r) = rx.next_frame() {
            results.push(r.map(|f| {
                check(rx.frame(&f));
                f.from
            }));
        }
        p.put_rx(rx);
    }
    results
}

#[test]
fn refuses_what_cannot_work() {
    let o = VxlanOptions {
        vni: vxlan::MAX_VNI + 1,
        local: Ipv4Addr::LOCALHOST,
        remotes: vec![],
        accept: vec![],
        dstport: 0,
        evpn: false,
        ttl: None,
        underlay_mtu: 1500,
        capacity_bps: None,
    };
    assert!(VxlanPort::open(o.clone()).is_err());
    let o = VxlanOptions {
        vni: 1,
        remotes: vec![Ipv4Addr::LOCALHOST; MAX_REMOTES + 1],
        ..o
    };
    assert!(VxlanPort::open(o).is_err());
}

#[test]
fn frames_over_the_mtu_are_refused_before_the_copy() {
    let Some(mut p) = port_on_loopback(vec![Ipv4Addr::LOCALHOST]) else {
        return;
    };
    let s = QueueStats::default();
    assert_eq!(p.max_inner(), 1464);
    assert_eq!(p.reserve(1464, 1, &s), Ok(()));
    assert_eq!(p.reserve(1465, 1, &s), Err(DropReason::TooBig));
    assert_eq!(p.reserve(100, 0, &s), Err(DropReason::NoRoute));
}

/// A flood goes to every remote from one encapsulation (head-end
/// replication); a unicast to one VTEP goes to it alone.
#[test]
fn floods_replicate_and_unicast_goes_to_one_vtep() {
    let p1 = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = p1.local_addr().unwrap().port();
    let Ok(p3) = UdpSocket::bind(("127.0.0.3", port)) else {
        return;
    };
    let Ok(mut p) = VxlanPort::open(VxlanOptions {
        vni: 7,
        local: Ipv4Addr::new(127, 0, 0, 2),
        remotes: vec![Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 3)],
        accept: vec![],
        dstport: port,
        evpn: false,
        ttl: None,
        underlay_mtu: 1500,
        capacity_bps: None,
    }) else {
        return;
    };
    let stats = QueueStats::default();
    let frame = Tcp::default().build(false);
    for to in [None, Some(Ipv4Addr::new(127, 0, 0, 3))] {
        let fanout = if to.is_some() { 1 } else { p.fanout() };
        p.reserve(frame.len(), fanout, &stats).unwrap();
        p.slot()[..frame.len()].copy_from_slice(&frame);
        p.commit(frame.len(), to);
    }
    p.flush(&stats);
    let mut b = [0u8; 2048];
    let mut got = [0usize; 2];
    for (k, s) in [&p1, &p3].iter().enumerate() {
        s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        while let Ok((n, _)) = s.recv_from(&mut b) {
            let d = VxlanPacket::new_checked(&b[..n]).unwrap();
            assert_eq!(VxlanRepr::parse(&d), Ok(VxlanRepr { vni: 7 }));
            assert_eq!(d.payload(), &frame[..]);
            got[k] += 1;
        }
    }
    assert_eq!(got, [1, 2], "the flood to both, the unicast to .3 only");
    let v = p.vteps();
    assert_eq!((v[0].packets_out, v[1].packets_out), (1, 2));
    assert_eq!(v.len(), 2, "no stranger seen: no others row");
}

/// A port sends to a plain UDP socket standing in for a VTEP, which
/// checks the encapsulation; datagrams back with the right and a wrong
/// VNI come out as a frame and a `vni` drop.
#[test]
fn encapsulates_and_decapsulates_over_loopback() {
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let std::net::SocketAddr::V4(pa) = peer.local_addr().unwrap() else {
        unreachable!()
    };
    // The port sends to the peer's port: as dstport it is also where
    // the port listens, so bind the port on another loopback address.
    let Ok(mut p) = VxlanPort::open(VxlanOptions {
        vni: 42,
        local: Ipv4Addr::new(127, 0, 0, 2),
        remotes: vec![Ipv4Addr::LOCALHOST],
        accept: vec![],
        dstport: pa.port(),
        evpn: false,
        ttl: Some(7),
        underlay_mtu: 1500,
        capacity_bps: None,
    }) else {
        return;
    };
    let stats = QueueStats::default();
    let frame = Tcp::default().build(false);
    p.reserve(frame.len(), p.fanout(), &stats).unwrap();
    p.slot()[..frame.len()].copy_from_slice(&frame);
    p.commit(frame.len(), None);
    p.flush(&stats);
    peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let mut b = [0u8; 2048];
    let (n, from) = peer.recv_from(&mut b).unwrap();
    let d = VxlanPacket::new_checked(&b[..n]).unwrap();
    assert_eq!(VxlanRepr::parse(&d), Ok(VxlanRepr { vni: 42 }));
    assert_eq!(d.payload(), &frame[..]);
    assert_eq!(from.ip().to_string(), "127.0.0.2");
    if p.per_flow_ports() {
        assert_eq!(from.port(), flow_port(&frame));
    }
    let v = p.vteps();
    assert_eq!((v[0].packets_out, v[0].bytes_out), (1, frame.len() as u64));
    // Back: one good, one of another VNI, one without the I flag.
    let to = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), pa.port());
    for (vni, flag) in [(42u32, 0x08u8), (43, 0x08), (42, 0)] {
        let mut dgram = vec![0u8; 8 + frame.len()];
        VxlanRepr { vni }.emit(&mut dgram).unwrap();
        dgram[0] = flag;
        dgram[8..].copy_from_slice(&frame);
        peer.send_to(&dgram, to).unwrap();
    }
    let results = receive(&mut p, 3, |b| {
        assert_eq!(&b[..12], &[0; 12], "an empty virtio-net header");
        assert_eq!(&b[12..], &frame[..]);
    });
    assert_eq!(
        results,
        [
            Ok(Ipv4Addr::LOCALHOST),
            Err(DropReason::Vni),
            Err(DropReason::Vni)
        ]
    );
    let v = p.vteps();
    assert_eq!(v[0].packets_in, 1);
}

/// Datagrams from a VTEP neither in `remotes` nor in `accept` are dropped
/// (`unknown_vtep`) and counted nowhere else; an accepted range's VTEP is
/// heard and counted on the "other" row.
#[test]
fn strangers_are_dropped_and_accepted_ranges_heard() {
    let listed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = listed.local_addr().unwrap().port();
    let (Ok(stranger), Ok(ranged)) = (
        UdpSocket::bind("127.0.0.5:0"),
        UdpSocket::bind("127.0.1.9:0"),
    ) else {
        return;
    };
    let Ok(mut p) = VxlanPort::open(VxlanOptions {
        vni: 42,
        local: Ipv4Addr::new(127, 0, 0, 2),
        remotes: vec![Ipv4Addr::LOCALHOST],
        accept: vec!["127.0.1.0/24".parse().unwrap()],
        dstport: port,
        evpn: false,
        ttl: None,
        underlay_mtu: 1500,
        capacity_bps: None,
    }) else {
        return;
    };
    let frame = Tcp::default().build(false);
    let mut dgram = vec![0u8; 8 + frame.len()];
    VxlanRepr { vni: 42 }.emit(&mut dgram).unwrap();
    dgram[8..].copy_from_slice(&frame);
    let to = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), port);
    for s in [&stranger, &listed, &ranged] {
        s.send_to(&dgram, to).unwrap();
    }
    let results = receive(&mut p, 3, |_| {});
    assert_eq!(
        results,
        [
            Err(DropReason::UnknownVtep),
            Ok(Ipv4Addr::LOCALHOST),
            Ok(Ipv4Addr::new(127, 0, 1, 9))
        ]
    );
    let v = p.vteps();
    assert_eq!(v.len(), 2, "the listed VTEP and the accepted row");
    assert_eq!((v[0].packets_in, v[1].packets_in), (1, 1));
}
