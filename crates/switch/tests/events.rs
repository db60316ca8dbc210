//! `{"op":"events"}`: a running switch streams what changes to its
//! subscribers (a front-end's connection, negotiation, reset and
//! departure; ports added, changed and removed; MAC flaps), and a
//! subscriber that does not read loses events, is told how many, and
//! slows neither the other subscribers nor the data path.

mod common;

use common::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, ClientError, Events, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::events::{EventLine, Streamed, What};
use vnio_switch::port::SocketMode;
use vnio_switch::serve::ClientLimits;

/// A subscriber to `sw`'s events.
fn subscribe(sw: &Switch) -> Events {
    let mut ev = Client::connect(sw.control_path())
        .unwrap()
        .events()
        .unwrap();
    ev.set_timeout(Some(Duration::from_millis(100))).unwrap();
    ev
}

/// The next line within `T`, or `None`.
fn next_line(ev: &mut Events) -> Option<Streamed> {
    let deadline = Instant::now() + T;
    while Instant::now() < deadline {
        match ev.next_event() {
            Ok(l) => return l,
            Err(ClientError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("event stream: {e}"),
        }
    }
    None
}

/// Events (no `lost` lines allowed) until one on `port` matches `done`;
/// returns those on `port`, in order.
fn until(ev: &mut Events, port: &str, done: impl Fn(&What) -> bool) -> Vec<EventLine> {
    let mut seen = Vec::new();
    loop {
        match next_line(ev) {
            Some(Streamed::Event(e)) if e.port == port => {
                let last = done(&e.what);
                seen.push(e);
                if last {
                    return seen;
                }
            }
            Some(Streamed::Event(_)) => {}
            Some(Streamed::Lost { lost }) => panic!("lost {lost} events: {seen:?}"),
            None => panic!("no matching event on {port} within {T:?}: {seen:?}"),
        }
    }
}

fn kinds(v: &[EventLine]) -> Vec<&'static str> {
    v.iter()
        .map(|e| match e.what {
            What::Connected => "connected",
            What::Negotiated { .. } => "negotiated",
            What::Reset { .. } => "reset",
            What::Disconnected => "disconnected",
            What::Queue { enabled: true, .. } => "queue on",
            What::Queue { enabled: false, .. } => "queue off",
            What::Link { .. } => "link",
            What::PortAdded => "added",
            What::PortRemoved => "removed",
            What::PortChanged => "changed",
            What::MacFlap { .. } => "flap",
            What::MacMoved { .. } => "moved",
            What::Drops { .. } => "drops",
        })
        .collect()
}

#[test]
fn a_front_end_connects_negotiates_and_leaves() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-life");
        let sw = switch(&dir, 1);
        let mut ev = subscribe(&sw);
        let ep = endpoint(&dir, 1, 1);
        let seen = until(&mut ev, "p1", |w| {
            matches!(
                w,
                What::Queue {
                    queue: 1,
                    enabled: true
                }
            )
        });
        assert_eq!(
            kinds(&seen),
            ["connected", "negotiated", "queue on", "queue on"],
            "{seen:?}"
        );
        let What::Negotiated {
            features,
            queue_pairs,
            ring_size,
            ..
        } = seen[1].what
        else {
            unreachable!()
        };
        assert_eq!(features, ep.features(), "the features the endpoint acked");
        assert_eq!(queue_pairs, 1);
        assert!(ring_size.is_power_of_two(), "{ring_size}");
        // Numbered in order, stamped by both clocks.
        for w in seen.windows(2) {
            assert_eq!(w[1].seq, w[0].seq + 1);
            assert!(w[1].mono_ns >= w[0].mono_ns && w[0].wall_ns > 0);
        }
        drop(ep);
        let seen = until(&mut ev, "p1", |w| {
            matches!(w, What::Disconnected | What::Reset { .. })
        });
        assert_eq!(kinds(&seen), ["disconnected"], "{seen:?}");

        // A front-end that sends garbage is reset, with the reason.
        let mut s = UnixStream::connect(dir.sock("p1")).unwrap();
        let mut bad = Vec::new();
        for v in [1u32, 1, 0x1000_0000] {
            bad.extend_from_slice(&v.to_le_bytes());
        }
        s.write_all(&bad).unwrap();
        let seen = until(&mut ev, "p1", |w| matches!(w, What::Reset { .. }));
        assert_eq!(kinds(&seen), ["connected", "reset"], "{seen:?}");
        let What::Reset { reason } = &seen[1].what else {
            unreachable!()
        };
        assert!(!reason.is_empty());
        assert_eq!(port(sw.handle(), "p1").stats.resets, 1);
    });
}

