//! End to end with real guests (QEMU under TCG here, as root): the image
//! is built (or found cached), two guests boot on vnio switch vhost-user
//! ports and one on a tap, their agents answer, `vnio rr` and `vnio ping`
//! run from a namespace on a switch tap port, from the host through the
//! tap, and from inside one guest against the other; the two switch
//! guests ping each other and move 512 KiB over TCP intact; a guest
//! reaches the host through the switch's tap and uplink ports; `stop`
//! leaves no QEMU, interface, socket or state behind. Launch-to-agent
//! times are printed. Without root, QEMU or the guests' static vnio the
//! tests print one "skip:" line and pass.

use std::net::{IpAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::agent::wait_agent;
use vnio_vm::exec::exec;
use vnio_vm::launch::Launched;
use vnio_vm::plan::Status;
use vnio_vm::spec::{Latency, VmSpec};
use vnio_vm::testkit::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn guests_on_a_switch_and_a_tap_answer_measure_and_stop_cleanly() {
    let Some(kit) = Kit::get("guests on a switch and a tap") else {
        return;
    };
    if std::env::var("VNIO_LOG").as_deref() == Ok("debug") {
        // Shows QEMU's request order (SET_VRING_ENABLE before SET_FEATURES on 7.2).
        vnio_switch::logging::init(vnio_switch::logging::LevelFilter::Debug);
    }
    bounded(Duration::from_secs(900), move || {
        let n = run_id();
        let work = Dir::new("switch");
        let port_tap = format!("vmns{n}");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let sw = Switch::start(Config {
            switch: SwitchConfig {
                control: sock("control"),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server),
                PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server),
                PortSpec::tap("ns", &port_tap),
            ],
        })
        .expect("switch");
        let ns = namespace_on_tap(&format!("vnio-vmt{n}"), &port_tap, n);
        let (a_ip, b_ip) = (format!("10.{n}.0.11"), format!("10.{n}.0.12"));
        // The tap guest: 10.N.1.2, the host's side of its tap 10.N.1.1.
        let c_tap = format!("vmc{n}");
        let c_ip = format!("10.{n}.1.2");

        let mut guard = Guard::default();
        let spec = |name: &str, nic: String| {
            let mut s = VmSpec::new(&format!("{name}{n}"));
            s.accel = vnio_vm::spec::AccelChoice::Auto;
            s.nics = vec![nic.parse().unwrap()];
            s
        };
        let a = spec(
            "a",
            format!("vhost-user:{},ip={a_ip}/24", sock("p1").display()),
        );
        // b's NIC has no receive offloads: a's TSO frames are cut and
        // checksummed by the switch, and b's kernel checks every segment.
        let b = spec(
            "b",
            format!(
                "vhost-user:{},ip={b_ip}/24,guest-offloads=off",
                sock("p2").display()
            ),
        );
        // The launcher gives the host's side of the tap its address.
        let mut c = spec(
            "c",
            format!("tap:{c_tap},ip={c_ip}/24,host-ip=10.{n}.1.1/24"),
        );
        // High latency on the tap guest: on a 2-CPU host its vCPU can still
        // get CPU 1 (no switch poller to reserve a core for).
        c.latency = Latency::High;
        let la = kit.launch(&a, &mut guard);
        let lb = kit.launch(&b, &mut guard);
        let lc = kit.launch(&c, &mut guard);
        println!("accel: {} ({})", la.state.accel.accel, la.state.accel.why);
        agents_answer(&ns, [(&la, &a), (&lb, &b), (&lc, &c)]);
        measured_from_the_namespace_and_the_host(&ns, &kit, [&a_ip, &b_ip, &c_ip]);
        measured_inside_guest_a(&la, &b_ip);
        switch_guests_ping_and_stream(&sw, &la, &lb, &b_ip);
        the_switch_segments_for_b(&sw, &la, &lb, &a_ip, &b_ip);
        tap_guest_as_its_state_says(&lc, &c);
        stop_leaves_nothing(&kit, [(la, &a), (lb, &b), (lc, &c)], &c_tap);
        drop(guard);
        drop(sw);
    });
}

