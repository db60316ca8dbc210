//! A front-end that writes hostile descriptor chains costs only its own
//! port: a counted drop by reason, the port reset (connection closed), and
//! traffic between the other ports carries on; the port accepts a new
//! front-end afterwards.

mod common;

use common::raw::{Order, RawFrontend};
use common::*;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// p1 is hostile, p2 and p3 are healthy endpoints.
fn hostile_case(
    attack: impl FnOnce(&mut RawFrontend, &mut vnio_switch::endpoint::Endpoint),
    direction: &str,
) {
    let dir = Dir::new("hostile");
    let sw = switch(&dir, 3);
    let mut h = RawFrontend::connect(&dir.sock("p1"));
    h.handshake(Order::Standard);
    wait_for("p1 running", || port(sw.handle(), "p1").running);
    let mut b = endpoint(&dir, 2, 2);
    let c = endpoint(&dir, 3, 3);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let c = std::thread::spawn(move || {
        let mut c = c;
        c.serve(Duration::from_secs(20), &move || s2.load(Ordering::SeqCst))
            .unwrap();
    });

    attack(&mut h, &mut b);
    wait_for("p1 reset", || port(sw.handle(), "p1").stats.resets >= 1);
    let p1 = port(sw.handle(), "p1");
    let q = if direction == "tx" {
        &p1.stats.tx
    } else {
        &p1.stats.rx
    };
    assert!(
        q.drops["bad_descriptor"] >= 1,
        "{direction}: {:?}",
        p1.stats
    );
    assert!(
        h.closed(Duration::from_secs(2)),
        "the hostile connection is closed"
    );

    // The other ports carry on.
    b.resolve(ip(3), T).unwrap();
    let peer = SocketAddrV4::new(ip(3).into(), 7);
    let mut buf = [0u8; 2048];
    for i in 0..20u8 {
        b.udp_send_to(peer, 5000, &[i; 32]).unwrap();
        let (_, _, n) = b
            .udp_recv_timeout(&mut buf, T)
            .unwrap()
            .expect("echo after the attack");
        assert_eq!(&buf[..n], &[i; 32]);
    }
    for name in ["p2", "p3"] {
        let p = port(sw.handle(), name);
        assert_eq!(p.stats.resets, 0, "{name} untouched");
        assert!(p.running);
    }
    // The reset port serves a new, well-behaved front-end.
    let mut a = endpoint(&dir, 1, 1);
    assert_eq!(a.resolve(ip(3), T).unwrap(), mac(3));
    stop.store(true, Ordering::SeqCst);
    c.join().unwrap();
}

#[test]
fn every_hostile_chain_on_the_transmit_queue() {
    for &(what, attack) in common::attacks::CHAINS {
        eprintln!("hostile chain: {what}");
        bounded(Duration::from_secs(40), move || {
            hostile_case(move |h, _| attack(h), "tx")
        });
    }
}

#[test]
fn read_only_buffer_on_the_receive_queue() {
    bounded(Duration::from_secs(40), || {
        hostile_case(
            |h, b| {
                // The second offered receive buffer becomes device-readable
                // (the first may be popped ahead already, while p1 idles).
                h.rx_desc(1, h.rx.layout.buffer(1).0, 2048, 0, 0);
                // A broadcast from p2 is flooded to p1, which pops that chain.
                let _ = b.resolve(ip(9), Duration::from_millis(300));
            },
            "rx",
        )
    });
}

#[test]
fn receive_ring_that_stays_full_costs_only_its_port() {
    bounded(Duration::from_secs(40), || {
        let dir = Dir::new("full");
        let sw = switch(&dir, 3);
        // p1 offers its receive buffers once and never takes anything back.
        let mut h = RawFrontend::connect(&dir.sock("p1"));
        h.handshake(Order::Standard);
        wait_for("p1 running", || port(sw.handle(), "p1").running);
        let mut b = endpoint(&dir, 2, 2);
        let c = endpoint(&dir, 3, 3);
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let c = std::thread::spawn(move || {
            let mut c = c;
            c.serve(Duration::from_secs(20), &move || s2.load(Ordering::SeqCst))
                .unwrap();
        });
        let offered = u64::from(common::raw::QSIZE);
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(2).0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        let total = offered + 100;
        let mut sent = 0;
        while sent < total {
            match b.send_frame(&f) {
                Ok(()) => sent += 1,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        wait_for("p1 full", || {
            port(sw.handle(), "p1").stats.rx.drops["ring_full"] == total - offered
        });
        let p1 = port(sw.handle(), "p1");
        assert_eq!(p1.stats.rx.packets, offered);
        assert_eq!(
            p1.stats.resets, 0,
            "a full ring is back-pressure, not an error"
        );
        // b and c are unaffected.
        b.resolve(ip(3), T).unwrap();
        let peer = SocketAddrV4::new(ip(3).into(), 7);
        let mut buf = [0u8; 2048];
        for i in 0..20u8 {
            b.udp_send_to(peer, 5000, &[i; 8]).unwrap();
            let (_, _, n) = b.udp_recv_timeout(&mut buf, T).unwrap().expect("echo");
            assert_eq!(&buf[..n], &[i; 8]);
        }
        stop.store(true, Ordering::SeqCst);
        c.join().unwrap();
        drop(h);
    });
}
