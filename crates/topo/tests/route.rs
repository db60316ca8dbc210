//! Routes through a router namespace; macvlan; ipvlan where the kernel has it.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use vnio_topo::{Cidr, IpvlanMode, MacvlanMode, Netns, Pair};

fn v4(octet: u8, last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 77, octet, last))
}

/// Send one datagram from `from` to `to_addr` served in `to`, and return
/// the source address the server saw.
fn udp_once(from: &Netns, to: &Netns, to_addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let server = to.run(move || UdpSocket::bind(to_addr)).expect("enter")?;
    server.set_read_timeout(Some(Duration::from_secs(3)))?;
    let client = from.run(|| UdpSocket::bind("0.0.0.0:0")).expect("enter")?;
    client.send_to(b"routed", to_addr)?;
    let mut buf = [0u8; 16];
    let (n, src) = server.recv_from(&mut buf)?;
    assert_eq!(&buf[..n], b"routed");
    Ok(src)
}

#[test]
fn routes_through_a_router_namespace() {
    if common::skip_unless_root("routes_through_a_router_namespace") {
        return;
    }
    let journal = common::journal("route");
    let (id, n) = vnio_topo::unique_id();
    let o = (n % 256) as u8;
    let h1 = Netns::create_with_journal(&format!("vnio-{id}-h1"), &journal).expect("h1");
    let r = Netns::create_with_journal(&format!("vnio-{id}-r"), &journal).expect("r");
    let h2 = Netns::create_with_journal(&format!("vnio-{id}-h2"), &journal).expect("h2");
    r.set_sysctl("net.ipv4.ip_forward", "1")
        .expect("forwarding");
    assert_eq!(r.sysctl("net.ipv4.ip_forward").expect("read"), "1");
    assert_eq!(h1.sysctl("net.ipv4.ip_forward").expect("read"), "0");

    // h1 10.77.o.1/25 -- .126 r .254 -- 10.77.o.129/25 h2
    let mut rh = r.handle().expect("router handle");
    for (host, port, host_ip, router_ip) in [(&h1, "r1", 1, 126), (&h2, "r2", 129, 254)] {
        let _ = rh.add_veth(port, "eth0", Some(host)).expect("veth").keep();
        rh.add_address(port, v4(o, router_ip), 25)
            .expect("router address");
        rh.set_up(port).expect("router port up");
        let mut hh = host.handle().expect("host handle");
        hh.add_address("eth0", v4(o, host_ip), 25)
            .expect("host address");
        hh.set_up("eth0").expect("host up");
    }
    let mut h1h = h1.handle().expect("h1 handle");
    let far = Cidr {
        addr: v4(o, 128),
        prefix: 25,
    };
    h1h.add_route(far, Some(v4(o, 126)), None)
        .expect("route on h1");
    let mut h2h = h2.handle().expect("h2 handle");
    h2h.add_default_route(v4(o, 254)).expect("default on h2");

    let routes = h1h.routes().expect("routes");
    assert!(
        routes
            .iter()
            .any(|rt| rt.dest == far && rt.via == Some(v4(o, 126))),
        "{routes:?}"
    );
    let defaults = h2h.routes().expect("routes");
    assert!(
        defaults
            .iter()
            .any(|rt| rt.dest.prefix == 0 && rt.via == Some(v4(o, 254))),
        "{defaults:?}"
    );

    let dst = SocketAddr::new(v4(o, 129), 7201);
    let src = udp_once(&h1, &h2, dst).expect("routed datagram");
    assert_eq!(src.ip(), v4(o, 1));

    // Without the route, h2 is unreachable from h1.
    h1h.delete_route(far).expect("delete route");
    assert!(!h1h
        .routes()
        .expect("routes")
        .iter()
        .any(|rt| rt.dest == far));
    let err = udp_once(&h1, &h2, SocketAddr::new(v4(o, 129), 7202)).expect_err("no route");
    assert_eq!(err.raw_os_error(), Some(libc_enetunreach()), "{err}");
    let missing = h1h.delete_route(far).expect_err("route already gone");
    assert!(
        missing
            .to_string()
            .starts_with(&format!("deleting route {far} in netns")),
        "{missing}"
    );

    drop((rh, h1h, h2h));
    for ns in [h1, r, h2] {
        ns.delete().expect("delete");
    }
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

fn libc_enetunreach() -> i32 {
    nix::errno::Errno::ENETUNREACH as i32
}

#[test]
fn macvlan_reaches_the_parents_peer() {
    if common::skip_unless_root("macvlan_reaches_the_parents_peer") {
        return;
    }
    let journal = common::journal("macvlan");
    let pair = Pair::with_journal(&journal).expect("pair");
    let (a, b) = (pair.a(), pair.b());
    let (id, _) = vnio_topo::unique_id();
    let c = Netns::create_with_journal(&format!("vnio-{id}-c"), &journal).expect("c");
    let mut bh = b.handle().expect("b handle");
    let mv = bh
        .add_macvlan("mv0", b.ifname(), MacvlanMode::Bridge)
        .expect("macvlan");
    let state = bh.link("mv0").expect("lookup").expect("mv0 exists");
    assert_eq!(state.kind.as_deref(), Some("macvlan"));
    bh.move_to(mv.keep().as_str(), &c).expect("move to c");
    let [x, y, z, _] = a.addr().octets();
    let c_addr = Ipv4Addr::new(x, y, z, 3);
    let mut ch = c.handle().expect("c handle");
    ch.add_address("mv0", IpAddr::V4(c_addr), 24)
        .expect("address");
    ch.set_up("mv0").expect("up");

    let src = udp_once(a.netns(), &c, SocketAddr::from((c_addr, 7203))).expect("via macvlan");
    assert_eq!(src.ip(), IpAddr::V4(a.addr()));

    // ipvlan: created if the kernel has it, otherwise a clear error.
    match bh.add_ipvlan("ipv0", b.ifname(), IpvlanMode::L2) {
        Ok(link) => {
            let state = bh.link("ipv0").expect("lookup").expect("ipv0 exists");
            assert_eq!(state.kind.as_deref(), Some("ipvlan"));
            link.delete().expect("delete ipvlan");
            assert!(bh.link("ipv0").expect("lookup").is_none());
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("link kind ipvlan is not available in this kernel"),
                "{text}"
            );
            println!("ipvlan unavailable here: {text}");
        }
    }
    drop((bh, ch));
    drop(pair);
    c.delete().expect("delete c");
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