/// A namespace on the switch's tap port `port_tap`: 10.N.0.1; guests .11
/// and .12.
fn namespace_on_tap(nsname: &str, port_tap: &str, n: u8) -> vnio_topo::Netns {
    let ns = vnio_topo::Netns::create(nsname).expect("netns");
    let mut root = vnio_topo::Handle::root().unwrap();
    root.move_to(port_tap, &ns).unwrap();
    let mut inside = ns.handle().unwrap();
    inside.set_up(port_tap).unwrap();
    inside
        .add_address(port_tap, ip(&format!("10.{n}.0.1")), 24)
        .unwrap();
    ns
}

/// Agents: the switch guests from the namespace, the tap guest from the
/// host; launch-to-agent times printed.
fn agents_answer(ns: &vnio_topo::Netns, guests: [(&Launched, &VmSpec); 3]) {
    let [(la, a), (lb, b), (lc, c)] = guests;
    let stop = AtomicBool::new(false);
    let (da, db, dc) = (la.dir.clone(), lb.dir.clone(), lc.dir.clone());
    let ready_a = ns
        .run(|| wait_agent(&da, None, BOOT, &stop))
        .unwrap()
        .expect("agent a");
    let ready_b = ns
        .run(|| wait_agent(&db, None, BOOT, &stop))
        .unwrap()
        .expect("agent b");
    let ready_c = wait_agent(&dc, None, BOOT, &stop).expect("agent c");
    for (name, r) in [
        (&a.name, &ready_a),
        (&b.name, &ready_b),
        (&c.name, &ready_c),
    ] {
        println!(
            "launch-to-agent-ready {name}: {:.1} s (guest init ready at {} s of uptime; accel {})",
            r.since_launch.as_secs_f64(),
            r.guest_uptime
                .map(|u| format!("{u:.2}"))
                .unwrap_or("?".into()),
            la.state.accel.accel
        );
        assert!(r.agent.starts_with("vnio"), "{}", r.agent);
    }
}

/// vnio rr and vnio ping from the namespace (through the switch's tap
/// port) to a and b, and from the host through the tap to c.
fn measured_from_the_namespace_and_the_host(
    ns: &vnio_topo::Netns,
    kit: &Kit,
    [a_ip, b_ip, c_ip]: [&str; 3],
) {
    let run_in_ns = |a: &[&str]| ns.command(&kit.vnio).args(a).output().unwrap();
    let d = ["-d", "2s", "--warmup", "500ms", "--json"];
    measured(
        "rr namespace -> guest a",
        &run_in_ns(&[&["rr", "-t", a_ip][..], &d].concat()),
    );
    measured(
        "ping namespace -> guest b",
        &run_in_ns(&[&["ping", "-t", b_ip][..], &d].concat()),
    );
    // From the host through the tap.
    let on_host = |a: &[&str]| {
        std::process::Command::new(&kit.vnio)
            .args(a)
            .output()
            .unwrap()
    };
    measured(
        "rr host -> guest c (tap)",
        &on_host(&[&["rr", "-t", c_ip][..], &d].concat()),
    );
    measured(
        "ping host -> guest c (tap)",
        &on_host(&[&["ping", "-t", c_ip][..], &d].concat()),
    );
}

/// vnio rr and ping from inside guest a against guest b, over the command
/// channel.
fn measured_inside_guest_a(la: &Launched, b_ip: &str) {
    let t = Duration::from_secs(120);
    for w in ["rr", "ping"] {
        let out = exec(
            &la.dir,
            &args(&[
                "vnio", w, "-t", b_ip, "-d", "2s", "--warmup", "500ms", "--json",
            ]),
            t,
        )
        .expect("exec in guest a");
        assert!(
            out.success(),
            "{w} in guest a: {:?}\n{}",
            out.code,
            out.stderr
        );
        let count = transactions(out.stdout.as_bytes());
        assert!(count > 0, "{w} a -> b: {}", out.stdout);
        println!("{w} guest a -> guest b (inside the guest): {count} transactions");
    }
}

