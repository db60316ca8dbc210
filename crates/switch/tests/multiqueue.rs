//! Multiqueue vhost-user ports: what is negotiated (VIRTIO_NET_F_MQ,
//! VHOST_USER_PROTOCOL_F_MQ, GET_QUEUE_NUM), hostile queue indexes and a
//! pair the front-end did not enable (hand-driven front-end), and DPDK's
//! virtio-user with `queues=2` carrying many flows on both pairs (per pair
//! counters), each flow in order.

mod common;

use common::raw::{RawFrontend, QSIZE};
use common::testpmd::{flows_through_macswap, present, Testpmd};
use common::*;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use vm_memory::{Address, Bytes, GuestMemoryBackend};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::ring::{DriverRing, RingLayout};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::protocol::code;

const MQ: u64 = 1 << 22;
const PROTOCOL_MQ: u64 = 1;

/// A switch whose port `p1` offers `pairs` queue pairs, and single-queue
/// ports `p2..=pN`.
fn mq_switch(dir: &Dir, pairs: usize, ports: usize) -> Switch {
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: (1..=ports)
            .map(|i| {
                let mut p = PortSpec::vhost_user(
                    &format!("p{i}"),
                    dir.sock(&format!("p{i}")),
                    SocketMode::Server,
                );
                if i == 1 {
                    p.kind.vhost_user_mut().unwrap().queues =
                        std::num::NonZeroUsize::new(pairs).unwrap();
                }
                p
            })
            .collect(),
    };
    Switch::start(cfg).unwrap()
}

fn state(index: u32, num: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&index.to_le_bytes());
    b[4..].copy_from_slice(&num.to_le_bytes());
    b
}

#[test]
fn a_multiqueue_port_offers_mq_and_a_single_queue_port_does_not() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("mq-offer");
        let sw = mq_switch(&dir, 4, 2);
        let h = RawFrontend::connect(&dir.sock("p1"));
        assert_ne!(h.get_u64(code::GET_FEATURES) & MQ, 0, "VIRTIO_NET_F_MQ");
        assert_ne!(h.get_u64(code::GET_PROTOCOL_FEATURES) & PROTOCOL_MQ, 0);
        h.send(
            code::SET_PROTOCOL_FEATURES,
            0,
            &PROTOCOL_MQ.to_le_bytes(),
            &[],
        )
        .unwrap();
        assert_eq!(h.get_u64(code::GET_QUEUE_NUM), 4);
        let one = RawFrontend::connect(&dir.sock("p2"));
        assert_eq!(one.get_u64(code::GET_FEATURES) & MQ, 0);
        assert_eq!(one.get_u64(code::GET_PROTOCOL_FEATURES) & PROTOCOL_MQ, 0);
        assert_eq!(one.get_u64(code::GET_QUEUE_NUM), 1);
        let p1 = port(sw.handle(), "p1");
        assert_eq!(p1.queues.map(|q| q.pairs), Some(4));
        assert!(port(sw.handle(), "p2").queues.is_none());
    });
}

