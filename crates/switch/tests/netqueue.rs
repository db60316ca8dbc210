//! Per-vNIC uplink receive queues against the real kernel (root only): a
//! veth made through netlink, an uplink with three queues, three vNICs
//! (poll-mode endpoints). Frames from the wire land in the queue of their
//! destination (configured MAC, or the first one learned), the rest in the
//! shared queue; a queue freed by a leaving port goes to the next vNIC.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::netqueue::QueueRequest;
use vnio_switch::port::uplink::{UplinkPort, HDR_LEN};
use vnio_switch::port::SocketMode;
use vnio_switch::stats::UplinkQueueSnapshot;
use vnio_switch::wire::EthernetAddress;

const FAR: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

fn queues(sw: &Switch) -> Vec<UplinkQueueSnapshot> {
    sw.handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "up")
        .unwrap()
        .stats
        .uplink_queues
}

/// Sends `n` frames from the far end to `to` (at most 100 in flight: the
/// endpoint's ring holds 256); waits until `ep` got them all.
fn flood(far: &mut UplinkPort, to: EthernetAddress, n: usize, ep: &mut Endpoint) {
    let mut f = vec![0u8; HDR_LEN + 60];
    f[HDR_LEN..HDR_LEN + 6].copy_from_slice(&to.0);
    f[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&FAR);
    f[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x88, 0xb5]);
    let mut buf = [0u8; 2048];
    let (mut got, mut sent, deadline) = (0, 0, Instant::now() + T);
    while got < n {
        while sent < n && sent - got < 100 {
            assert!(far.send_frame(&f));
            sent += 1;
        }
        match ep.poll_recv(&mut buf) {
            Some(m) if m >= 12 && buf[6..12] == FAR => got += 1,
            Some(_) => {}
            None => {
                assert!(Instant::now() < deadline, "{got} of {n} frames arrived");
                std::thread::yield_now();
            }
        }
    }
}

fn announce(ep: &mut Endpoint) {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&FAR);
    f[6..12].copy_from_slice(&ep.mac().0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    ep.send_frame(&f).unwrap();
}

fn run() {
    let dir = Dir::new("netq");
    let (_veth, a, b) = veth_up("vnq");
    let mut up = PortSpec::uplink("up", &a);
    up.kind.uplink_mut().unwrap().queues = std::num::NonZeroUsize::new(3).unwrap();
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.mac = Some(mac(1).to_string());
    let p2 = PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server);
    let mut p3 = PortSpec::vhost_user("p3", dir.sock("p3"), SocketMode::Server);
    p3.uplink_queue = Some(QueueRequest::Auto);
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![p1, up, p2, p3],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut e1 = endpoint(&dir, 1, 1);
    let mut e2 = endpoint(&dir, 2, 2);
    let mut e3 = endpoint(&dir, 3, 3);
    let mut far = UplinkPort::new(&b).unwrap();

    // p1's MAC is configured: queue 1 from the start. p2 owns queue 2 but
    // its MAC is learned from its first frame; p3 found no queue.
    let q = queues(&sw);
    assert_eq!(q.len(), 3);
    assert_eq!(q[1].owner.as_deref(), Some("p1"));
    assert_eq!(q[1].mac.as_deref(), Some("02:00:00:00:00:01"));
    assert_eq!(
        (q[2].owner.as_deref(), q[2].mac.as_deref()),
        (Some("p2"), None)
    );
    for e in [&mut e1, &mut e2, &mut e3] {
        announce(e);
    }
    let deadline = Instant::now() + T;
    while queues(&sw)[2].mac.is_none() {
        assert!(Instant::now() < deadline, "p2's MAC never learned");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = queues(&sw);
    flood(&mut far, mac(1), 300, &mut e1);
    flood(&mut far, mac(2), 200, &mut e2);
    flood(&mut far, mac(3), 100, &mut e3);
    let after = queues(&sw);
    let got = |q: usize| after[q].packets - before[q].packets;
    assert_eq!(got(1), 300, "p1's frames in its own queue: {after:?}");
    assert_eq!(got(2), 200, "p2's frames in its own queue: {after:?}");
    assert!(got(0) >= 100, "p3's frames in the shared queue: {after:?}");

    // p1 leaves: its queue goes to p3, which waited.
    sw.handle().del_port("p1").unwrap();
    let q = queues(&sw);
    assert_eq!(q[1].owner.as_deref(), Some("p3"));
    assert_eq!(q[1].mac.as_deref(), Some("02:00:00:00:00:03"));
    let before = q;
    flood(&mut far, mac(3), 100, &mut e3);
    let after = queues(&sw);
    assert_eq!(after[1].packets - before[1].packets, 100, "{after:?}");

    // A port naming a taken queue is refused, in one line.
    let mut p4 = PortSpec::vhost_user("p4", dir.sock("p4"), SocketMode::Server);
    p4.uplink_queue = Some(QueueRequest::Index(7));
    let err = sw.handle().add_port(p4).unwrap_err().to_string();
    assert!(err.contains("no queue 7"), "{err}");

    // The counters reach Prometheus.
    let text = vnio_switch::stats::prometheus(
        &sw.handle()
            .list()
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.stats))
            .collect::<Vec<_>>(),
    );
    assert!(
        text.contains(
            "vnio_switch_uplink_queue_packets_total{port=\"up\",queue=\"1\",owner=\"p3\"}"
        ),
        "{text}"
    );
}