/// What the switch's own QEMU test asserted: ping, and 512 KiB over TCP
/// whose checksum matches.
fn switch_guests_ping_and_stream(sw: &Switch, la: &Launched, lb: &Launched, b_ip: &str) {
    let t = Duration::from_secs(120);
    // What the switch's own QEMU test asserted: ping, and 512 KiB over
    // TCP whose checksum matches.
    let out = exec(&la.dir, &args(&["ping", "-c", "3", "-W", "5", b_ip]), t).unwrap();
    assert!(out.success(), "ping a -> b failed: {}", out.stdout);
    tcp_transfer(&la.dir, &lb.dir, b_ip, 5000, 512, "512 KiB a -> b");
    let ports = sw.handle().list().unwrap();
    let port = |name: &str| &ports.iter().find(|p| p.name == name).unwrap().stats;
    for name in ["p1", "p2"] {
        assert_eq!(port(name).connections, 1, "{name}");
        assert_eq!(port(name).resets, 0, "{name}: {:?}", port(name));
    }
    let (p1, p2) = (port("p1"), port("p2"));
    assert!(
        p1.tx.bytes > 524_288 && p2.rx.bytes > 524_288,
        "{p1:?} {p2:?}"
    );
    assert!(p2.tx.packets > 10 && p1.rx.packets > 10);
    println!("switch guests: ping ok, 512 KiB over TCP intact");
}

/// What the switch's offload test asserted: 1 MiB from the guest with TSO
/// to the guest without receive offloads, 512 KiB back, both intact; the
/// switch segmented GSO frames in software.
fn the_switch_segments_for_b(sw: &Switch, la: &Launched, lb: &Launched, a_ip: &str, b_ip: &str) {
    // What the switch's offload test asserted: 1 MiB from the guest with
    // TSO to the guest without receive offloads, 512 KiB back, both
    // intact; the switch segmented GSO frames in software.
    let before = sw.handle().list().unwrap();
    tcp_transfer(
        &la.dir,
        &lb.dir,
        b_ip,
        5001,
        1024,
        "1 MiB to the guest without offloads",
    );
    tcp_transfer(&lb.dir, &la.dir, a_ip, 5002, 512, "512 KiB back");
    let after = sw.handle().list().unwrap();
    let delta = |name: &str| {
        let b = &before.iter().find(|p| p.name == name).unwrap().stats;
        let a = &after.iter().find(|p| p.name == name).unwrap().stats;
        (
            a.tx.packets - b.tx.packets,
            a.rx.packets - b.rx.packets,
            a.rx.sw_segmented - b.rx.sw_segmented,
            a.rx.sw_checksums - b.rx.sw_checksums,
        )
    };
    let (p1_tx, _, _, _) = delta("p1");
    let (_, p2_rx, p2_segmented, p2_checksums) = delta("p2");
    println!(
        "offloads: p1 sent {p1_tx} frames; p2 got {p2_rx} frames, {p2_segmented} GSO frames segmented, {p2_checksums} checksums completed"
    );
    assert!(p2_segmented > 0, "TSO frames were segmented");
    assert!(p2_rx > p1_tx, "more segments than super-frames");
    for p in &after {
        assert_eq!(p.stats.resets, 0, "{}", p.name);
        assert_eq!(p.stats.tx.drops["malformed"], 0, "{}", p.name);
    }
}

/// The tap guest's vCPU runs where its state says; its latency settings.
fn tap_guest_as_its_state_says(lc: &Launched, c: &VmSpec) {
    if let Some(pin) = &lc.state.pinning {
        let pid = lc.child.id();
        let vcpus = threads_named(pid, "CPU 0/");
        assert_eq!(vcpus.len(), 1, "vCPU thread of {}", c.name);
        assert_eq!(allowed_cpus(pid, &vcpus[0]), pin.vcpus[0].to_string());
        println!("guest c: vCPU 0 pinned to CPU {}", pin.vcpus[0]);
    }
    for s in &lc.state.settings {
        println!(
            "guest c latency high: {:?} {}: {}",
            s.status, s.name, s.detail
        );
    }
}

