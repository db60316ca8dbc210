//! Latency-Sensitivity=High: a port served by its own worker, pinned to a
//! core no other switch thread uses, with frames crossing to and from the
//! shared worker's ports through the workers' rings; refusals when no core
//! can be dedicated; a live move there and back under traffic.

mod common;

use common::*;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, Latency, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;

/// The tests look at the process's threads: one switch at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn allowed_cpus() -> Vec<usize> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap();
    cpu_list(line.split_whitespace().nth(1).unwrap())
}

fn cpu_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// The CPUs each switch worker thread may run on, by thread name.
fn worker_threads() -> Vec<(String, Vec<usize>)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if comm.starts_with("vnio-sw") {
            let st = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            if let Some(l) = st.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
                v.push((comm, cpu_list(l.split_whitespace().nth(1).unwrap())));
            }
        }
    }
    v
}

fn high(name: &str, dir: &Dir, core: Option<usize>) -> PortSpec {
    let mut p = PortSpec::vhost_user(name, dir.sock(name), SocketMode::Server);
    p.latency = Latency::High;
    p.core = core;
    p
}

fn start(dir: &Dir, ports: Vec<PortSpec>) -> Result<Switch, String> {
    Switch::start(Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports,
    })
    .map_err(|e| vnio_switch::error_chain(&e))
}

