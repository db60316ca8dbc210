//! A multiqueue port's queue pairs spread over two shared workers
//! (`[switch] workers = 2`): DPDK's virtio-user with `queues=2` behind
//! testpmd in macswap mode, frames of many flows from a single-queue port
//! crossing both pairs both ways (each flow in order), the placement in
//! `port list`, and the front-end leaving and coming back while its pairs
//! are lent; a hand-driven front-end's message calls a lent pair back with
//! its ring state, and the pair is lent again.

mod common;

use common::raw::{Order, RawFrontend};
use common::testpmd::{flows_through_macswap, present, udp_frame, Testpmd};
use common::*;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use vm_memory::{Address, Bytes, GuestMemoryBackend};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vnio_switch::config::{Config, Latency, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::ring::{DriverRing, RingLayout};
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::protocol::code;

const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0x09];
const PEER_MAC: &str = "02:00:00:00:00:09";

/// `workers` shared workers; p1 with two pairs, p2 with one.
fn spread_switch(dir: &Dir, workers: usize) -> Switch {
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            workers,
            ..SwitchConfig::default()
        },
        ports: vec![
            p1,
            PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server),
        ],
    };
    Switch::start(cfg).unwrap()
}

/// Waits until p1's two pairs run on workers 0 and 1.
fn wait_spread(sw: &Switch, tp: &mut Testpmd) {
    wait_spread_while(sw, || tp.check_alive());
}

