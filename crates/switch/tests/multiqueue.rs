//! Multiqueue vhost-user ports: what is negotiated (VIRTIO_NET_F_MQ,
//! VHOST_USER_PROTOCOL_F_MQ, GET_QUEUE_NUM), hostile queue indexes and a
//! pair the front-end did not enable (hand-driven front-end), and DPDK's
//! virtio-user with `queues=2` carrying many flows on both pairs (per pair
//! counters), each flow in order.

mod common;

use common::raw::{RawFrontend, QSIZE};
use common::*;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
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
                    p.queues = Some(pairs);
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

/// testpmd and its EAL file prefix.
struct Testpmd(Child, String);

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(std::path::Path::new("/var/run/dpdk").join(&self.1));
    }
}

/// An IPv4/UDP frame of flow `flow` (its source port), sequence `seq` in
/// the payload.
fn udp_frame(dst: [u8; 6], src: [u8; 6], flow: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 2]);
    f[30..34].copy_from_slice(&[10, 0, 0, 9]);
    f[34..36].copy_from_slice(&(10000 + flow).to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_le_bytes());
    f
}

/// DPDK's virtio-user with two queue pairs (and its control queue, which
/// it serves itself) behind testpmd in macswap mode: frames of 32 flows go
/// to it through the switch, spread over its two receive queues by the
/// flow hash, come back on the transmit queue of the same pair, and every
/// flow's frames return in order. Both pairs' counters, both ways, moved.
#[test]
fn testpmd_with_two_queue_pairs_carries_flows_on_both() {
    let present = Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !present {
        println!("skip: dpdk-testpmd not installed (Debian package dpdk-dev)");
        return;
    }
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("mq-dpdk");
        let sw = mq_switch(&dir, 2, 2);
        let peer = [2, 0, 0, 0, 0, 0x09];
        let vdev = format!(
            "net_virtio_user0,path={},queues=2,cq=1,queue_size=256,mac=02:00:00:00:00:09",
            dir.sock("p1").display()
        );
        let prefix = format!("vnio-test-{}-mq", std::process::id());
        let child = Command::new("timeout")
            .args(["120", "dpdk-testpmd"])
            .args([
                "--lcores",
                "0@0,1@0",
                "--no-pci",
                "--no-huge",
                "-m",
                "512",
                "--file-prefix",
                &prefix,
                "--vdev",
                &vdev,
            ])
            .args([
                "--",
                "--forward-mode=macswap",
                "--rxq=2",
                "--txq=2",
                "--total-num-mbufs=4096",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut tp = Testpmd(child, prefix);
        let deadline = Instant::now() + Duration::from_secs(30);
        while port(sw.handle(), "p1").queues.map(|q| q.running) != Some(2) {
            if let Ok(Some(status)) = tp.0.try_wait() {
                let mut err = String::new();
                let _ = tp.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
                let mut out = String::new();
                let _ = tp.0.stdout.take().map(|mut e| e.read_to_string(&mut out));
                panic!("testpmd exited ({status}): {err}\n{out}");
            }
            assert!(
                Instant::now() < deadline,
                "testpmd never enabled both queue pairs: {:?}",
                port(sw.handle(), "p1").queues
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut ep = endpoint(&dir, 2, 2);
        let mut buf = [0u8; 2048];
        // testpmd's forwarding starts a little after its queues: a warm-up
        // frame until one comes back.
        let start = Instant::now();
        'warm: loop {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "testpmd never returned a frame"
            );
            ep.send_frame(&udp_frame(peer, mac(2).0, 999, 0)).unwrap();
            let until = Instant::now() + Duration::from_millis(200);
            while Instant::now() < until {
                if ep.poll_recv(&mut buf).is_some() {
                    break 'warm;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        while ep.poll_recv(&mut buf).is_some() {}
        let before = port(sw.handle(), "p1").stats.rx.packets;
        // Bursts of one frame per flow; every flow's frames come back in order.
        let (flows, rounds) = (32u16, 16u32);
        let mut next = vec![0u32; usize::from(flows)];
        for seq in 0..rounds {
            for flow in 0..flows {
                ep.send_frame(&udp_frame(peer, mac(2).0, flow, seq))
                    .unwrap();
            }
            let mut got = 0;
            let until = Instant::now() + T;
            while got < flows {
                assert!(
                    Instant::now() < until,
                    "round {seq}: {got} of {flows} frames back"
                );
                let Some(n) = ep.poll_recv(&mut buf) else {
                    std::hint::spin_loop();
                    continue;
                };
                assert_eq!(n, 64);
                assert_eq!(&buf[..6], &mac(2).0, "destination swapped back to us");
                let flow = u16::from_be_bytes([buf[34], buf[35]]) - 10000;
                let s = u32::from_le_bytes(buf[42..46].try_into().unwrap());
                assert_eq!(s, next[usize::from(flow)], "flow {flow} in order");
                next[usize::from(flow)] += 1;
                got += 1;
            }
        }
        assert!(
            port(sw.handle(), "p1").stats.rx.packets - before
                >= u64::from(flows) * u64::from(rounds)
        );
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
        drop(tp.0.stdin.take());
    });
}