/// Each per-queue request with an index beyond the port's 2N vrings
/// resets the port (and only it); a new front-end is served afterwards.
#[test]
fn queue_indexes_beyond_the_pairs_reset_the_port() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("mq-index");
        let sw = mq_switch(&dir, 2, 2);
        let ev = EventFd::new(EFD_NONBLOCK).unwrap();
        let fd = [ev.as_raw_fd()];
        type Send = Box<dyn Fn(&RawFrontend)>;
        let cases: Vec<(&str, Send)> = vec![
            (
                "SET_VRING_NUM 4",
                Box::new(|h| h.send(code::SET_VRING_NUM, 0, &state(4, 256), &[]).unwrap()),
            ),
            (
                "SET_VRING_BASE 5",
                Box::new(|h| h.send(code::SET_VRING_BASE, 0, &state(5, 0), &[]).unwrap()),
            ),
            (
                "SET_VRING_ENABLE 16",
                Box::new(|h| {
                    h.send(code::SET_VRING_ENABLE, 0, &state(16, 1), &[])
                        .unwrap()
                }),
            ),
            (
                "GET_VRING_BASE 255",
                Box::new(|h| {
                    h.send(code::GET_VRING_BASE, 0, &state(255, 0), &[])
                        .unwrap()
                }),
            ),
            (
                "SET_VRING_ADDR 4",
                Box::new(|h| {
                    h.send(code::SET_VRING_ADDR, 0, &h.vring_addr_body(4), &[])
                        .unwrap()
                }),
            ),
            (
                "SET_VRING_KICK 4",
                Box::new(move |h| {
                    h.send(code::SET_VRING_KICK, 0, &4u64.to_le_bytes(), &fd)
                        .unwrap()
                }),
            ),
            (
                "SET_VRING_CALL 7",
                Box::new(move |h| {
                    h.send(code::SET_VRING_CALL, 0, &7u64.to_le_bytes(), &fd)
                        .unwrap()
                }),
            ),
            (
                "SET_VRING_ERR 4",
                Box::new(move |h| {
                    h.send(code::SET_VRING_ERR, 0, &4u64.to_le_bytes(), &fd)
                        .unwrap()
                }),
            ),
        ];
        for (n, (what, send)) in cases.iter().enumerate() {
            let h = RawFrontend::connect(&dir.sock("p1"));
            h.send(code::SET_OWNER, 0, &[], &[]).unwrap();
            send(&h);
            assert!(h.closed(T), "{what}: the connection is dropped");
            wait_for(what, || {
                port(sw.handle(), "p1").stats.resets == n as u64 + 1
            });
        }
        // The highest good index is accepted.
        let h = RawFrontend::connect(&dir.sock("p1"));
        h.send(code::SET_VRING_NUM, 0, &state(3, 256), &[]).unwrap();
        let _ = h.get_u64(code::GET_FEATURES);
        assert_eq!(port(sw.handle(), "p1").stats.resets, cases.len() as u64);
        // A single-queue port still refuses index 2.
        let h = RawFrontend::connect(&dir.sock("p2"));
        h.send(code::SET_VRING_NUM, 0, &state(2, 256), &[]).unwrap();
        assert!(h.closed(T));
        wait_for("p2 reset", || port(sw.handle(), "p2").stats.resets == 1);
        assert_eq!(port(sw.handle(), "p1").stats.resets, cases.len() as u64);
    });
}

