//! End to end with a real guest on a multiqueue vNIC: QEMU (TCG here) with
//! `-netdev vhost-user,queues=2` and `virtio-net-pci,mq=on` on a vnio
//! switch port offering two queue pairs (`--nic vhost-user:SOCK,queues=2`).
//! The guest's init turns both pairs on (ETHTOOL_SCHANNELS): its sysfs
//! shows two receive queues, it pings the host through the switch's tap
//! port and moves 256 KiB over TCP to it intact; 64 UDP flows from the
//! host reach the guest spread over both receive queues (the switch's per
//! pair counters; the flow hash is keyed per port, so which flow lands
//! where is not known in advance, and all 64 on one pair has odds of
//! 2^-63). Without root, QEMU or the
//! guests' static vnio the test prints one "skip:" line and passes.

use std::net::{IpAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_switch::port_info::PortInfo;
use vnio_vm::agent::wait_agent;
use vnio_vm::exec::exec;
use vnio_vm::launch::Launched;
use vnio_vm::spec::VmSpec;
use vnio_vm::testkit::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_guest_with_two_queue_pairs_uses_both() {
    let Some(kit) = Kit::get("guest on a multiqueue vNIC") else {
        return;
    };
    if std::env::var("VNIO_LOG").as_deref() == Ok("debug") {
        // Shows which pairs QEMU sets up and enables, and when.
        vnio_switch::logging::init(vnio_switch::logging::LevelFilter::Debug);
    }
    bounded(Duration::from_secs(600), move || {
        let n = run_id();
        let work = Dir::new("mq");
        let sock = work.join("vm.sock");
        let sw = two_pair_switch(&work, &sock, n);
        let listener = TcpListener::bind(format!("10.237.{n}.1:5003")).unwrap();
        let mut guard = Guard::default();
        let (g, spec) = launch_two_pair_guest(&kit, &sock, n, &mut guard);
        guest_runs_both_pairs(&g, &spec, &sw);
        let out = exec(
            &g.dir,
            &sh(&format!("ping -c 3 -W 5 10.237.{n}.1")),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(
            out.success(),
            "ping through the switch failed: {}",
            out.stdout
        );
        tcp_to_listener(&g.dir, listener, 256, "256 KiB guest -> host, two pairs");
        udp_flows_reach_both_pairs(&sw, n);
        every_frame_counted_on_a_pair(&sw);
        let mut child = g.child;
        let stopped = vnio_vm::launch::stop(&kit.root.0, &spec.name).unwrap();
        assert!(stopped.was_running);
        let _ = child.wait();
        assert!(!path_exists(g.dir.path()));
        drop(guard);
    });
}

/// A switch with port `vm` (two queue pairs, server socket `sock`) and a
/// tap port `host` at 10.237.N.1/24.
fn two_pair_switch(work: &Dir, sock: &Path, n: u8) -> Switch {
    let tap = format!("vniomq{n}");
    let mut vm = PortSpec::vhost_user("vm", sock, SocketMode::Server);
    vm.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: work.join("control.sock"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![vm, PortSpec::tap("host", &tap)],
    })
    .expect("switch");
    let mut root = vnio_topo::Handle::root().unwrap();
    root.add_address(&tap, ip(&format!("10.237.{n}.1")), 24)
        .unwrap();
    root.set_up(&tap).unwrap();
    sw
}

/// The guest at 10.237.N.2 with two queue pairs on `sock`, its agent
/// answering; QEMU was asked for both pairs.
fn launch_two_pair_guest(kit: &Kit, sock: &Path, n: u8, guard: &mut Guard) -> (Launched, VmSpec) {
    let mut spec = vhost_user_guest(&format!("mq{n}"), sock, &format!("10.237.{n}.2"));
    spec.nics = vec![
        format!("vhost-user:{},ip=10.237.{n}.2/24,queues=2", sock.display())
            .parse()
            .unwrap(),
    ];
    let g = kit.launch(&spec, guard);
    assert!(
        g.plan.argv.iter().any(|a| a.contains("mq=on"))
            && g.plan.argv.iter().any(|a| a.ends_with(",queues=2")),
        "QEMU is asked for two pairs: {:?}",
        g.plan.argv
    );
    let stop = AtomicBool::new(false);
    let ready = wait_agent(&g.dir, None, BOOT, &stop).expect("agent");
    println!(
        "launch-to-agent-ready {}: {:.1} s",
        spec.name,
        ready.since_launch.as_secs_f64()
    );
    (g, spec)
}

/// The switch's port `vm` as it lists it now.
fn vm_port(sw: &Switch) -> PortInfo {
    sw.handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "vm")
        .unwrap()
}

/// The guest's NIC has two receive queues, and the switch runs both pairs.
fn guest_runs_both_pairs(g: &Launched, spec: &VmSpec, sw: &Switch) {
    let mac = spec.mac(0);
    let out = exec(
        &g.dir,
        &sh(&format!(
            "for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && ls $d/queues; done"
        )),
        Duration::from_secs(60),
    )
    .unwrap();
    let queues: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(
        queues.iter().filter(|q| q.starts_with("rx-")).count(),
        2,
        "the guest has two receive queues: {queues:?} {out:?}"
    );
    assert_eq!(
        vm_port(sw).queues.map(|q| (q.pairs, q.running)),
        Some((2, 2)),
        "both pairs run"
    );
}

/// UDP toward the guest from 64 source ports: 64 flows, spread over
/// both pairs by the port's keyed flow hash.
fn udp_flows_reach_both_pairs(sw: &Switch, n: u8) {
    let before = vm_port(sw).stats.queue_pairs;
    let sent = 64 * 4;
    for sport in 40000..40064u16 {
        let s = UdpSocket::bind(format!("10.237.{n}.1:{sport}")).unwrap();
        for _ in 0..4 {
            s.send_to(b"to one pair", format!("10.237.{n}.2:9"))
                .unwrap();
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let after = vm_port(sw).stats.queue_pairs;
    println!("two-pair guest: per pair counters before the UDP flows {before:?}, after {after:?}; UDP frames sent {sent}");
    let got: Vec<u64> = (0..2)
        .map(|k| after[k].rx_packets - before[k].rx_packets)
        .collect();
    assert!(
        got.iter().sum::<u64>() >= sent,
        "every frame arrived: {after:?}"
    );
    for (k, g) in got.iter().enumerate() {
        // A flow's four frames at least.
        assert!(*g >= 4, "pair {k} received flows: {after:?}");
    }
}

/// The guest's 256 KiB left through the port, and every frame the guest
/// sent is counted on a pair (also the ones the switch then dropped: the
/// pair counts what the guest put there); no port was reset.
fn every_frame_counted_on_a_pair(sw: &Switch) {
    let s = vm_port(sw).stats;
    assert!(s.tx.bytes >= 256 * 1024, "{s:?}");
    let on_pairs: u64 = s.queue_pairs.iter().map(|p| p.tx_packets).sum();
    let dropped: u64 = s.tx.drops.values().sum();
    assert!(
        (s.tx.packets..=s.tx.packets + dropped).contains(&on_pairs),
        "{s:?}"
    );
    for p in sw.handle().list().unwrap() {
        assert_eq!(p.stats.resets, 0, "{}", p.name);
    }
}
