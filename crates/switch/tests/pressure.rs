//! Drops and waits where they happen, named: a guest whose second receive
//! queue has only a few buffers has the frames steered there beyond them
//! counted as `ring_full` under its name and that queue (and not the other
//! queue), in the port's counters, `stats`' JSON, Prometheus and the rates
//! `vnio switch perf` shows, also with that pair lent to another worker; and a vNIC held back by an uplink's egress
//! limit, or by an uplink whose transmit ring a slow qdisc keeps full, has
//! the frames left in its transmit ring counted under its name, the
//! second with its holds named as the destination's (root only: a veth).

mod common;

use common::raw::{Order, RawFrontend, BUF};
use common::*;
use std::time::{Duration, Instant};
use vm_memory::{Address, GuestMemoryBackend};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::ring::{DriverRing, RingLayout};
use vnio_switch::port::SocketMode;
use vnio_switch::stats::pressure::pressure;
use vnio_switch::stats::PortStatsSnapshot;

const MQ: u64 = 1 << 22;
const PROTOCOL_MQ: u64 = 1;
/// Receive buffers the guest posts on its second queue.
const FEW: u16 = 4;
/// Frames sent to the guest, over `FLOWS` UDP flows.
const FRAMES: u64 = 200;
const FLOWS: u16 = 64;