#[test]
fn ports_added_changed_and_removed_are_said() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-ports");
        let sw = switch(&dir, 1);
        let mut ev = subscribe(&sw);
        let mut c = Client::connect(sw.control_path()).unwrap();
        let spec = PortSpec::vhost_user("p9", dir.sock("p9"), SocketMode::Server);
        c.request(&Request::PortAdd { port: spec }).unwrap();
        c.request(&Request::PortSet {
            name: "p9".into(),
            set: PolicyUpdate {
                lro: Some(false),
                ..Default::default()
            },
        })
        .unwrap();
        c.request(&Request::PortDel { name: "p9".into() }).unwrap();
        let seen = until(&mut ev, "p9", |w| matches!(w, What::PortRemoved));
        assert_eq!(kinds(&seen), ["added", "changed", "removed"], "{seen:?}");
        assert!(seen.iter().all(|e| e.port_id == seen[0].port_id));
        // Ordinary requests still go on that client, and on new ones.
        c.request(&Request::PortList).unwrap();
    });
}

#[test]
fn a_mac_flap_names_both_ports() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-flap");
        // p2's claim stays contestable for 10 s however slowly this runs.
        let sw = switch_tuned(&dir, 2, |s| s.mac_move_quiet_ms = 10_000);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut ev = subscribe(&sw);
        let bcast = [0xff; 6];
        // p1 holds mac(1); p2 announces it (an ARP from it: a move); p1,
        // still sending, claims it back: a flap.
        a.send_frame(&frame(bcast, 1, 0x0800)).unwrap();
        wait_for("mac(1) on p1", || {
            sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(1))
        });
        b.send_frame(&frame(bcast, 1, 0x0806)).unwrap();
        wait_for("mac(1) moved to p2", || {
            let p2 = port(sw.handle(), "p2").id;
            sw.handle()
                .fdb()
                .unwrap()
                .iter()
                .any(|e| e.mac == mac(1) && e.port.0 == p2)
        });
        a.send_frame(&frame(bcast, 1, 0x0800)).unwrap();
        let seen = until(&mut ev, "p1", |w| matches!(w, What::MacFlap { .. }));
        let What::MacFlap { mac: m, from } = &seen.last().unwrap().what else {
            unreachable!()
        };
        assert_eq!((m.as_str(), from.as_str()), ("02:00:00:00:00:01", "p2"));
        assert!(port(sw.handle(), "p2").stats.tx.mac_flaps >= 1);
    });
}

#[test]
fn a_moved_mac_is_said_once_per_move() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-move");
        // Every move taken at once (a Linux bridge's rule): no flaps.
        let sw = switch_tuned(&dir, 2, |s| s.mac_move_quiet_ms = 0);
        let mut ends = [endpoint(&dir, 1, 1), endpoint(&dir, 2, 2)];
        let mut ev = subscribe(&sw);
        let mut c = Client::connect(sw.control_path()).unwrap();
        let bcast = [0xff; 6];
        ends[0].send_frame(&frame(bcast, 1, 0x0800)).unwrap();
        wait_for("mac(1) on p1", || {
            sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(1))
        });
        // mac(1) goes to p2 and back to p1, each time with a burst of
        // frames: one event per move, on the port it moved to.
        for (to, from) in [("p2", "p1"), ("p1", "p2")] {
            let k = usize::from(to == "p2");
            let f = frame(bcast, 1, 0x0800);
            for _ in 0..4 {
                assert_eq!(ends[k].send_burst(&[&f[..]; 8]), 8);
            }
            // A change of the port's policies marks the end of its events.
            c.request(&Request::PortSet {
                name: to.into(),
                set: PolicyUpdate {
                    lro: Some(false),
                    ..Default::default()
                },
            })
            .unwrap();
            let seen = until(&mut ev, to, |w| matches!(w, What::PortChanged));
            let moves: Vec<_> = seen
                .iter()
                .filter_map(|e| match &e.what {
                    What::MacMoved { mac, vid, from } => Some((mac.clone(), *vid, from.clone())),
                    _ => None,
                })
                .collect();
            assert_eq!(
                moves,
                [("02:00:00:00:00:01".to_string(), 1, from.to_string())],
                "{seen:?}"
            );
        }
        assert_eq!(port(sw.handle(), "p1").stats.tx.mac_flaps, 0);
    });
}