fn responder(mut ep: Endpoint, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Endpoint> {
    std::thread::spawn(move || {
        let s = stop.clone();
        ep.serve(Duration::from_secs(30), &move || s.load(Ordering::SeqCst))
            .unwrap();
        ep
    })
}

/// a (any worker) resolves, pings and UDP-echoes b's address `n` times.
fn exchange(a: &mut Endpoint, b_ip: u8, n: u32) {
    assert_eq!(a.resolve(ip(b_ip), T).unwrap(), mac(b_ip));
    let peer = SocketAddrV4::new(ip(b_ip).into(), 7);
    let mut buf = [0u8; 2048];
    for i in 0..n {
        let msg = format!("across workers {i}");
        a.udp_send_to(peer, 4000, msg.as_bytes()).unwrap();
        let (from, _, len) = a.udp_recv_timeout(&mut buf, T).unwrap().expect("echo");
        assert_eq!((from, &buf[..len]), (peer, msg.as_bytes()));
    }
}

#[test]
fn a_latency_high_port_has_its_own_pinned_worker() {
    let _one = serial();
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("lat-high");
        let allowed = allowed_cpus();
        let ports = vec![
            PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
            high("p2", &dir, None),
            PortSpec::vhost_user("p3", dir.sock("p3"), SocketMode::Server),
        ];
        let sw = match start(&dir, ports) {
            Ok(sw) => sw,
            Err(e) if allowed.len() < 2 => {
                assert!(e.contains("no core can be dedicated"), "{e}");
                println!("skip: one CPU: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let list = sw.handle().list().unwrap();
        let p2 = list.iter().find(|p| p.name == "p2").unwrap();
        let core = p2.policy.core.expect("a dedicated core");
        assert_eq!(core, *allowed.last().unwrap(), "the highest free core");
        assert_eq!(p2.policy.coalesce.to_string(), "off");
        assert!(!p2.policy.lro);
        let threads = worker_threads();
        let lat = threads
            .iter()
            .find(|(n, _)| *n == format!("vnio-sw-lat-c{core}"))
            .expect("the dedicated worker thread");
        assert_eq!(lat.1, vec![core], "pinned to its core");
        let shared = threads
            .iter()
            .find(|(n, _)| n == "vnio-switch-wor")
            .expect("the shared worker");
        assert!(
            !shared.1.contains(&core),
            "the shared worker keeps off it: {shared:?}"
        );

        // Both ways across workers: p1 (shared) <-> p2 (dedicated), and a
        // broadcast from p2 reaching p1 and p3 (ARP floods it).
        let mut a = endpoint(&dir, 1, 1);
        let b = endpoint(&dir, 2, 2);
        let c = endpoint(&dir, 3, 3);
        let stop = Arc::new(AtomicBool::new(false));
        let b = responder(b, stop.clone());
        let c = responder(c, stop.clone());
        exchange(&mut a, 2, 200);
        let mut b2 = {
            stop.store(true, Ordering::SeqCst);
            let b = b.join().unwrap();
            let _ = c.join().unwrap();
            b
        };
        stop.store(false, Ordering::SeqCst);
        let a = responder(a, stop.clone());
        let c = responder(endpoint_reconnect(&dir, 3, 3), stop.clone());
        exchange(&mut b2, 1, 100);
        exchange(&mut b2, 3, 100);
        stop.store(true, Ordering::SeqCst);
        a.join().unwrap();
        c.join().unwrap();
        let fdb = sw.handle().fdb().unwrap();
        assert!(fdb.iter().any(|e| e.mac == mac(2)), "{fdb:?}");
        for p in sw.handle().list().unwrap() {
            assert_eq!(p.stats.resets, 0, "{}", p.name);
            assert_eq!(p.stats.rx.drops["ring_full"], 0, "{}", p.name);
        }
    });
}

/// The endpoint on port `port` again (the old one was consumed by a thread).
fn endpoint_reconnect(dir: &Dir, port: usize, n: u8) -> Endpoint {
    let end = Instant::now() + T;
    loop {
        match Endpoint::connect(
            &dir.sock(&format!("p{port}")),
            vnio_switch::endpoint::EndpointConfig::new(mac(n), ip(n)),
        ) {
            Ok(e) => return e,
            Err(e) if Instant::now() > end => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn cores_that_cannot_be_dedicated_are_refused_in_one_line() {
    let _one = serial();
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("lat-refuse");
        let allowed = allowed_cpus();
        let sw = start(&dir, vec![]).unwrap();
        let outside = allowed.iter().max().unwrap() + 64;
        let e = sw
            .handle()
            .add_port(high("x", &dir, Some(outside)))
            .unwrap_err()
            .to_string();
        if allowed.len() < 2 {
            assert!(e.contains("no core can be dedicated"), "{e}");
            return;
        }
        assert!(e.contains(&format!("core {outside} is outside")), "{e}");
        assert!(!e.contains('\n'));
        let last = *allowed.last().unwrap();
        sw.handle().add_port(high("a", &dir, Some(last))).unwrap();
        let e = sw
            .handle()
            .add_port(high("b", &dir, Some(last)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("latency high: core {last} is already dedicated to port a")
        );
        if allowed.len() == 2 {
            let e = sw
                .handle()
                .add_port(high("b", &dir, None))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("latency high: no core left to dedicate"),
                "{e}"
            );
            let first = allowed[0];
            let e = sw
                .handle()
                .add_port(high("b", &dir, Some(first)))
                .unwrap_err()
                .to_string();
            assert!(e.contains("the last one left"), "{e}");
        }
        // A refused port leaves nothing behind.
        assert!(sw.handle().list().unwrap().iter().all(|p| p.name == "a"));
        let e = sw
            .handle()
            .set_port(
                "a",
                PolicyUpdate {
                    latency: Some(Latency::Normal),
                    core: Some(last),
                    ..Default::default()
                },
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("a core is for latency high"), "{e}");
        sw.handle().del_port("a").unwrap();
        assert!(
            !worker_threads()
                .iter()
                .any(|(n, _)| n.starts_with("vnio-sw-lat")),
            "the dedicated worker stopped with its port"
        );
    });
}

#[test]
fn a_port_moves_to_a_dedicated_worker_and_back_under_traffic() {
    let _one = serial();
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("lat-move");
        if allowed_cpus().len() < 2 {
            println!("skip: one CPU");
            return;
        }
        let sw = switch(&dir, 2);
        let mut a = endpoint(&dir, 1, 1);
        let b = endpoint(&dir, 2, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let b = responder(b, stop.clone());
        exchange(&mut a, 2, 50);
        let set = |l: Latency| {
            sw.handle()
                .set_port(
                    "p1",
                    PolicyUpdate {
                        latency: Some(l),
                        ..Default::default()
                    },
                )
                .unwrap()
        };
        let info = set(Latency::High);
        assert!(info.policy.core.is_some());
        assert!(
            info.connected,
            "the front-end's connection moved with the port"
        );
        exchange(&mut a, 2, 200);
        let info = set(Latency::Normal);
        assert_eq!(info.policy.core, None);
        assert_eq!(
            info.policy.coalesce.to_string(),
            "adaptive:4000",
            "restored"
        );
        exchange(&mut a, 2, 50);
        stop.store(true, Ordering::SeqCst);
        b.join().unwrap();
        let p1 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p1")
            .unwrap();
        assert_eq!((p1.stats.resets, p1.stats.connections), (0, 1));
        assert!(
            !worker_threads()
                .iter()
                .any(|(n, _)| n.starts_with("vnio-sw-lat")),
            "back on the shared worker"
        );
    });
}
