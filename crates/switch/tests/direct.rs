//! Direct mode against the real kernel (root only): a vhost-user port bound
//! 1:1 to an uplink receive queue reaches a peer namespace with no FDB,
//! VLAN or QoS on the way, next to a switched port on the same uplink; and
//! misconfigurations are refused in one line.

mod common;

use common::*;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;
use vnio_switch::wire::Ipv4Address;

/// Median round trip of `n` pings from `ep` to `to`, in microseconds.
fn pings(ep: &mut Endpoint, to: Ipv4Address, n: u16) -> f64 {
    ep.resolve(to, T).expect("the peer answers ARP");
    let mut rtts = Vec::new();
    for seq in 1..=n {
        let t = Instant::now();
        ep.ping(to, 9, seq, b"direct").unwrap();
        ep.poll_until(T, |_, ev| {
            matches!(ev, Event::EchoReply { seq: s, .. } if s == seq).then_some(())
        })
        .expect("echo reply");
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    rtts.sort_by(f64::total_cmp);
    rtts[rtts.len() / 2]
}

fn run() {
    let dir = Dir::new("direct");
    let id = std::process::id() % 1000;
    let net = (id % 200) as u8 + 20;
    let (a, b) = (format!("vnda{id}"), format!("vndb{id}"));
    let ns = vnio_lab::Netns::create(&format!("vnio-direct-{id}")).unwrap();
    let mut h = vnio_lab::Handle::root().unwrap();
    let _veth = h.add_veth(&a, &b, Some(&ns)).unwrap();
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{a}/disable_ipv6"), "1");
    h.set_up(&a).unwrap();
    let peer = Ipv4Address([10, 79, net, 1]);
    {
        let mut nh = ns.handle().unwrap();
        nh.add_address(&b, IpAddr::V4(Ipv4Addr::from(peer.0)), 24)
            .unwrap();
        nh.set_up(&b).unwrap();
    }
    let mut up = PortSpec::uplink("up", &a);
    up.kind.uplink_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.mac = Some(mac(1).to_string());
    p1.kind.vhost_user_mut().unwrap().direct = Some("up".into());
    let p2 = PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server);
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![up, p1, p2],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut e1 = Endpoint::connect(
        &dir.sock("p1"),
        vnio_switch::endpoint::EndpointConfig::new(mac(1), Ipv4Address([10, 79, net, 2])),
    )
    .unwrap();
    let mut e2 = Endpoint::connect(
        &dir.sock("p2"),
        vnio_switch::endpoint::EndpointConfig::new(mac(2), Ipv4Address([10, 79, net, 3])),
    )
    .unwrap();

    let direct = pings(&mut e1, peer, 200);
    let switched = pings(&mut e2, peer, 200);
    println!("ping to a namespace, median: direct {direct:.1} us, switched {switched:.1} us");

    // Not switched: the FDB never saw the direct port's address, and the
    // uplink gave it queue 1 for its own.
    let fdb = sw.handle().fdb().unwrap();
    assert!(
        fdb.iter().all(|e| e.mac != mac(1)),
        "the direct port is not learned: {fdb:?}"
    );
    assert!(fdb.iter().any(|e| e.mac == mac(2)));
    let list = sw.handle().list().unwrap();
    let upi = list.iter().find(|p| p.name == "up").unwrap();
    assert_eq!(upi.stats.uplink_queues[1].owner.as_deref(), Some("p1"));
    assert!(upi.stats.uplink_queues[1].packets >= 200);
    let p1i = list.iter().find(|p| p.name == "p1").unwrap();
    assert!(p1i.stats.tx.packets >= 200 && p1i.stats.rx.packets >= 200);

    // Refused, each in one line.
    let add = |spec: PortSpec| sw.handle().add_port(spec).unwrap_err().to_string();
    let mut p3 = PortSpec::vhost_user("p3", dir.sock("p3"), SocketMode::Server);
    p3.mac = Some(mac(3).to_string());
    p3.kind.vhost_user_mut().unwrap().direct = Some("nope".into());
    let e = add(p3.clone());
    assert!(e.contains("no uplink port named nope"), "{e}");
    p3.kind.vhost_user_mut().unwrap().direct = Some("up".into());
    let e = add(p3.clone());
    assert!(e.contains("no receive queue to give"), "{e}");
    p3.mac = None;
    let e = add(p3);
    assert!(e.contains("`direct` needs `mac`"), "{e}");
    assert!(!e.contains('\n'));

    // The queue comes back when the direct port leaves.
    sw.handle().del_port("p1").unwrap();
    let mut p4 = PortSpec::vhost_user("p4", dir.sock("p4"), SocketMode::Server);
    p4.mac = Some(mac(4).to_string());
    p4.kind.vhost_user_mut().unwrap().direct = Some("up".into());
    sw.handle().add_port(p4).unwrap();
}

#[test]
fn a_direct_port_bypasses_switching() {
    if !vnio_lab::is_root() {
        println!("skip: direct mode test needs root");
        return;
    }
    bounded(Duration::from_secs(60), run);
}