#[test]
fn a_subscriber_that_never_reads_loses_events_and_slows_nothing() {
    bounded(Duration::from_secs(120), || {
        let dir = Dir::new("ev-slow");
        let sw = switch_with_small_event_buffers(&dir);
        let mut reader = subscribe(&sw);
        let (e1, mut e2) = (endpoint(&dir, 1, 1), endpoint(&dir, 2, 2));
        // The sleeper subscribes once the reader has seen both front-ends'
        // queues start: every event after that reaches both.
        both_queues_started(&mut reader);
        let mut sleeper = subscribe(&sw);
        // Frames from p1 to p2 all along, counted at both ends (p2's
        // address known first: no flood).
        e2.send_frame(&frame([0xff; 6], 2, 0x0800)).unwrap();
        wait_for("mac(2) learned", || {
            sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(2))
        });
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let traffic = traffic(e1, e2, stop.clone());
        // Events: a port added and removed, again and again; the reader
        // takes each pair before the next (it never falls behind).
        let mut c = Client::connect(sw.control_path()).unwrap();
        let cycles = 400;
        let all = add_and_remove(&mut c, &mut reader, &dir, cycles);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (sent, got, _e1, _e2) = traffic.join().unwrap();
        assert_eq!(all.len(), 2 * cycles, "the reader got every event");
        for w in all.windows(2) {
            assert_eq!(w[1].seq, w[0].seq + 1, "numbered without a gap");
        }
        the_sleeper_is_told_what_it_lost(&mut sleeper, &mut c, &dir, &all);
        // The data path went on meanwhile: every frame sent arrived.
        assert!(sent >= 16, "frames went through ({sent})");
        assert_eq!(sent, got);
        let p1 = port(sw.handle(), "p1");
        assert_eq!(
            port(sw.handle(), "p2").stats.rx.packets,
            p1.stats.tx.packets
        );
        assert!(p1.stats.tx.drops.values().all(|d| *d == 0), "{p1:?}");
    });
}

/// A switch with ports p1 and p2 whose subscribers have 16 events of
/// buffer.
fn switch_with_small_event_buffers(dir: &Dir) -> Switch {
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            // Traffic here may drop; only the ports' events count.
            drop_event_rate: 0,
            ..SwitchConfig::default()
        },
        ports: (1..=2)
            .map(|i| {
                let n = format!("p{i}");
                PortSpec::vhost_user(&n, dir.sock(&n), SocketMode::Server)
            })
            .collect(),
    };
    let limits = ClientLimits {
        events_buffer: 16,
        ..ClientLimits::default()
    };
    Switch::start_with_limits(cfg, limits).unwrap()
}

/// Reads events until both ports' receive queues started.
fn both_queues_started(reader: &mut Events) {
    let mut started = Vec::new();
    while started.len() < 2 {
        match next_line(reader) {
            Some(Streamed::Event(e))
                if matches!(
                    e.what,
                    What::Queue {
                        queue: 1,
                        enabled: true
                    }
                ) =>
            {
                started.push(e.port)
            }
            Some(Streamed::Event(_)) => {}
            other => panic!("{other:?} before both queues started ({started:?})"),
        }
    }
}