#[test]
fn each_vnic_gets_its_own_uplink_queue_while_they_last() {
    if !vnio_lab::is_root() {
        println!("skip: uplink queue test needs root");
        return;
    }
    bounded(Duration::from_secs(40), run);
}

/// The uplink as listed, and the port serving its lent queue, if any.
fn lent_view(
    sw: &Switch,
) -> (
    Vec<UplinkQueueSnapshot>,
    Option<vnio_switch::worker::PortInfo>,
) {
    let all = sw.handle().list().unwrap();
    let up = all.iter().find(|p| p.name == "up").unwrap();
    let held = all.iter().find(|p| p.kind == "uplink-queue").cloned();
    (up.stats.uplink_queues.clone(), held)
}

/// Frames the far end of the veth receives from `src` within `T`.
fn far_receives(far: &mut UplinkPort, src: EthernetAddress, n: usize) {
    let mut q = far.take_queue(0).unwrap();
    let (mut got, deadline) = (0, Instant::now() + T);
    while got < n {
        match q.peek() {
            Some(vnio_switch::port::uplink::Rx::Frame(f)) => {
                if f.len() >= HDR_LEN + 12 && f[HDR_LEN + 6..HDR_LEN + 12] == src.0 {
                    got += 1;
                }
                q.release();
            }
            Some(_) => q.release(),
            None => {
                assert!(
                    Instant::now() < deadline,
                    "{got} of {n} frames reached the wire"
                );
                std::thread::yield_now();
            }
        }
    }
    far.put_queue(0, q);
}