/// Stop leaves nothing: no QEMU, no tap, no state directory, no socket.
fn stop_leaves_nothing(kit: &Kit, guests: [(Launched, &VmSpec); 3], c_tap: &str) {
    let [(la, a), (lb, b), (lc, c)] = guests;
    let pids: Vec<u32> = [&la, &lb, &lc].iter().map(|l| l.child.id()).collect();
    for (l, spec) in [(la, a), (lb, b), (lc, c)] {
        let mut child = l.child;
        let stopped = vnio_vm::launch::stop(&kit.root.0, &spec.name).expect("stop");
        assert!(stopped.was_running, "{}", spec.name);
        assert!(
            !stopped.removed.iter().any(|r| r.contains("NOT")),
            "{:?}",
            stopped.removed
        );
        let _ = child.wait();
        assert!(!path_exists(l.dir.path()), "{} state left", spec.name);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in pids {
        assert!(!alive(p), "QEMU {p} still running");
    }
    assert!(
        vnio_topo::Handle::root()
            .unwrap()
            .link(c_tap)
            .unwrap()
            .is_none(),
        "tap {c_tap} left behind"
    );
    assert_eq!(
        std::fs::read_dir(&kit.root.0)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count(),
        0,
        "state directories left"
    );
}

/// A guest reaches the host stack through a switch tap port (ping, and a
/// TCP stream to a host listener checked byte for byte) and through an
/// uplink port on a veth pair (ping).
#[test]
fn a_guest_reaches_the_host_through_switch_tap_and_uplink_ports() {
    let Some(kit) = Kit::get("guest to host through tap and uplink ports") else {
        return;
    };
    bounded(Duration::from_secs(600), move || {
        let n = run_id();
        let work = Dir::new("uplink");
        let (tap, va, vb) = (format!("vniog{n}"), format!("vnga{n}"), format!("vngb{n}"));
        let mut root = vnio_topo::Handle::root().unwrap();
        let _ = root.delete_if_exists(&va);
        let _veth = root.add_veth(&va, &vb, None).unwrap();
        root.set_up(&va).unwrap();
        root.set_up(&vb).unwrap();
        root.add_address(&vb, ip(&format!("10.235.{n}.1")), 24)
            .unwrap();
        let sock = work.join("vm.sock");
        let sw = Switch::start(Config {
            switch: SwitchConfig {
                control: work.join("control.sock"),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("vm", &sock, SocketMode::Server),
                PortSpec::tap("host", &tap),
                PortSpec::uplink("up", &va),
            ],
        })
        .expect("switch");
        root.add_address(&tap, ip(&format!("10.234.{n}.1")), 24)
            .unwrap();
        root.set_up(&tap).unwrap();
        let listener = TcpListener::bind(format!("10.234.{n}.1:5001")).unwrap();

        let mut guard = Guard::default();
        let spec = vhost_user_guest(&format!("g{n}"), &sock, &format!("10.234.{n}.2"));
        let g = kit.launch(&spec, &mut guard);
        let stop = AtomicBool::new(false);
        let ready = wait_agent(&g.dir, None, BOOT, &stop).expect("agent");
        println!(
            "launch-to-agent-ready {}: {:.1} s",
            spec.name,
            ready.since_launch.as_secs_f64()
        );
        let t = Duration::from_secs(60);
        let mac = spec.mac(0);
        let out = exec(
            &g.dir,
            &sh(&format!(
                "for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && ip addr add 10.235.{n}.2/24 dev ${{d##*/}}; done; ip -4 addr"
            )),
            t,
        )
        .unwrap();
        assert!(out.stdout.contains(&format!("10.235.{n}.2")), "{out:?}");
        let out = exec(
            &g.dir,
            &args(&["ping", "-c", "2", "-W", "5", &format!("10.234.{n}.1")]),
            t,
        )
        .unwrap();
        assert!(
            out.success(),
            "ping through the tap port failed: {}",
            out.stdout
        );
        let out = exec(
            &g.dir,
            &args(&["ping", "-c", "2", "-W", "5", &format!("10.235.{n}.1")]),
            t,
        )
        .unwrap();
        assert!(
            out.success(),
            "ping through the uplink port failed: {}",
            out.stdout
        );

        tcp_to_listener(
            &g.dir,
            listener,
            256,
            "256 KiB guest -> host through the tap port",
        );
        for p in sw.handle().list().unwrap() {
            assert_eq!(p.stats.resets, 0, "{}", p.name);
        }
        let mut child = g.child;
        let stopped = vnio_vm::launch::stop(&kit.root.0, &spec.name).unwrap();
        assert!(stopped.was_running);
        let _ = child.wait();
        assert!(!path_exists(g.dir.path()));
        drop(guard);
    });
}

/// `--latency high` on a switch port asks the switch (port_set) and reports
/// its answer; stop puts the port's policy back. `--strict` refuses a plan
/// this host cannot honour before anything starts.
#[test]
fn latency_high_asks_the_switch_and_stop_puts_the_port_back() {
    let Some(kit) = Kit::get("latency high on a switch port") else {
        return;
    };
    bounded(Duration::from_secs(300), move || {
        let n = run_id();
        let work = Dir::new("latency");
        let control = work.join("control.sock");
        let sock = work.join("p1.sock");
        let sw = Switch::start(Config {
            switch: SwitchConfig {
                control: control.clone(),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![PortSpec::vhost_user("p1", &sock, SocketMode::Server)],
        })
        .expect("switch");
        let latency_of = |sw: &Switch| {
            sw.handle()
                .list()
                .unwrap()
                .into_iter()
                .find(|p| p.name == "p1")
                .unwrap()
                .policy
                .latency
        };
        let mut spec = VmSpec::new(&format!("h{n}"));
        spec.latency = Latency::High;
        spec.agent_port = 0;
        spec.nics = vec![format!(
            "vhost-user:{},control={}",
            sock.display(),
            control.display()
        )
        .parse()
        .unwrap()];
        let mut guard = Guard::default();
        let l = kit.launch(&spec, &mut guard);
        let port = l
            .state
            .settings
            .iter()
            .find(|s| s.name == "switch port latency-high (nic0)")
            .expect("the switch port setting is listed");
        println!(
            "switch port latency-high: {:?}: {}",
            port.status, port.detail
        );
        match port.status {
            Status::Honoured => {
                assert_eq!(latency_of(&sw), vnio_switch::config::Latency::High);
            }
            _ => {
                // The switch said why; the VM runs anyway (no --strict).
                assert!(port.detail.contains("port p1"), "{}", port.detail);
                assert_eq!(latency_of(&sw), vnio_switch::config::Latency::Normal);
            }
        }
        let saved = vnio_vm::state::State::load(&l.dir).unwrap();
        assert_eq!(saved.settings, l.state.settings, "the state says the same");
        let mut child = l.child;
        let stopped = vnio_vm::launch::stop(&kit.root.0, &spec.name).unwrap();
        let _ = child.wait();
        println!("stop removed: {:?}", stopped.removed);
        assert!(!stopped.removed.iter().any(|r| r.contains("NOT")));
        assert_eq!(latency_of(&sw), vnio_switch::config::Latency::Normal);

        // --strict: refused before QEMU starts when anything is not honoured.
        let prepared = vnio_vm::launch::prepare(&spec, &kit.options()).unwrap();
        let mut strict = spec.clone();
        strict.strict = true;
        match vnio_vm::launch::launch(&strict, &kit.options()) {
            Err(e) => {
                assert!(
                    e.to_string()
                        .starts_with("--strict: this host cannot honour"),
                    "{e}"
                );
                assert!(!path_exists(&kit.root.0.join(&strict.name)), "nothing left");
            }
            Ok(l) => {
                // A host that honours all of it (and a switch that does).
                assert!(prepared.plan.strict_refusal().is_none());
                let mut child = l.child;
                vnio_vm::launch::stop(&kit.root.0, &strict.name).unwrap();
                let _ = child.wait();
            }
        }
        drop(guard);
    });
}
