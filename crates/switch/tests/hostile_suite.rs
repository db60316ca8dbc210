//! The hostile-frontend suite: several front-ends attack one live switch at
//! once, each on its own port, while two neighbour ports on the same
//! worker keep exchanging traffic (asserted: round trips counted, the
//! longest gap between two bounded). Every case runs on a fresh connection
//! and on a port reset just before, with non-blocking and with blocking
//! eventfds (legal: the vhost-user spec does not ask for non-blocking ones).
//! After each case the port must serve a well-behaved front-end again.
//! The chain cases run on split and on packed rings.

mod common;

use common::attacks::{clear_nonblock, frame, Attack, Expect, CHAINS, DESCRIPTORS, PACKED_CHAINS};
use common::raw::{Order, RawFrontend};
use common::*;
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::{Switch, WorkerHandle};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::protocol::code;

/// One case: what it is, what it does, what the switch must do, and
/// whether the front-end uses packed rings.
type Case = (&'static str, Attack, Expect, bool);

/// Connects a front-end (on packed rings when `packed`), completes the
/// handshake and shows the port forwards one of its frames.
fn healthy(
    sw: &WorkerHandle,
    name: &str,
    path: &Path,
    blocking: bool,
    packed: bool,
    src: u8,
) -> RawFrontend {
    let mut h = if packed {
        RawFrontend::connect_packed(path, blocking)
    } else {
        RawFrontend::connect_with(path, blocking)
    };
    if blocking {
        clear_nonblock(&h);
    }
    h.handshake(Order::Standard);
    wait_for(&format!("{name} running"), || port(sw, name).running);
    let before = port(sw, name).stats.tx.packets;
    h.send_frame(&frame(src));
    wait_for(&format!("{name} forwarding"), || {
        port(sw, name).stats.tx.packets > before
    });
    h
}

/// Runs `attack` on port `name` and checks the switch's answer.
fn case(sw: &WorkerHandle, name: &str, path: &Path, (what, attack, expect, packed): Case) {
    let src = name[1..].parse::<u8>().unwrap() + 100;
    for blocking in [false, true] {
        for reset_before in [false, true] {
            let label =
                format!("{name}: {what} (blocking {blocking}, reset before {reset_before})");
            if reset_before {
                let mut h = healthy(sw, name, path, blocking, packed, src);
                let resets = port(sw, name).stats.resets;
                let zero_length = if packed { PACKED_CHAINS[5] } else { CHAINS[5] };
                zero_length.1(&mut h);
                wait_for(&format!("{label}: reset before"), || {
                    port(sw, name).stats.resets > resets
                });
                assert!(h.closed(T), "{label}: closed before");
            }
            let mut h = healthy(sw, name, path, blocking, packed, src);
            let resets = port(sw, name).stats.resets;
            attack(&mut h);
            match expect {
                Expect::Reset => {
                    wait_for(&format!("{label}: reset"), || {
                        port(sw, name).stats.resets > resets
                    });
                    assert!(h.closed(T), "{label}: connection closed");
                }
                Expect::Carry => {
                    std::thread::sleep(Duration::from_millis(50));
                    let p = port(sw, name);
                    assert_eq!(p.stats.resets, resets, "{label}: no reset");
                    assert!(p.running, "{label}: still running");
                }
            }
            drop(h);
            // The port serves a well-behaved front-end afterwards.
            drop(healthy(sw, name, path, blocking, packed, src));
        }
    }
}

/// Round trips between two endpoints while `stop` is down: (count, longest gap).
fn neighbours(dir: &Dir, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, Duration)> {
    let mut b = endpoint(dir, 2, 2);
    let c = endpoint(dir, 3, 3);
    std::thread::spawn(move || {
        // The echo server runs until the client's last round trip is back
        // (stopping it on `stop` could swallow the one in flight).
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let server = std::thread::spawn(move || {
            let mut c = c;
            c.serve(Duration::from_secs(600), &move || d2.load(Ordering::SeqCst))
                .unwrap();
        });
        b.resolve(ip(3), T).unwrap();
        let peer = SocketAddrV4::new(ip(3).into(), 7);
        let mut buf = [0u8; 2048];
        let (mut n, mut gap, mut last) = (0u64, Duration::ZERO, Instant::now());
        while !stop.load(Ordering::SeqCst) {
            let tag = (n as u32).to_le_bytes();
            b.udp_send_to(peer, 5000, &tag).unwrap();
            let deadline = Instant::now() + T;
            // Echoes of earlier, late round trips are skipped.
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match b.udp_recv_timeout(&mut buf, left).unwrap() {
                    Some((_, _, k)) if buf[..k] == tag => break,
                    Some(_) => continue,
                    None => panic!("neighbours: round trip {n} lost for {T:?}"),
                }
            }
            n += 1;
            gap = gap.max(last.elapsed());
            last = Instant::now();
            std::thread::sleep(Duration::from_millis(1));
        }
        done.store(true, Ordering::SeqCst);
        server.join().unwrap();
        (n, gap)
    })
}