fn run_lent() {
    let dir = Dir::new("netql");
    let (_veth, a, b) = veth_up("vnl");
    let mut up = PortSpec::uplink("up", &a);
    up.kind.uplink_mut().unwrap().queues = std::num::NonZeroUsize::new(3).unwrap();
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.mac = Some(mac(1).to_string());
    p1.latency = vnio_switch::config::Latency::High;
    let mut p2 = PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server);
    p2.mac = Some(mac(2).to_string());
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![up, p1, p2],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut e1 = endpoint(&dir, 1, 1);
    let mut e2 = endpoint(&dir, 2, 2);
    let mut far = UplinkPort::new(&b).unwrap();

    // p1 runs on a worker of its own, which serves p1's uplink queue.
    let (q, held) = lent_view(&sw);
    let mine = q
        .iter()
        .position(|q| q.owner.as_deref() == Some("p1"))
        .unwrap_or_else(|| panic!("p1 owns a queue: {q:?}"));
    assert!(q[mine].lent, "{q:?}");
    let held = held.expect("a port serves the lent queue");
    assert_eq!(held.name, format!("up:q{mine}"));
    assert_eq!(held.stats.uplink_queues[0].queue, mine);
    let theirs = q
        .iter()
        .position(|q| q.owner.as_deref() == Some("p2"))
        .unwrap();
    assert!(!q[theirs].lent, "p2 is served by the shared worker: {q:?}");

    // From the wire: p1's frames come through the lent queue only (both
    // MACs known first: a frame for an unknown one is flooded to both).
    announce(&mut e1);
    announce(&mut e2);
    far_receives(&mut far, mac(2), 1);
    let before = lent_view(&sw);
    flood(&mut far, mac(1), 300, &mut e1);
    flood(&mut far, mac(2), 100, &mut e2);
    let after = lent_view(&sw);
    let took = |v: &(
        Vec<UplinkQueueSnapshot>,
        Option<vnio_switch::worker::PortInfo>,
    )| { v.1.as_ref().unwrap().stats.uplink_queues[0].packets };
    assert_eq!(took(&after) - took(&before), 300, "{after:?}");
    assert_eq!(after.0[theirs].packets - before.0[theirs].packets, 100);
    assert_eq!(
        after.0[0].packets, before.0[0].packets,
        "nothing on the shared queue"
    );

    // To the wire: p1's unicast leaves through the lent queue's own
    // sockets (the far end was learned from the flood), not the uplink's.
    let sent_up = |v: &(
        Vec<UplinkQueueSnapshot>,
        Option<vnio_switch::worker::PortInfo>,
    )| { v.1.as_ref().unwrap().stats.rx.packets };
    let up_rx = || {
        sw.handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "up")
            .unwrap()
            .stats
            .rx
            .packets
    };
    let (before, up_before) = (lent_view(&sw), up_rx());
    for _ in 0..50 {
        announce(&mut e1);
    }
    far_receives(&mut far, mac(1), 50);
    assert_eq!(sent_up(&lent_view(&sw)) - sent_up(&before), 50);
    assert_eq!(
        up_rx(),
        up_before,
        "the shared worker's uplink sent none of them"
    );

    // Back to latency normal: the queue returns to the shared worker.
    let normal = vnio_switch::config::PolicyUpdate {
        latency: Some(vnio_switch::config::Latency::Normal),
        ..Default::default()
    };
    sw.handle().set_port("p1", normal).unwrap();
    let (q, held) = lent_view(&sw);
    assert!(held.is_none() && !q[mine].lent, "{q:?}");
    assert_eq!(q[mine].owner.as_deref(), Some("p1"));
    let before = q[mine].packets;
    flood(&mut far, mac(1), 100, &mut e1);
    let after = lent_view(&sw).0;
    assert_eq!(after[mine].packets - before, 100, "{after:?}");

    // High again, then removed: lent, then back and free.
    let high = vnio_switch::config::PolicyUpdate {
        latency: Some(vnio_switch::config::Latency::High),
        ..Default::default()
    };
    sw.handle().set_port("p1", high).unwrap();
    assert!(lent_view(&sw).0[mine].lent);
    flood(&mut far, mac(1), 100, &mut e1);
    sw.handle().del_port("p1").unwrap();
    let (q, held) = lent_view(&sw);
    assert!(held.is_none() && !q[mine].lent, "{q:?}");
    assert_eq!(q[mine].owner, None, "{q:?}");
}

#[test]
fn a_latency_high_port_takes_its_uplink_queue_to_its_worker() {
    if !vnio_lab::is_root() {
        println!("skip: uplink queue test needs root");
        return;
    }
    if vnio_switch::cpu::allowed().map_or(0, |c| c.len()) < 2 {
        println!("skip: latency high needs a second CPU to dedicate");
        return;
    }
    bounded(Duration::from_secs(40), run_lent);
}