/// Pair 1's transmit ring holds a frame and is kicked while disabled: the
/// switch leaves it alone. Enabled, the frame is switched and counted on
/// pair 1.
#[test]
fn a_disabled_pair_is_left_alone_until_enabled() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("mq-enable");
        let sw = mq_switch(&dir, 2, 2);
        let mut h = RawFrontend::connect(&dir.sock("p1"));
        h.handshake_with(common::raw::Order::Standard, MQ, PROTOCOL_MQ);
        wait_for("p1 running", || port(sw.handle(), "p1").running);
        let mut b = endpoint(&dir, 2, 2);
        // A third ring in the front-end's memory, past the first pair's.
        let at = h.tx.layout.end().div_ceil(4096) * 4096;
        let layout = RingLayout::at(at, 16, 2048);
        assert!(layout.end() <= h.mem.last_addr().raw_value());
        let mut ring = DriverRing::new(&h.mem, layout, false).expect("ring inside memory");
        let mut f = vec![0x5au8; 64];
        f[..6].copy_from_slice(&mac(2).0);
        f[6..12].copy_from_slice(&mac(1).0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        let id = ring.take().unwrap();
        let buf = layout.buffer(id);
        h.mem.write_slice(&[0u8; 12], buf).unwrap();
        h.mem.write_slice(&f, buf.unchecked_add(12)).unwrap();
        ring.publish(id, 12 + f.len() as u32, false);
        let (kick, call) = (
            EventFd::new(EFD_NONBLOCK).unwrap(),
            EventFd::new(EFD_NONBLOCK).unwrap(),
        );
        let mut addr = vec![0u8; 40];
        addr[..4].copy_from_slice(&3u32.to_le_bytes());
        addr[8..16].copy_from_slice(&(h.base_va + layout.desc).to_le_bytes());
        addr[16..24].copy_from_slice(&(h.base_va + layout.used).to_le_bytes());
        addr[24..32].copy_from_slice(&(h.base_va + layout.avail).to_le_bytes());
        h.send(code::SET_VRING_NUM, 0, &state(3, 16), &[]).unwrap();
        h.send(code::SET_VRING_ADDR, 0, &addr, &[]).unwrap();
        h.send(code::SET_VRING_BASE, 0, &state(3, 0), &[]).unwrap();
        h.send(code::SET_VRING_ENABLE, 0, &state(3, 0), &[])
            .unwrap();
        h.send(
            code::SET_VRING_CALL,
            0,
            &3u64.to_le_bytes(),
            &[call.as_raw_fd()],
        )
        .unwrap();
        h.send(
            code::SET_VRING_KICK,
            0,
            &3u64.to_le_bytes(),
            &[kick.as_raw_fd()],
        )
        .unwrap();
        let _ = h.get_u64(code::GET_FEATURES);
        for _ in 0..20 {
            kick.write(1).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        let p1 = port(sw.handle(), "p1");
        assert_eq!(
            p1.stats.tx.packets, 0,
            "nothing taken from a disabled queue"
        );
        assert_eq!(p1.stats.resets, 0);
        assert_eq!(
            p1.queues.map(|q| q.running),
            Some(1),
            "pair 1 is not running"
        );
        let mut got = [0u8; 2048];
        assert!(b.poll_recv(&mut got).is_none());
        // Enabled: the frame goes, counted on pair 1.
        h.send(code::SET_VRING_ENABLE, 0, &state(3, 1), &[])
            .unwrap();
        kick.write(1).unwrap();
        let deadline = Instant::now() + T;
        let n = loop {
            if let Some(n) = b.poll_recv(&mut got) {
                break n;
            }
            assert!(Instant::now() < deadline, "the frame never came");
            std::thread::sleep(Duration::from_millis(2));
        };
        assert_eq!(&got[..n], &f[..]);
        wait_for("the frame returned", || ring.reap().is_some());
        let p1 = port(sw.handle(), "p1");
        assert_eq!(p1.stats.tx.packets, 1);
        assert_eq!(p1.stats.queue_pairs[1].tx_packets, 1);
        assert_eq!(p1.stats.queue_pairs[0].tx_packets, 0);
        assert_eq!(p1.stats.resets, 0);
        assert_eq!(QSIZE, 256);
    });
}

/// DPDK's virtio-user with two queue pairs (and its control queue, which
/// it serves itself) behind testpmd in macswap mode: frames of 32 flows go
/// to it through the switch, spread over its two receive queues by the
/// flow hash, come back on the transmit queue of the same pair, and every
/// flow's frames return in order. Both pairs' counters, both ways, moved.
#[test]
fn testpmd_with_two_queue_pairs_carries_flows_on_both() {
    if !present() {
        println!("skip: dpdk-testpmd not installed (Debian package dpdk-dev)");
        return;
    }
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("mq-dpdk");
        let sw = mq_switch(&dir, 2, 2);
        let peer = [2, 0, 0, 0, 0, 0x09];
        let mut tp = Testpmd::start(
            &dir.0,
            "mq",
            &dir.sock("p1"),
            2,
            "02:00:00:00:00:09",
            "macswap",
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while port(sw.handle(), "p1").queues.map(|q| q.running) != Some(2) {
            tp.check_alive();
            assert!(
                Instant::now() < deadline,
                "testpmd never enabled both queue pairs: {:?}",
                port(sw.handle(), "p1").queues
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut ep = endpoint(&dir, 2, 2);
        let before = port(sw.handle(), "p1").stats.rx.packets;
        flows_through_macswap(&mut ep, peer, mac(2).0);
        let (flows, rounds) = (32u64, 16u64);
        assert!(port(sw.handle(), "p1").stats.rx.packets - before >= flows * rounds);
        let p1 = port(sw.handle(), "p1");
        let q = &p1.stats.queue_pairs;
        println!("testpmd queues=2: per pair counters {q:?}");
        assert_eq!(q.len(), 2);
        for pair in q {
            assert!(
                pair.rx_packets > 0 && pair.tx_packets > 0,
                "both pairs carry frames both ways: {q:?}"
            );
        }
        assert_eq!(
            q.iter().map(|p| p.rx_packets).sum::<u64>(),
            p1.stats.rx.packets,
            "every delivery counted on a pair"
        );
        assert_eq!(p1.stats.resets, 0);
    });
}