#[test]
fn hostile_front_ends_cost_only_their_own_ports() {
    bounded(Duration::from_secs(600), || {
        let dir = Dir::new("suite");
        let sw = switch(&dir, 6);
        let stop = Arc::new(AtomicBool::new(false));
        let traffic = neighbours(&dir, stop.clone());
        let started = Instant::now();
        let threads: Vec<_> = ["p1", "p4", "p5", "p6"]
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let sw = sw.handle().clone();
                let path = dir.sock(name);
                std::thread::spawn(move || {
                    // Each attacker starts at another case, so different
                    // cases overlap in time.
                    let chains = CHAINS.iter().map(|&(w, a)| (w, a, Expect::Reset, false));
                    let packed = PACKED_CHAINS
                        .iter()
                        .map(|&(w, a)| (w, a, Expect::Reset, true));
                    let descriptors = DESCRIPTORS.iter().map(|&(w, a, e)| (w, a, e, false));
                    let all: Vec<Case> = chains.chain(packed).chain(descriptors).collect();
                    let only = std::env::var("ONLY").ok();
                    for k in 0..all.len() {
                        let c = all[(k + 3 * i) % all.len()];
                        if only.as_deref().is_some_and(|o| !c.0.contains(o)) {
                            continue;
                        }
                        case(&sw, name, &path, c);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for name in ["p2", "p3"] {
            let p = port(sw.handle(), name);
            assert_eq!(p.stats.resets, 0, "{name} untouched");
            assert!(p.running, "{name} running");
        }
        stop.store(true, Ordering::SeqCst);
        let (n, gap) = traffic.join().unwrap();
        eprintln!(
            "neighbours: {n} round trips in {:?} under attack, longest gap {gap:?}",
            started.elapsed()
        );
        assert!(n >= 100, "neighbours exchanged only {n} round trips");
        assert!(
            gap < Duration::from_secs(1),
            "neighbours stalled for {gap:?}"
        );
    });
}

#[test]
fn a_memory_table_over_the_cap_is_refused() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("cap");
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                max_guest_memory_mib: 1,
                ..SwitchConfig::default()
            },
            ports: vec![PortSpec::vhost_user(
                "p1",
                dir.sock("p1"),
                SocketMode::Server,
            )],
        };
        let sw = Switch::start(cfg).unwrap();
        let mut h = RawFrontend::connect(&dir.sock("p1"));
        assert!(h.memory_file().metadata().unwrap().len() > 1 << 20);
        h.send(code::SET_OWNER, 0, &[], &[]).unwrap();
        h.send_mem_table_of(h.memory_file().metadata().unwrap().len());
        wait_for("reset", || port(sw.handle(), "p1").stats.resets == 1);
        assert!(h.closed(T));
        assert!(!port(sw.handle(), "p1").running);
        h = RawFrontend::connect(&dir.sock("p1"));
        drop(h);
    });
}

#[test]
fn a_reset_returns_the_port_to_its_initial_state() {
    use vnio_switch::datapath::{Datapath, Port};
    fn pristine(dp: &Datapath, idx: usize) -> bool {
        match &dp.table().slot(idx).unwrap().port {
            Port::VhostUser(p) => p.is_pristine(),
            _ => unreachable!("vhost-user ports"),
        }
    }
    let dir = Dir::new("pristine");
    let (mut dp, _endpoints) = driven(&dir, 2);
    assert!(!pristine(&dp, 0), "configured by its endpoint");
    dp.reset(0, Instant::now(), &"a test");
    assert!(pristine(&dp, 0), "as a port nobody connected to");
    // The old connection and kick eventfds stay open until the worker
    // unwatched them.
    assert!(dp.table_mut().has_retired(0));
    dp.table_mut().release_retired(0);
    assert!(!dp.table_mut().has_retired(0));
    assert!(!pristine(&dp, 1), "the other port is untouched");
}
