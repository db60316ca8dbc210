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
use std::time::{Duration, Instant};
use vnio_switch::daemon::Switch;
use vnio_switch::worker::PortInfo;

const F_NEXT: u16 = 1;
const F_WRITE: u16 = 2;
const F_INDIRECT: u16 = 4;

fn port(sw: &Switch, name: &str) -> PortInfo {
    sw.handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// p1 is hostile, p2 and p3 are healthy endpoints.
fn hostile_case(
    attack: impl FnOnce(&mut RawFrontend, &mut vnio_switch::endpoint::Endpoint),
    direction: &str,
) {
    let dir = Dir::new("hostile");
    let sw = switch(&dir, 3);
    let mut h = RawFrontend::connect(&dir.sock("p1"));
    h.handshake(Order::Standard);
    wait_for("p1 running", || port(&sw, "p1").running);
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
    wait_for("p1 reset", || port(&sw, "p1").stats.resets >= 1);
    let p1 = port(&sw, "p1");
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
        let p = port(&sw, name);
        assert_eq!(p.stats.resets, 0, "{name} untouched");
        assert!(p.running);
    }
    // The reset port serves a new, well-behaved front-end.
    let mut a = endpoint(&dir, 1, 1);
    assert_eq!(a.resolve(ip(3), T).unwrap(), mac(3));
    stop.store(true, Ordering::SeqCst);
    c.join().unwrap();
}

fn tx_attack(f: impl FnOnce(&RawFrontend) + Send + 'static) {
    bounded(Duration::from_secs(40), move || {
        hostile_case(move |h, _| f(h), "tx")
    });
}

#[test]
fn buffer_outside_guest_memory() {
    tx_attack(|h| {
        h.tx_desc(0, 1 << 40, 64, 0, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn buffer_straddling_the_end_of_memory() {
    tx_attack(|h| {
        let end = h.tx.layout.end().div_ceil(1 << 20) * (1 << 20);
        h.tx_desc(0, end - 16, 64, 0, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn descriptor_loop() {
    tx_attack(|h| {
        let b = h.tx.layout.buffer(0).0;
        h.tx_desc(0, b, 64, F_NEXT, 1);
        h.tx_desc(1, b, 64, F_NEXT, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn over_long_chain() {
    tx_attack(|h| {
        let b = h.tx.layout.buffer(0).0;
        for i in 0..100u16 {
            h.tx_desc(i, b, 16, F_NEXT, i + 1);
        }
        h.tx_desc(100, b, 16, 0, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn wrong_direction_on_transmit() {
    tx_attack(|h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, F_WRITE, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn zero_length_buffer() {
    tx_attack(|h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 0, 0, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn indirect_without_the_feature() {
    tx_attack(|h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, F_INDIRECT, 0);
        h.tx_offer(0, 0, 1);
    });
}

#[test]
fn available_index_jump() {
    tx_attack(|h| {
        h.tx_desc(0, h.tx.layout.buffer(0).0, 64, 0, 0);
        h.tx_offer(0, 0, 1000);
    });
}

#[test]
fn head_index_outside_the_queue() {
    tx_attack(|h| h.tx_offer(0, 999, 1));
}

#[test]
fn read_only_buffer_on_the_receive_queue() {
    bounded(Duration::from_secs(40), || {
        hostile_case(
            |h, b| {
                // The first offered receive buffer becomes device-readable.
                h.rx_desc(0, h.rx.layout.buffer(0).0, 2048, 0, 0);
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
        wait_for("p1 running", || port(&sw, "p1").running);
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
            port(&sw, "p1").stats.rx.drops["ring_full"] == total - offered
        });
        let p1 = port(&sw, "p1");
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
