//! VXLAN ports in EVPN mode against real FRR (root and Debian's `frr`;
//! prints a skip line otherwise), on the fabric of `common::frr`: three
//! vnio hosts and a kernel VTEP, zebra and bgpd on each (the first host
//! the route reflector). The routes converge (timed); endpoints reach each
//! other and the kernel VTEP's host; unicast after convergence floods to
//! nobody; an endpoint that moves from one host to another is followed
//! within a second.

mod common;

use common::frr::{fabric, frr_missing, Host, VNI};
use common::underlay::{skip_reason, tag};
use common::*;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

/// How long FRR may take to converge (sessions, then routes).
const CONVERGE: Duration = Duration::from_secs(60);
/// How soon a moved endpoint must be found behind its new host.
const MOVE: Duration = Duration::from_secs(1);

fn sw(h: &Host) -> &vnio_switch::daemon::WorkerHandle {
    h.sw.as_ref().expect("a vnio host").handle()
}

/// The VTEP `h`'s switch has `mac` pinned behind, if any.
fn behind(h: &Host, mac: EthernetAddress) -> Option<Ipv4Addr> {
    let fdb = sw(h).fdb().unwrap();
    fdb.iter().find(|e| e.mac == mac).and_then(|e| e.remote)
}

/// Datagrams each vnio host's EVPN port dropped as from an unknown VTEP.
fn unknown_vteps(hosts: &[Host]) -> Vec<u64> {
    let vnio = hosts.iter().filter(|h| h.sw.is_some());
    vnio.map(|h| port(sw(h), "vx").stats.tx.drops["unknown_vtep"])
        .collect()
}

fn endpoint(h: &Host, port: &str, n: u8) -> Endpoint {
    let cfg = EndpointConfig::new(mac(n), common::ip(n));
    Endpoint::connect(&h.dir.sock(port), cfg).unwrap()
}

fn responder(mut ep: Endpoint, stop: Arc<AtomicBool>) -> JoinHandle<Endpoint> {
    std::thread::spawn(move || {
        let s = stop.clone();
        ep.serve(Duration::from_secs(60), &move || s.load(Ordering::SeqCst))
            .unwrap();
        ep
    })
}

fn ping(a: &mut Endpoint, to: Ipv4Address, seq: u16) {
    a.ping(to, 9, seq, b"over evpn").unwrap();
    let got = a.poll_until(T, |_, ev| match ev {
        Event::EchoReply { src, seq, .. } if src == to => Some(seq),
        _ => None,
    });
    assert_eq!(got.expect("ping answered across EVPN"), seq);
}

/// Datagrams `h`'s EVPN port sent to VTEP `to` (counted when sent, so
/// before any answer to them can arrive).
fn datagrams_out(h: &Host, to: Ipv4Addr) -> u64 {
    let vx = port(sw(h), "vx");
    vx.stats
        .vteps
        .iter()
        .filter(|r| r.remote == to.to_string())
        .map(|r| r.packets_out)
        .sum()
}

/// What the hosts' FRR and switches know, for a failure's message.
fn dump(hosts: &[Host]) {
    for h in hosts {
        let f = h.frr.as_ref().unwrap();
        println!("{}: {}", h.addr, f.vtysh("show bgp l2vpn evpn summary"));
        println!("{}", f.vtysh(&format!("show evpn mac vni {VNI}")));
        if h.sw.is_some() {
            println!("{:?}", sw(h).fdb());
        }
    }
}