fn wait_spread_while(sw: &Switch, mut check: impl FnMut()) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let q = port(sw.handle(), "p1").queues.unwrap();
        if q.running == 2 && q.workers == [0, 1] {
            return;
        }
        check();
        assert!(Instant::now() < deadline, "pairs never spread: {q:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Per pair (tx, rx) frames of p1 so far.
fn pair_counts(sw: &Switch) -> Vec<(u64, u64)> {
    port(sw.handle(), "p1")
        .stats
        .queue_pairs
        .iter()
        .map(|p| (p.tx_packets, p.rx_packets))
        .collect()
}

/// 32 flows, 16 rounds from `ep` through testpmd and back, every flow in
/// order; both pairs carried frames both ways meanwhile.
fn exchange(sw: &Switch, ep: &mut Endpoint) {
    let before = pair_counts(sw);
    flows_through_macswap(ep, PEER, mac(2).0);
    let after = pair_counts(sw);
    println!("pairs (tx, rx) before {before:?}, after {after:?}");
    for k in 0..2 {
        assert!(
            after[k].0 > before[k].0 && after[k].1 > before[k].1,
            "pair {k} carried frames both ways: {before:?} -> {after:?}"
        );
    }
}

#[test]
fn pairs_on_two_workers_carry_flows_through_reconnects() {
    if !present() {
        println!("skip: dpdk-testpmd not installed (Debian package dpdk-dev)");
        return;
    }
    bounded(Duration::from_secs(90), || {
        let dir = Dir::new("spread");
        let sw = spread_switch(&dir, 2);
        let mut tp = Testpmd::start(&dir.0, "spread-a", &dir.sock("p1"), 2, PEER_MAC, "macswap");
        wait_spread(&sw, &mut tp);
        let mut ep = endpoint(&dir, 2, 2);
        exchange(&sw, &mut ep);

        // The front-end leaves while a pair is lent, and comes back.
        drop(tp);
        wait_for("p1 disconnected", || !port(sw.handle(), "p1").connected);
        let q = port(sw.handle(), "p1").queues.unwrap();
        assert_eq!(q.workers, [0, 0], "both pairs home: {q:?}");
        let mut tp = Testpmd::start(&dir.0, "spread-b", &dir.sock("p1"), 2, PEER_MAC, "macswap");
        wait_spread(&sw, &mut tp);
        exchange(&sw, &mut ep);
        let p1 = port(sw.handle(), "p1");
        assert_eq!(p1.stats.resets, 0);
        assert_eq!(port(sw.handle(), "p2").stats.resets, 0);
        let q = &p1.stats.queue_pairs;
        assert_eq!(
            q.iter().map(|p| p.rx_packets).sum::<u64>(),
            p1.stats.rx.packets,
            "every delivery counted once, on its pair"
        );
        assert_eq!(
            q.iter().map(|p| p.tx_packets).sum::<u64>(),
            p1.stats.tx.packets
        );
        drop(tp);
    });
}

const MQ: u64 = 1 << 22;
const PROTOCOL_MQ: u64 = 1;

/// Puts a frame from p1 to p2 on `ring` (pair 1's transmit queue).
fn offer_frame(h: &RawFrontend, ring: &mut DriverRing, layout: RingLayout, tag: u8) {
    let mut f = vec![tag; 64];
    f[..6].copy_from_slice(&mac(2).0);
    f[6..12].copy_from_slice(&mac(1).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    let id = ring.take().unwrap();
    let buf = layout.buffer(id);
    h.mem.write_slice(&[0u8; 12], buf).unwrap();
    h.mem.write_slice(&f, buf.unchecked_add(12)).unwrap();
    ring.publish(id, 12 + f.len() as u32, false);
}

/// A hand-driven front-end on p1 with both pairs running, pair 1 lent
/// to worker 1: the front-end, pair 1's transmit ring and its kick (and
/// the other eventfds, to keep).
fn raw_spread(
    sw: &Switch,
    dir: &Dir,
) -> (RawFrontend, RingLayout, DriverRing, EventFd, Vec<EventFd>) {
    let mut h = RawFrontend::connect(&dir.sock("p1"));
    h.handshake_with(Order::Standard, MQ, PROTOCOL_MQ);
    // Pair 1's rings in the front-end's memory, past pair 0's.
    let at = h.tx.layout.end().div_ceil(4096) * 4096;
    let rx1 = RingLayout::at(at, 16, 2048);
    let tx1 = RingLayout::at(rx1.end().div_ceil(4096) * 4096, 16, 2048);
    assert!(tx1.end() <= h.mem.last_addr().raw_value());
    let ring = DriverRing::new(&h.mem, tx1, false).expect("ring inside memory");
    let ev = || EventFd::new(EFD_NONBLOCK).unwrap();
    let (rx_kick, rx_call, kick, call) = (ev(), ev(), ev(), ev());
    h.start_vring(2, rx1, &rx_kick, &rx_call);
    h.start_vring(3, tx1, &kick, &call);
    let _ = h.get_u64(code::GET_FEATURES);
    wait_spread_while(sw, || {});
    (h, tx1, ring, kick, vec![rx_kick, rx_call, call])
}

/// Where [`raw_spread`] put pair 1's receive ring.
fn rx1_layout(h: &RawFrontend) -> RingLayout {
    RingLayout::at(h.tx.layout.end().div_ceil(4096) * 4096, 16, 2048)
}

/// A chain on the lent pair's transmit ring pointing outside the
/// front-end's memory: the holder gives the pair back broken and the
/// owner resets the port (once); the other port and the switch carry on,
/// and the front-end connects again. Its latency cannot change while
/// spread; removed while a pair is lent, it can be added again.
#[test]
fn a_hostile_chain_on_a_lent_pair_resets_only_its_port() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("spread-hostile");
        let sw = spread_switch(&dir, 2);
        let (h, tx1, _ring, kick, _rest) = raw_spread(&sw, &dir);
        let d = vm_memory::GuestAddress(tx1.desc);
        h.mem.write_obj(1u64 << 40, d).unwrap();
        h.mem.write_obj(64u32, d.unchecked_add(8)).unwrap();
        h.mem.write_obj(0u32, d.unchecked_add(12)).unwrap();
        h.mem
            .write_obj(0u16, vm_memory::GuestAddress(tx1.avail + 4))
            .unwrap();
        h.mem
            .write_obj(1u16, vm_memory::GuestAddress(tx1.avail + 2))
            .unwrap();
        kick.write(1).unwrap();
        wait_for("p1 reset", || port(sw.handle(), "p1").stats.resets == 1);
        assert!(h.closed(T), "the front-end's connection is dropped");
        let q = port(sw.handle(), "p1").queues.unwrap();
        assert_eq!(q.workers, [0, 0], "both pairs home: {q:?}");
        // The other port still forwards, and p1 takes a new front-end.
        let mut a = endpoint(&dir, 2, 2);
        let _h2 = raw_spread(&sw, &dir);
        assert_eq!(port(sw.handle(), "p1").stats.resets, 1);
        // A spread port keeps to the shared workers.
        let high = PolicyUpdate {
            latency: Some(Latency::High),
            ..PolicyUpdate::default()
        };
        let e = sw.handle().set_port("p1", high).unwrap_err().to_string();
        assert!(e.contains("spread over the 2 shared workers"), "{e}");
        // Removed while its pair is lent: the pair goes with it, the other
        // port forwards, and the port can be added again and spread.
        sw.handle().del_port("p1").unwrap();
        a.send_frame(&udp_frame([0xff; 6], mac(2).0, 1, 0)).unwrap();
        wait_for("p2's frame taken", || {
            port(sw.handle(), "p2").stats.tx.packets >= 1
        });
        assert_eq!(sw.handle().list().unwrap().len(), 1);
        let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
        p1.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
        sw.handle().add_port(p1).unwrap();
        let _again = raw_spread(&sw, &dir);
        assert_eq!(port(sw.handle(), "p2").stats.resets, 0);
    });
}

