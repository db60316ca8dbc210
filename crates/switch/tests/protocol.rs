//! vhost-user protocol handling against hand-driven front-ends: QEMU 7.2's
//! request order, REPLY_ACK, garbage and truncated messages, a front-end
//! that disappears mid-traffic.

mod common;

use common::raw::{Order, RawFrontend};
use common::*;
use std::io::Write;
use std::time::{Duration, Instant};
use vnio_switch::vhost_user::protocol::{code, FLAG_NEED_REPLY};

fn frame(dst: [u8; 6], src: [u8; 6], fill: u8) -> Vec<u8> {
    let mut f = vec![fill; 64];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

fn exchange(order: Order) {
    let dir = Dir::new("order");
    let sw = switch(&dir, 2);
    let mut h = RawFrontend::connect(&dir.sock("p1"));
    h.handshake(order);
    wait_for("p1 running", || port(sw.handle(), "p1").running);
    let mut b = endpoint(&dir, 2, 2);
    // raw -> endpoint (broadcast), endpoint -> raw (unicast to the learned MAC).
    let f = frame([0xff; 6], mac(1).0, 0xaa);
    h.send_frame(&f);
    let mut buf = [0u8; 2048];
    let deadline = Instant::now() + T;
    let n = loop {
        if let Some(n) = b.poll_recv(&mut buf) {
            break n;
        }
        assert!(Instant::now() < deadline, "no frame at the endpoint");
        b.wait(Duration::from_millis(20)).unwrap();
    };
    assert_eq!(&buf[..n], &f[..]);
    let g = frame(mac(1).0, mac(2).0, 0xbb);
    b.send_frame(&g).unwrap();
    assert_eq!(h.recv_frame(T).expect("frame at the raw front-end"), g);
}

#[test]
fn standard_order_carries_traffic() {
    bounded(Duration::from_secs(30), || exchange(Order::Standard));
}

#[test]
fn qemu_7_2_order_enable_before_features_carries_traffic() {
    bounded(Duration::from_secs(30), || exchange(Order::Qemu72));
}

#[test]
fn reply_ack_for_supported_and_unsupported_requests() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("ack");
        let sw = switch(&dir, 1);
        let h = RawFrontend::connect(&dir.sock("p1"));
        let pf = h.get_u64(code::GET_PROTOCOL_FEATURES);
        assert!(pf & (1 << 3) != 0, "REPLY_ACK offered");
        h.send(
            code::SET_FEATURES,
            0,
            &(1u64 << 30 | 1 << 32).to_le_bytes(),
            &[],
        )
        .unwrap();
        h.send(
            code::SET_PROTOCOL_FEATURES,
            0,
            &(1u64 << 3).to_le_bytes(),
            &[],
        )
        .unwrap();
        h.send(code::SET_OWNER, FLAG_NEED_REPLY, &[], &[]).unwrap();
        assert_eq!(h.reply_u64().unwrap(), 0, "success ack");
        // SET_CONFIG is not implemented: a failure ack, and the connection stays.
        h.send(code::SET_CONFIG, FLAG_NEED_REPLY, &[0u8; 16], &[])
            .unwrap();
        assert_ne!(h.reply_u64().unwrap(), 0, "failure ack");
        assert_eq!(h.get_u64(code::GET_QUEUE_NUM), 1);
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}

#[test]
fn get_vring_base_stops_the_ring_and_reports_its_position() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("base");
        let sw = switch(&dir, 2);
        let mut h = RawFrontend::connect(&dir.sock("p1"));
        h.handshake(Order::Standard);
        wait_for("p1 running", || port(sw.handle(), "p1").running);
        for i in 0..3 {
            h.send_frame(&frame([0xff; 6], mac(1).0, i));
        }
        wait_for("three frames", || {
            port(sw.handle(), "p1").stats.tx.packets == 3
        });
        let mut st = [0u8; 8];
        st[..4].copy_from_slice(&1u32.to_le_bytes());
        h.send(code::GET_VRING_BASE, 0, &st, &[]).unwrap();
        let mut b = [0u8; 20];
        std::io::Read::read_exact(&mut &h.sock, &mut b).unwrap();
        assert_eq!(
            u32::from_le_bytes(b[16..20].try_into().unwrap()),
            3,
            "next available index"
        );
        assert!(
            !port(sw.handle(), "p1").running,
            "stopped until the next SET_VRING_KICK"
        );
    });
}

fn broken_connection(bytes: &[u8]) {
    let dir = Dir::new("garbage");
    let sw = switch(&dir, 1);
    let h = RawFrontend::connect(&dir.sock("p1"));
    (&h.sock).write_all(bytes).unwrap();
    drop(h);
    wait_for("p1 reset", || port(sw.handle(), "p1").stats.resets >= 1);
    // The port takes a new front-end.
    let mut a = endpoint(&dir, 1, 1);
    a.send_frame(&frame([0xff; 6], mac(1).0, 1)).unwrap();
    wait_for("frame counted", || {
        port(sw.handle(), "p1").stats.tx.packets == 1
    });
}

#[test]
fn garbage_header_resets_only_the_port() {
    bounded(Duration::from_secs(30), || broken_connection(&[0xde; 12]));
}

#[test]
fn truncated_message_then_disconnect() {
    bounded(Duration::from_secs(30), || {
        let m = vnio_switch::vhost_user::protocol::encode_request(
            code::SET_FEATURES,
            0,
            &[1, 2, 3, 4, 5, 6, 7, 8],
        );
        broken_connection(&m[..15]);
    });
}

#[test]
fn oversized_body_resets_the_port() {
    bounded(Duration::from_secs(30), || {
        let mut m = vnio_switch::vhost_user::protocol::encode_request(code::SET_FEATURES, 0, &[]);
        m[8..12].copy_from_slice(&(1u32 << 20).to_le_bytes());
        broken_connection(&m);
    });
}

#[test]
fn frontend_disappearing_mid_traffic_costs_only_its_port() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("vanish");
        let sw = switch(&dir, 3);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let c = endpoint(&dir, 3, 3);
        // b learns a, then a vanishes while b keeps sending to it.
        a.send_frame(&frame([0xff; 6], mac(1).0, 0)).unwrap();
        wait_for("a learned", || {
            sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(1))
        });
        drop(a);
        for i in 0..50 {
            b.send_frame(&frame(mac(1).0, mac(2).0, i)).unwrap();
        }
        wait_for("p1 down", || !port(sw.handle(), "p1").connected);
        wait_for("b's frames handled", || {
            port(sw.handle(), "p2").stats.tx.packets == 50
        });
        // b and c still talk.
        let mut c = c;
        let g = frame(mac(3).0, mac(2).0, 7);
        b.send_frame(&g).unwrap();
        let mut buf = [0u8; 2048];
        let deadline = Instant::now() + T;
        loop {
            if let Some(n) = c.poll_recv(&mut buf) {
                if buf[..n] == g[..] {
                    break;
                }
            }
            assert!(Instant::now() < deadline);
            c.wait(Duration::from_millis(20)).unwrap();
        }
        assert_eq!(
            port(sw.handle(), "p2").stats.resets + port(sw.handle(), "p3").stats.resets,
            0
        );
    });
}