/// Bursts from e1 to e2 until `stop`, each burst all arrived before the
/// next; gives back (sent, arrived) and the endpoints.
fn traffic(
    mut e1: Endpoint,
    mut e2: Endpoint,
    st: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64, Endpoint, Endpoint)> {
    std::thread::spawn(move || {
        let f = frame(mac(2).0, 1, 0x0800);
        let (mut sent, mut got) = (0u64, 0u64);
        let mut buf = [0u8; 2048];
        while !st.load(std::sync::atomic::Ordering::SeqCst) {
            let n = e1.send_burst(&[&f[..]; 16]) as u64;
            sent += n;
            let deadline = Instant::now() + T;
            while got < sent {
                assert!(Instant::now() < deadline, "{got} of {sent} frames arrived");
                if e2.poll_recv(&mut buf).is_some() {
                    got += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        }
        // The endpoints stay: their leaving would be events.
        (sent, got, e1, e2)
    })
}

/// Adds and removes a port `cycles` times; the events the reader got.
fn add_and_remove(c: &mut Client, reader: &mut Events, dir: &Dir, cycles: usize) -> Vec<EventLine> {
    let mut all = Vec::new();
    for i in 0..cycles {
        let name = format!("x{i}");
        let spec = PortSpec::vhost_user(&name, dir.sock(&name), SocketMode::Server);
        c.request(&Request::PortAdd { port: spec }).unwrap();
        c.request(&Request::PortDel { name: name.clone() }).unwrap();
        all.extend(until(reader, &name, |w| matches!(w, What::PortRemoved)));
    }
    all
}

/// The sleeper reads at last: what it was given, then how many it lost.
/// Together: every event of `all`; then the next event, and nothing
/// between.
fn the_sleeper_is_told_what_it_lost(
    sleeper: &mut Events,
    c: &mut Client,
    dir: &Dir,
    all: &[EventLine],
) {
    let mut given = Vec::new();
    let lost = loop {
        match next_line(sleeper).expect("the sleeper is told what it lost") {
            Streamed::Lost { lost } => break lost,
            Streamed::Event(e) => given.push(e),
        }
    };
    let spec = PortSpec::vhost_user("last", dir.sock("last"), SocketMode::Server);
    c.request(&Request::PortAdd { port: spec }).unwrap();
    match next_line(sleeper) {
        Some(Streamed::Event(e)) if e.port == "last" => {
            assert_eq!(e.seq, all.last().unwrap().seq + 1)
        }
        other => panic!("after the gap: {other:?}"),
    }
    assert!(lost > 0, "a subscriber that never read lost events");
    assert!(given.len() < all.len());
    assert_eq!(
        given[..],
        all[..given.len()],
        "given in order, up to the gap"
    );
    assert_eq!(
        given.len() as u64 + lost,
        all.len() as u64,
        "told every loss"
    );
}

/// A switch with ports p1, p2 and its settings changed by `tune`.
fn switch_with(dir: &Dir, tune: impl FnOnce(&mut SwitchConfig)) -> Switch {
    switch_tuned(dir, 2, tune)
}

#[test]
fn drops_above_the_rate_are_said_and_when_they_stop() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-drops");
        let sw = switch_with(&dir, |s| s.drop_event_rate = 50);
        let mut e1 = endpoint(&dir, 1, 1);
        let mut e2 = endpoint(&dir, 2, 2);
        e2.send_frame(&frame([0xff; 6], 2, 0x0800)).unwrap();
        wait_for("mac(2) learned", || {
            sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(2))
        });
        let mut ev = subscribe(&sw);
        // p2's guest never takes what it receives: once its receive ring
        // is full, every frame to it is a ring_full drop.
        let f = frame(mac(2).0, 1, 0x0800);
        let is_drops = |w: &What, up: bool| matches!(w, What::Drops { reason, above, .. } if reason == "ring_full" && *above == up);
        let start = Instant::now();
        let mut seen = None;
        while seen.is_none() {
            assert!(start.elapsed() < Duration::from_secs(20), "no drops event");
            for _ in 0..20 {
                e1.send_burst(&[&f[..]; 16]);
                std::thread::sleep(Duration::from_millis(5));
            }
            while let Ok(Some(Streamed::Event(e))) = ev.next_event() {
                if is_drops(&e.what, true) {
                    seen = Some(e);
                    break;
                }
            }
        }
        let e = seen.unwrap();
        let What::Drops {
            per_sec, threshold, ..
        } = e.what
        else {
            unreachable!()
        };
        assert!(per_sec > 50 && threshold == 50, "{e:?}");
        let p = port(sw.handle(), &e.port);
        assert!(
            p.stats.rx.drops["ring_full"] + p.stats.tx.drops["ring_full"] > 0,
            "{p:?}"
        );
        // No more frames: the rate falls back, and that is said too.
        let back = until(&mut ev, &e.port, |w| is_drops(w, false));
        assert!(!back.is_empty());
    });
}