/// A UDP frame from mac(2) to mac(1) of flow `flow` (its source port).
fn udp(flow: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&mac(1).0);
    f[6..12].copy_from_slice(&mac(2).0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&50u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 2]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 1]);
    f[34..36].copy_from_slice(&(10_000 + flow).to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

/// Every port's counters, as `stats` answers them on the control socket.
fn stats(c: &mut Client) -> Vec<(String, PortStatsSnapshot)> {
    let v = c.request(&Request::Stats { name: None }).unwrap();
    let m: std::collections::BTreeMap<String, PortStatsSnapshot> =
        serde_json::from_value(v).unwrap();
    m.into_iter().collect()
}

/// The value of the Prometheus line that starts with `what`.
fn metric(c: &mut Client, what: &str) -> u64 {
    let m = c.request(&Request::Metrics).unwrap();
    let text = m.as_str().unwrap();
    text.lines()
        .find(|l| l.starts_with(what))
        .unwrap_or_else(|| panic!("no {what} in {text}"))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_full_receive_queue_counts_its_drops_under_its_name() {
    bounded(Duration::from_secs(60), || full_queue(1));
}

/// The same with the guest's pair 1 lent to a second worker (spreading):
/// its drops are counted where it is served and shown under its queue.
#[test]
fn a_full_receive_queue_on_a_lent_pair_counts_its_drops_under_its_name() {
    bounded(Duration::from_secs(60), || full_queue(2));
}

/// p1, a guest with two pairs, the second's receive queue with FEW
/// buffers, is sent FRAMES frames of FLOWS flows by p2, with `workers`
/// shared workers (two: pair 1 is lent to the second).
fn full_queue(workers: usize) {
    let dir = Dir::new(&format!("pressure-rx{workers}"));
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
    let p2 = PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server);
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            workers,
            ..SwitchConfig::default()
        },
        ports: vec![p1, p2],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut c = Client::connect(sw.control_path()).unwrap();
    // The guest: pair 0 with a full receive ring (256 buffers), pair
    // 1's receive queue with FEW buffers.
    let mut h = RawFrontend::connect(&dir.sock("p1"));
    h.handshake_with(Order::Standard, MQ, PROTOCOL_MQ);
    let (mut rx1, _fds) = pair_one_with_few_buffers(&h);
    let spread = if workers > 1 { vec![0, 1] } else { Vec::new() };
    wait_for("both pairs running where they should", || {
        let q = port(sw.handle(), "p1").queues.unwrap();
        q.running == 2 && (workers == 1 || q.workers == spread)
    });
    let mut e2 = endpoint(&dir, 2, 2);
    // The guest's address first, so the frames to it are unicast.
    h.send_frame(&frame(mac(2).0, 1, 0x88b5));
    let mut buf = [0u8; 2048];
    wait_for("p2 got the guest's frame", || {
        e2.poll_recv(&mut buf).is_some()
    });
    let before = stats(&mut c);
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < FRAMES {
        if e2.send_frame(&udp(sent as u16 % FLOWS)).is_ok() {
            sent += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    wait_for("every frame delivered or dropped", || {
        let s = port(sw.handle(), "p1").stats;
        s.rx.packets + s.rx.drops["ring_full"] >= FRAMES
    });
    let p = port(sw.handle(), "p1").stats;
    println!(
        "p1: pairs {:?} rx queues {:?} in {:?}",
        p.queue_pairs,
        p.rx_queues,
        t0.elapsed()
    );
    assert_eq!(p.rx.packets + p.rx.drops["ring_full"], FRAMES);
    assert_eq!(p.rx_queues.len(), 2);
    let (q0, q1) = (&p.rx_queues[0], &p.rx_queues[1]);
    assert_eq!(q0.ring_full, 0, "pair 0's ring had room: {p:?}");
    assert_eq!(
        p.queue_pairs[1].rx_packets,
        u64::from(FEW),
        "pair 1 took as many as it had buffers"
    );
    assert!(q1.ring_full > 0, "frames were steered to pair 1: {p:?}");
    assert_eq!(q1.ring_full, p.rx.drops["ring_full"], "every drop named");
    assert_eq!(
        p.queue_pairs[0].rx_packets + p.queue_pairs[1].rx_packets + q1.ring_full,
        FRAMES
    );
    // The guest has them: FEW used entries in pair 1's ring, the rest
    // of the delivered ones in pair 0's.
    let mut used1 = 0;
    while rx1.reap().is_some() {
        used1 += 1;
    }
    assert_eq!(used1, FEW);
    let mut got0 = 0;
    while h.recv_frame(Duration::from_millis(50)).is_some() {
        got0 += 1;
    }
    assert_eq!(got0, p.queue_pairs[0].rx_packets);
    named_on_the_control_socket(&mut c, &before, q1.ring_full);
    assert_eq!(p.resets, 0);
}

/// Starts pair 1 of `h`: its receive ring with FEW buffers (returned, to
/// read what the switch put there), its transmit ring empty; the eventfds
/// live as long as the pair runs.
fn pair_one_with_few_buffers(h: &RawFrontend) -> (DriverRing, Vec<EventFd>) {
    let at = h.tx.layout.end().div_ceil(4096) * 4096;
    let layout = RingLayout::at(at, 16, BUF);
    assert!(layout.end() <= h.mem.last_addr().raw_value());
    let mut rx1 = DriverRing::new(&h.mem, layout, false).expect("ring inside memory");
    for _ in 0..FEW {
        let id = rx1.take().unwrap();
        rx1.publish(id, BUF, true);
    }
    let (kick, call) = (
        EventFd::new(EFD_NONBLOCK).unwrap(),
        EventFd::new(EFD_NONBLOCK).unwrap(),
    );
    h.start_vring(2, layout, &kick, &call);
    // Pair 1's transmit queue (nothing sent on it): the pair runs.
    let tx1 = RingLayout::at(layout.end().div_ceil(4096) * 4096, 16, BUF);
    assert!(tx1.end() <= h.mem.last_addr().raw_value());
    let _tx1 = DriverRing::new(&h.mem, tx1, false).expect("ring inside memory");
    let (kick1, call1) = (
        EventFd::new(EFD_NONBLOCK).unwrap(),
        EventFd::new(EFD_NONBLOCK).unwrap(),
    );
    h.start_vring(3, tx1, &kick1, &call1);
    (rx1, vec![kick, call, kick1, call1])
}

/// p1's `ring_full` drops, `q1` on queue 1 and none on queue 0, as the
/// control socket shows them: `stats`' JSON, Prometheus, and the rates
/// `vnio switch perf` computes since the reading `before`.
fn named_on_the_control_socket(c: &mut Client, before: &[(String, PortStatsSnapshot)], q1: u64) {
    let v = c
        .request(&Request::Stats {
            name: Some("p1".into()),
        })
        .unwrap();
    assert_eq!(v["p1"]["rx_queues"][1]["ring_full"], q1, "{v}");
    assert_eq!(v["p1"]["rx_queues"][0]["ring_full"], 0, "{v}");
    assert_eq!(
        metric(c, "vnio_switch_rx_ring_full_total{port=\"p1\",queue=\"1\"}"),
        q1
    );
    assert_eq!(
        metric(c, "vnio_switch_rx_ring_full_total{port=\"p1\",queue=\"0\"}"),
        0
    );
    assert_eq!(
        metric(c, "vnio_switch_rx_ring_full_total{port=\"p2\",queue=\"0\"}"),
        0
    );
    // And as `vnio switch perf` reads it: a count and a rate over the
    // interval between two readings.
    let now = stats(c);
    let rates = pressure(&now, before);
    let r = rates.iter().find(|r| r.port == "p1").unwrap();
    assert_eq!(r.rx_ring_full[1].ring_full.count, q1);
    assert_eq!(r.rx_ring_full[0].ring_full.count, 0);
    let span = r.span_ns as f64 / 1e9;
    assert!(span > 0.0 && span < 60.0, "{r:?}");
    assert!((r.rx_ring_full[1].ring_full.per_sec * span - q1 as f64).abs() < 1e-6);
    assert!(!rates.iter().find(|r| r.port == "p2").unwrap().any());
}

/// What holds p1 back.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Slow {
    /// Its 10 Mbit/s egress limit.
    Limit,
    /// The uplink's interface, behind a 10 Mbit/s token bucket with a deep
    /// queue: the kernel keeps the frames' transmit slots until the bucket
    /// lets them go, and the uplink's transmit ring fills.
    Qdisc,
}

/// p1 sends full-size frames to a host behind the uplink as fast as its
/// ring takes them and `slow` holds it back: the switch leaves the frames
/// it cannot send in p1's transmit ring, counted under p1's name (and
/// nothing under p2's, which sends nothing); held by the uplink's full
/// ring, the holds say so.
fn held_back(slow: Slow) {
    use vnio_switch::port::uplink::{UplinkOptions, UplinkPort, HDR_LEN};
    const FAR: [u8; 6] = [2, 0, 0, 0, 0, 0x77];
    let dir = Dir::new("pressure-held");
    let (_veth, a, b) = veth_up(if slow == Slow::Limit { "vnp" } else { "vnq" });
    let up = PortSpec::uplink("up", &a);
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    match slow {
        Slow::Limit => p1.egress.limit_mbps = Some(10),
        Slow::Qdisc => {
            let tc = std::process::Command::new("tc")
                .args(["qdisc", "add", "dev", &a, "root", "tbf"])
                .args(["rate", "10mbit", "burst", "16kb", "limit", "64mb"])
                .status()
                .expect("tc runs");
            assert!(tc.success(), "tc qdisc add on {a}");
        }
    }
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
    let mut c = Client::connect(sw.control_path()).unwrap();
    let mut e1 = endpoint(&dir, 1, 1);
    let _e2 = endpoint(&dir, 2, 2);
    // The far end announces itself: frames to it are unicast (a flood
    // past the limit would be dropped, not held).
    let mut far = UplinkPort::open(&b, &UplinkOptions::default()).unwrap();
    let mut hello = vec![0u8; HDR_LEN + 60];
    hello[HDR_LEN..HDR_LEN + 6].copy_from_slice(&[0xff; 6]);
    hello[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&FAR);
    hello[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x88, 0xb5]);
    assert!(far.send_frame(&hello));
    wait_for("the far end learned", || {
        sw.handle().fdb().unwrap().iter().any(|e| e.mac.0 == FAR)
    });
    let before = stats(&mut c);
    let mut f = vec![0x42u8; 1514];
    f[..6].copy_from_slice(&FAR);
    f[6..12].copy_from_slice(&mac(1).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    // 10 Mbit/s is some 800 frames a second: a second of sending keeps
    // the ring full.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        if e1.send_frame(&f).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let now = stats(&mut c);
    let p1 = &now.iter().find(|(n, _)| n == "p1").unwrap().1;
    let p2 = &now.iter().find(|(n, _)| n == "p2").unwrap().1;
    println!(
        "{slow:?}: p1 tx {} held frames {} in {} rounds ({} with the destination full)",
        p1.tx.packets, p1.tx.held_frames, p1.tx.egress_waits, p1.tx.held_dest_full
    );
    assert!(p1.tx.egress_waits > 0, "p1 was held back: {p1:?}");
    assert!(
        p1.tx.held_frames >= p1.tx.egress_waits,
        "every hold leaves a frame at least: {p1:?}"
    );
    assert!(p1.tx.held_dest_full <= p1.tx.egress_waits);
    if slow == Slow::Qdisc {
        assert!(p1.tx.held_dest_full > 0, "held by the full ring: {p1:?}");
    }
    assert_eq!((p2.tx.held_frames, p2.tx.egress_waits), (0, 0));
    let v = c
        .request(&Request::Stats {
            name: Some("p1".into()),
        })
        .unwrap();
    assert!(v["p1"]["tx"]["held_frames"].as_u64().unwrap() >= p1.tx.held_frames);
    assert!(metric(&mut c, "vnio_switch_held_frames_total{port=\"p1\"}") >= p1.tx.held_frames);
    assert_eq!(
        metric(&mut c, "vnio_switch_held_frames_total{port=\"p2\"}"),
        0
    );
    let rates = pressure(&now, &before);
    let r = rates.iter().find(|r| r.port == "p1").unwrap();
    assert!(
        r.held_frames.count > 0 && r.held_frames.per_sec > 0.0,
        "{r:?}"
    );
    assert!(r.any());
    assert!(!rates.iter().find(|r| r.port == "p2").unwrap().any());
}

#[test]
fn a_vnic_held_back_counts_what_it_left_in_its_ring() {
    if !vnio_lab::is_root() {
        println!("skip: the egress test needs root");
        return;
    }
    bounded(Duration::from_secs(60), || held_back(Slow::Limit));
}

#[test]
fn a_vnic_held_back_by_a_slow_uplink_says_the_destination_was_full() {
    if !vnio_lab::is_root() || std::process::Command::new("tc").arg("-V").output().is_err() {
        println!("skip: needs root and tc (iproute2)");
        return;
    }
    bounded(Duration::from_secs(60), || held_back(Slow::Qdisc));
}
