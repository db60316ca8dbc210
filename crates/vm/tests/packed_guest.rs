//! End to end with a real guest on packed virtqueues: QEMU (TCG here)
//! with `virtio-net-pci,packed=on` on a vnio switch vhost-user port
//! (`--nic vhost-user:SOCK,packed=on`). The guest's kernel must have
//! negotiated VIRTIO_F_RING_PACKED (its sysfs features), ping the host
//! through the switch's tap port and move 256 KiB over TCP to it intact
//! (its ACKs come back on the packed receive ring). Without root, QEMU or
//! the guests' static vnio the test prints one "skip:" line and passes.

use std::net::{IpAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_switch::port_info::PortInfo;
use vnio_switch::stats::PortStatsSnapshot;
use vnio_vm::agent::wait_agent;
use vnio_vm::exec::exec;
use vnio_vm::spec::VmSpec;
use vnio_vm::state::VmDir;
use vnio_vm::testkit::*;

/// VIRTIO_F_RING_PACKED.
const RING_PACKED_BIT: usize = 34;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_guest_on_packed_rings_reaches_the_host_through_the_switch() {
    let Some(kit) = Kit::get("guest on packed virtqueues") else {
        return;
    };
    bounded(Duration::from_secs(600), move || {
        let n = run_id();
        let work = Dir::new("packed");
        let sock = work.join("vm.sock");
        let sw = switch_with_a_host_tap(&work, &sock, n);
        let listener = TcpListener::bind(format!("10.236.{n}.1:5002")).unwrap();

        let mut guard = Guard::default();
        let mut spec = vhost_user_guest(&format!("pk{n}"), &sock, &format!("10.236.{n}.2"));
        spec.nics = vec![
            format!("vhost-user:{},ip=10.236.{n}.2/24,packed=on", sock.display())
                .parse()
                .unwrap(),
        ];
        let g = kit.launch(&spec, &mut guard);
        assert!(
            g.plan.argv.iter().any(|a| a.contains("packed=on")),
            "the NIC is packed"
        );
        let stop = AtomicBool::new(false);
        let ready = wait_agent(&g.dir, None, BOOT, &stop).expect("agent");
        println!(
            "launch-to-agent-ready {}: {:.1} s",
            spec.name,
            ready.since_launch.as_secs_f64()
        );
        let before = vm_port(&sw).stats;
        packed_rings_negotiated(&g.dir, &spec);
        let out = exec(
            &g.dir,
            &sh(&format!("ping -c 3 -W 5 10.236.{n}.1")),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(
            out.success(),
            "ping through the switch failed: {}",
            out.stdout
        );
        tcp_to_listener(
            &g.dir,
            listener,
            256,
            "256 KiB guest -> host on packed rings",
        );
        for p in sw.handle().list().unwrap() {
            assert_eq!(p.stats.resets, 0, "{}", p.name);
        }
        traffic_counted(&before, &vm_port(&sw).stats);
        let mut child = g.child;
        let stopped = vnio_vm::launch::stop(&kit.root.0, &spec.name).unwrap();
        assert!(stopped.was_running);
        let _ = child.wait();
        assert!(!path_exists(g.dir.path()));
        drop(guard);
    });
}

/// A switch with port `vm` (server socket `sock`) and a tap port `host`
/// at 10.236.N.1/24.
fn switch_with_a_host_tap(work: &Dir, sock: &Path, n: u8) -> Switch {
    let tap = format!("vniop{n}");
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: work.join("control.sock"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![
            PortSpec::vhost_user("vm", sock, SocketMode::Server),
            PortSpec::tap("host", &tap),
        ],
    })
    .expect("switch");
    let mut root = vnio_topo::Handle::root().unwrap();
    root.add_address(&tap, ip(&format!("10.236.{n}.1")), 24)
        .unwrap();
    root.set_up(&tap).unwrap();
    sw
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

/// The guest's driver negotiated packed rings (its sysfs features).
fn packed_rings_negotiated(dir: &VmDir, spec: &VmSpec) {
    let mac = spec.mac(0);
    let out = exec(
        dir,
        &sh(&format!(
            "for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && cat $d/device/features; done"
        )),
        Duration::from_secs(60),
    )
    .unwrap();
    let features = out.stdout.trim();
    assert_eq!(
        features.as_bytes().get(RING_PACKED_BIT),
        Some(&b'1'),
        "the guest's driver negotiated packed rings: {features:?}"
    );
}

/// The guest sends TSO frames (few, large); the host's ACKs come back one
/// frame each: the port's counters `before` and `after` the traffic.
fn traffic_counted(before: &PortStatsSnapshot, after: &PortStatsSnapshot) {
    let ring_full = |s: &PortStatsSnapshot| s.rx.drops.get("ring_full").copied().unwrap_or(0);
    println!(
        "packed guest: sent {} frames ({} B), received {} frames during the traffic; receive ring full {} times before, {} during",
        after.tx.packets - before.tx.packets,
        after.tx.bytes - before.tx.bytes,
        after.rx.packets - before.rx.packets,
        ring_full(before),
        ring_full(after) - ring_full(before),
    );
    assert!(after.tx.bytes - before.tx.bytes >= 256 * 1024, "{after:?}");
    assert!(after.rx.packets - before.rx.packets >= 10, "{after:?}");
}