fn root_with_ip() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .is_some_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
    root && std::process::Command::new("ip").arg("-V").output().is_ok()
}

fn ip_link(ifname: &str, state: &str) {
    let ok = std::process::Command::new("ip")
        .args(["link", "set", ifname, state])
        .status()
        .unwrap()
        .success();
    assert!(ok, "ip link set {ifname} {state}");
}

#[test]
fn an_uplinks_carrier_is_said() {
    if !root_with_ip() {
        println!("skip: the carrier test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-link");
        let sw = switch(&dir, 0);
        let (_veth, a, b) = veth_up("evl");
        wait_for("carrier on the veth", || {
            std::fs::read_to_string(format!("/sys/class/net/{a}/carrier"))
                .is_ok_and(|s| s.trim() == "1")
        });
        sw.handle().add_port(PortSpec::uplink("up", &a)).unwrap();
        let mut ev = subscribe(&sw);
        // The first look (within a second of subscribing) only notes it.
        std::thread::sleep(Duration::from_millis(1500));
        ip_link(&b, "down");
        let seen = until(&mut ev, "up", |w| matches!(w, What::Link { .. }));
        assert!(matches!(
            seen.last().unwrap().what,
            What::Link { up: false }
        ));
        ip_link(&b, "up");
        let seen = until(&mut ev, "up", |w| matches!(w, What::Link { .. }));
        assert!(matches!(seen.last().unwrap().what, What::Link { up: true }));
    });
}

#[test]
fn subscribers_are_capped_apart_from_clients() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-cap");
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                ..SwitchConfig::default()
            },
            ports: Vec::new(),
        };
        let limits = ClientLimits {
            max_clients: 2,
            subscribers: 2,
            ..ClientLimits::default()
        };
        let sw = Switch::start_with_limits(cfg, limits).unwrap();
        let _held = [subscribe(&sw), subscribe(&sw)];
        let third = Client::connect(sw.control_path()).unwrap().events();
        assert!(
            matches!(&third, Err(ClientError::Refused(e)) if e.contains("too many event subscribers")),
            "{:?}",
            third.err()
        );
        // Two subscribers hold no client's place: two clients at once.
        let mut a = Client::connect(sw.control_path()).unwrap();
        let mut b = Client::connect(sw.control_path()).unwrap();
        a.request(&Request::PortList).unwrap();
        b.request(&Request::PortList).unwrap();
    });
}

#[test]
fn a_stopped_queue_is_said() {
    use common::raw::{Order, RawFrontend};
    use vnio_switch::vhost_user::protocol::code;
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ev-queue");
        let sw = switch(&dir, 1);
        let mut ev = subscribe(&sw);
        let mut h = RawFrontend::connect(&dir.sock("p1"));
        h.handshake(Order::Standard);
        let seen = until(&mut ev, "p1", |w| {
            matches!(
                w,
                What::Queue {
                    queue: 1,
                    enabled: true
                }
            )
        });
        assert_eq!(
            kinds(&seen),
            ["connected", "negotiated", "queue on", "queue on"]
        );
        // GET_VRING_BASE stops the transmit queue (as QEMU does when the
        // guest's driver resets the device).
        let mut st = [0u8; 8];
        st[..4].copy_from_slice(&1u32.to_le_bytes());
        h.send(code::GET_VRING_BASE, 0, &st, &[]).unwrap();
        let _ = h.reply_u64().unwrap();
        let seen = until(&mut ev, "p1", |w| matches!(w, What::Queue { .. }));
        assert_eq!(
            seen.last().unwrap().what,
            What::Queue {
                queue: 1,
                enabled: false
            }
        );
    });
}