/// A hand-driven front-end's pair 1, lent to worker 1, carries a frame;
/// then GET_VRING_BASE for its transmit queue: the pair is called back
/// first, so the answer is where the holder left the ring (1). The ring
/// restarted there, the pair is lent again and carries the next frame.
/// A vring state message's body: index and number.
fn state(index: u32, num: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&index.to_le_bytes());
    b[4..].copy_from_slice(&num.to_le_bytes());
    b
}

#[test]
fn a_message_calls_a_lent_pair_back_with_its_ring_state() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("spread-raw");
        let sw = spread_switch(&dir, 2);
        let (h, tx1, mut ring, kick, _rest) = raw_spread(&sw, &dir);
        let mut b = endpoint(&dir, 2, 2);
        let lends = port(sw.handle(), "p1").queues.unwrap().lends;

        let mut got = [0u8; 2048];
        for (n, tag) in [(1u32, 0x5a), (2, 0x5b)] {
            offer_frame(&h, &mut ring, tx1, tag);
            kick.write(1).unwrap();
            let deadline = Instant::now() + T;
            let len = loop {
                if let Some(len) = b.poll_recv(&mut got) {
                    break len;
                }
                assert!(Instant::now() < deadline, "frame {n} never came");
                std::thread::sleep(Duration::from_millis(2));
            };
            assert_eq!(len, 64);
            assert_eq!(got[20], tag);
            let p1 = port(sw.handle(), "p1");
            assert_eq!(p1.stats.queue_pairs[1].tx_packets, u64::from(n));
            assert_eq!(p1.stats.tx.packets, u64::from(n));
            if n == 2 {
                break;
            }
            // The message waits for the pair; the answer is its state.
            h.send(code::GET_VRING_BASE, 0, &state(3, 0), &[]).unwrap();
            let base = h.reply_u64().unwrap();
            assert_eq!(
                base >> 32,
                1,
                "pair 1's transmit ring resumes after frame 1"
            );
            // Restarted where it stopped, it is lent again.
            h.send(code::SET_VRING_BASE, 0, &state(3, 1), &[]).unwrap();
            let i = 3u64.to_le_bytes();
            h.send(code::SET_VRING_KICK, 0, &i, &[kick.as_raw_fd()])
                .unwrap();
            let deadline = Instant::now() + T;
            while port(sw.handle(), "p1").queues.unwrap().lends == lends {
                assert!(Instant::now() < deadline, "pair 1 never lent again");
                std::thread::sleep(Duration::from_millis(10));
            }
            wait_spread_while(&sw, || {});
        }
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}