/// Sends a broadcast from each endpoint (its switch learns it) until
/// `done`, at most `limit`; the time it took.
fn until(
    hosts: &[Host],
    eps: &mut [&mut Endpoint],
    limit: Duration,
    done: impl Fn() -> bool,
) -> Duration {
    let t0 = Instant::now();
    loop {
        for ep in eps.iter_mut() {
            let me = ep.mac().0[5];
            ep.send_frame(&frame([0xff; 6], me, 0x88b5)).unwrap();
            ep.drain(64);
        }
        if done() {
            return t0.elapsed();
        }
        if t0.elapsed() > limit {
            dump(hosts);
            panic!("not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True when the kernel VTEP's bridge (host `k`) has `mac` behind `vtep`.
fn kernel_fdb(k: &Host, mac: EthernetAddress, vtep: Ipv4Addr) -> bool {
    let out = std::process::Command::new("bridge")
        .args(["-n", k.ns.name(), "fdb", "show", "dev", "kx"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with(&mac.to_string()) && l.contains(&format!("dst {vtep}")))
}

/// Endpoint `e1` on host 1 reaches the kernel VTEP's host (host 4):
/// each side has the other's address behind the right VTEP, from FRR.
fn kernel_vtep_is_reached(hosts: &[Host], e1: &mut Endpoint, kernel_ip: Ipv4Address) {
    let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.addr).collect();
    let km = e1
        .resolve(kernel_ip, T)
        .expect("the kernel VTEP's host answers ARP");
    ping(e1, kernel_ip, 2);
    let t = Instant::now();
    while behind(&hosts[0], km) != Some(addrs[3]) {
        if t.elapsed() > T {
            println!("kernel host's {km}");
            dump(hosts);
            panic!("the kernel VTEP's host is not pinned on host 1");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for("endpoint 1 behind host 1 on the kernel VTEP", || {
        kernel_fdb(&hosts[3], mac(1), addrs[0])
    });
    println!(
        "kernel VTEP at {}: reached from vnio, routes both ways",
        addrs[3]
    );
}

/// FRR stops on host 3 (zebra takes every route out of the shadow as it
/// leaves): host 3's switch keeps forwarding, from `e3`, on what it knew.
fn frr_stopped_keeps_routes(hosts: &mut [Host], e3: &mut Endpoint) {
    let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.addr).collect();
    // (The other hosts withdraw host 3, as EVPN says.) That nothing is
    // removed can only be seen by waiting: well past the agent's quiet
    // time before removals.
    hosts[2].frr.take().unwrap().stop();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(behind(&hosts[2], mac(1)), Some(addrs[1]));
    assert_eq!(behind(&hosts[2], mac(2)), Some(addrs[1]));
    assert_eq!(port(sw(&hosts[2]), "vx").stats.vteps.len(), 3);
    let was = datagrams_out(&hosts[2], addrs[1]);
    let to1 = SocketAddrV4::new(common::ip(1).into(), 7);
    e3.udp_send_to(to1, 4000, b"after FRR left").unwrap();
    wait_for("host 3 still sending to host 2", || {
        datagrams_out(&hosts[2], addrs[1]) == was + 1
    });
    println!("FRR stopped on host 3: its switch still forwards to host 2 on the last routes");
}

#[test]
fn evpn_fabric_through_frr() {
    if let Some(why) = skip_reason().or_else(frr_missing) {
        println!("skip: EVPN test needs root, the vxlan device and FRR ({why})");
        return;
    }
    bounded(Duration::from_secs(150), || {
        let kernel_ip = common::ip(4);
        let t0 = Instant::now();
        let (_u, hosts) = fabric(tag(), 3, &[kernel_ip.into()]);
        let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.addr).collect();
        let mut e1 = endpoint(&hosts[0], "p1", 1);
        let mut e2 = endpoint(&hosts[1], "p1", 2);
        let mut e3 = endpoint(&hosts[2], "p1", 3);

        // Convergence: every vnio host floods to the three others and has
        // every other endpoint behind its host.
        let all_pinned = || {
            (0..3).all(|i| {
                port(sw(&hosts[i]), "vx").stats.vteps.len() == 3
                    && (0..3)
                        .all(|j| i == j || behind(&hosts[i], mac(j as u8 + 1)) == Some(addrs[j]))
            })
        };
        until(
            &hosts,
            &mut [&mut e1, &mut e2, &mut e3],
            CONVERGE,
            all_pinned,
        );
        println!(
            "EVPN converged (3 vnio hosts, a kernel VTEP, a route reflector): {:.2} s from FRR's start",
            t0.elapsed().as_secs_f64()
        );
        for h in &hosts[..3] {
            let rows = port(sw(h), "vx").stats.vteps;
            assert_eq!(rows.len(), 3, "flood list of {}: {rows:?}", h.addr);
        }
        let strangers = unknown_vteps(&hosts);

        // 1 talks to 2 (ARP, a ping, UDP echoes): host 1 sends host 3 the
        // ARP broadcast and nothing of the unicast.
        let stop = Arc::new(AtomicBool::new(false));
        let r2 = responder(e2, stop.clone());
        e1.resolve(common::ip(2), T)
            .expect("ARP answered across EVPN");
        let before = datagrams_out(&hosts[0], addrs[2]);
        ping(&mut e1, common::ip(2), 1);
        let peer = SocketAddrV4::new(common::ip(2).into(), 7);
        let mut buf = [0u8; 2048];
        for i in 0..100u32 {
            e1.udp_send_to(peer, 4000, format!("datagram {i}").as_bytes())
                .unwrap();
            e1.udp_recv_timeout(&mut buf, T).unwrap().expect("echoed");
        }
        let floods = datagrams_out(&hosts[0], addrs[2]) - before;
        println!("unknown-unicast floods to host 3 while 1 and 2 exchanged 101 unicasts: {floods}");
        assert_eq!(floods, 0);

        kernel_vtep_is_reached(&hosts, &mut e1, kernel_ip);

        // Endpoint 1 moves from host 1 to host 2 (its port p2).
        drop(e1);
        let mut moved = endpoint(&hosts[1], "p2", 1);
        let followed = || {
            [0, 2]
                .iter()
                .all(|&i| behind(&hosts[i], mac(1)) == Some(addrs[1]))
                && kernel_fdb(&hosts[3], mac(1), addrs[1])
        };
        let took = until(&hosts, &mut [&mut moved], MOVE, followed);
        println!(
            "an endpoint moved from host 1 to host 2: followed by hosts 1, 3 and the kernel VTEP in {} ms",
            took.as_millis()
        );
        let r1 = responder(moved, stop.clone());
        e3.resolve(common::ip(1), T)
            .expect("the moved endpoint answers ARP");
        ping(&mut e3, common::ip(1), 3);

        stop.store(true, Ordering::SeqCst);
        r1.join().unwrap();
        r2.join().unwrap();
        // Strangers were dropped only while routes were still arriving.
        assert_eq!(unknown_vteps(&hosts), strangers);

        let mut hosts = hosts;
        frr_stopped_keeps_routes(&mut hosts, &mut e3);
        drop(hosts);
    });
}
