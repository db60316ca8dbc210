//! VHOST_USER_SEND_RARP, as QEMU sends it for a migrated guest without
//! VIRTIO_NET_F_GUEST_ANNOUNCE: the switch broadcasts the RARP request from
//! the guest's MAC on its segment and points its own forwarding table at the
//! guest's new port at once, so frames to the guest go there, not to where
//! the guest was. Only from a front-end that negotiated
//! VHOST_USER_PROTOCOL_F_RARP: from any other the request resets the port
//! and announces nothing.

mod common;

use common::raw::{Order, RawFrontend};
use common::*;
use std::time::Duration;
use vnio_switch::vhost_user::protocol::code;

/// VHOST_USER_PROTOCOL_F_RARP.
const F_RARP: u64 = 1 << 2;
const ETHERTYPE_RARP: [u8; 2] = [0x80, 0x35];

/// A 64-byte frame from `src` to `dst`.
fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0x33u8; 64];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

#[test]
fn send_rarp_announces_the_guest_and_moves_its_address_at_once() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("announce");
        let sw = switch(&dir, 3);
        // The guest (mac(3)) runs behind p3; p2 talks to it; p1 is where
        // it arrives after a migration.
        let mut old = endpoint(&dir, 3, 3);
        let mut peer = endpoint(&dir, 2, 2);
        let mut new = RawFrontend::connect(&dir.sock("p1"));
        new.handshake_with(Order::Standard, 0, F_RARP);
        wait_for("p1 running", || port(sw.handle(), "p1").running);
        let mut buf = [0u8; 2048];
        old.send_frame(&frame(mac(2).0, mac(3).0)).unwrap();
        wait_for("p2 hears the guest", || peer.poll_recv(&mut buf).is_some());
        let _ = new.recv_frame(Duration::from_secs(2)); // that first frame flooded
        peer.send_frame(&frame(mac(3).0, mac(2).0)).unwrap();
        wait_for("the guest hears p2 at its old port", || {
            old.poll_recv(&mut buf).is_some()
        });

        // The guest resumed behind p1: QEMU asks the switch to announce it.
        let mut body = [0u8; 8];
        body[..6].copy_from_slice(&mac(3).0);
        new.send(code::SEND_RARP, 0, &body, &[]).unwrap();
        let mut rarp = None;
        wait_for("p2 receives the announcement", || {
            while let Some(n) = peer.poll_recv(&mut buf) {
                if buf[12..14] == ETHERTYPE_RARP {
                    rarp = Some(buf[..n].to_vec());
                }
            }
            rarp.is_some()
        });
        let rarp = rarp.unwrap();
        assert_eq!(&rarp[..6], &[0xff; 6], "a broadcast");
        assert_eq!(&rarp[6..12], &mac(3).0, "from the guest's MAC");
        assert_eq!(&rarp[20..22], &[0, 3], "a reverse request");
        assert_eq!(&rarp[22..28], &mac(3).0, "the sender is the guest");

        // The next frame to the guest goes to its new port only.
        peer.send_frame(&frame(mac(3).0, mac(2).0)).unwrap();
        let got = new
            .recv_frame(Duration::from_secs(5))
            .expect("the frame reaches the guest's new port");
        assert_eq!(&got[..6], &mac(3).0);
        std::thread::sleep(Duration::from_millis(200));
        while let Some(n) = old.poll_recv(&mut buf) {
            assert_ne!(&buf[..6], &mac(3).0[..], "not the old port ({n} bytes)");
        }
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}

#[test]
fn send_rarp_without_the_protocol_feature_is_refused() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("announce-unasked");
        let sw = switch(&dir, 2);
        let mut peer = endpoint(&dir, 2, 2);
        let mut g = RawFrontend::connect(&dir.sock("p1"));
        g.handshake_with(Order::Standard, 0, 0);
        wait_for("p1 running", || port(sw.handle(), "p1").running);
        // A MAC that is p2's neighbour's: announced, it would move there.
        let mut body = [0u8; 8];
        body[..6].copy_from_slice(&mac(3).0);
        g.send(code::SEND_RARP, 0, &body, &[]).unwrap();
        wait_for("p1 reset", || port(sw.handle(), "p1").stats.resets > 0);
        assert!(g.closed(T), "connection closed");
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = [0u8; 2048];
        while let Some(n) = peer.poll_recv(&mut buf) {
            assert_ne!(buf[12..14], ETHERTYPE_RARP, "announced ({n} bytes)");
        }
        assert_eq!(port(sw.handle(), "p2").stats.resets, 0);
    });
}