/// Frames toward the spread port keep coming while its front-end sends a
/// message every 100 ms (each calls the lent pair back; it is lent again
/// 50 ms later): every frame arrives, on either pair, each flow in order.
#[test]
fn frames_cross_recalls_and_lends_without_loss() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("spread-churn");
        let sw = spread_switch(&dir, 2);
        let (mut h, tx1, mut txring, kick, _rest) = raw_spread(&sw, &dir);
        let rx1 = rx1_layout(&h);
        let mut rxring = DriverRing::new(&h.mem, rx1, false).expect("ring inside memory");
        while let Some(id) = rxring.take() {
            rxring.publish(id, 2048, true);
        }
        let mut b = endpoint(&dir, 2, 2);
        // The switch learns where mac(1) is (and mac(2)).
        offer_frame(&h, &mut txring, tx1, 0x11);
        kick.write(1).unwrap();
        let mut got = [0u8; 2048];
        let deadline = Instant::now() + T;
        while b.poll_recv(&mut got).is_none() {
            assert!(Instant::now() < deadline, "the first frame never came");
        }
        b.send_frame(&udp_frame(mac(1).0, mac(2).0, 99, 0)).unwrap();
        let lends = port(sw.handle(), "p1").queues.unwrap().lends;
        let (flows, bursts) = (8u16, 120u32);
        let mut next = vec![0u32; usize::from(flows)];
        let mut per_pair = [0u32; 2];
        let check = |v: &[u8], next: &mut Vec<u32>| {
            let flow = u16::from_be_bytes([v[34], v[35]]) - 10000;
            if flow == 99 {
                return;
            }
            let seq = u32::from_le_bytes(v[42..46].try_into().unwrap());
            assert_eq!(seq, next[usize::from(flow)], "flow {flow} in order");
            next[usize::from(flow)] += 1;
        };
        for burst in 0..bursts {
            if burst % 10 == 5 {
                // A message: the lent pair comes home before the answer.
                let _ = h.get_u64(code::GET_FEATURES);
            }
            for flow in 0..flows {
                b.send_frame(&udp_frame(mac(1).0, mac(2).0, flow, burst))
                    .unwrap();
            }
            let want: u32 = u32::from(flows) * (burst + 1);
            let until = Instant::now() + T;
            while next.iter().sum::<u32>() < want {
                assert!(
                    Instant::now() < until,
                    "burst {burst}: {} of {want} frames came ({per_pair:?} per pair)",
                    next.iter().sum::<u32>()
                );
                if let Some(v) = h.recv_frame(Duration::ZERO) {
                    check(&v, &mut next);
                    per_pair[0] += 1;
                }
                if let Some((id, len)) = rxring.reap() {
                    let mut v = vec![0u8; len as usize - 12];
                    h.mem
                        .read_slice(&mut v, rx1.buffer(id).unchecked_add(12))
                        .unwrap();
                    rxring.release(id);
                    rxring.publish(id, 2048, true);
                    check(&v, &mut next);
                    per_pair[1] += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let q = port(sw.handle(), "p1").queues.unwrap();
        println!("per pair {per_pair:?}, lends {} -> {}", lends, q.lends);
        assert!(q.lends >= lends + 3, "lent again after the messages: {q:?}");
        assert!(per_pair[0] > 0 && per_pair[1] > 0, "{per_pair:?}");
        assert_eq!(port(sw.handle(), "p1").stats.resets, 0);
    });
}
