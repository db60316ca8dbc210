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
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::agent::wait_agent;
use vnio_vm::exec::exec;
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
        let tap = format!("vniomq{n}");
        let sock = work.join("vm.sock");
        let mut vm = PortSpec::vhost_user("vm", &sock, SocketMode::Server);
        vm.queues = Some(2);
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
        let listener = TcpListener::bind(format!("10.237.{n}.1:5003")).unwrap();

        let mut guard = Guard::default();
        let mut spec = vhost_user_guest(&format!("mq{n}"), &sock, &format!("10.237.{n}.2"));
        spec.nics = vec![
            format!("vhost-user:{},ip=10.237.{n}.2/24,queues=2", sock.display())
                .parse()
                .unwrap(),
        ];
        let g = kit.launch(&spec, &mut guard);
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
        let t = Duration::from_secs(60);
        let mac = spec.mac(0);
        let vm_port = || {
            sw.handle()
                .list()
                .unwrap()
                .into_iter()
                .find(|p| p.name == "vm")
                .unwrap()
        };
        let out = exec(
            &g.dir,
            &sh(&format!(
                "for d in /sys/class/net/*; do [ \"$(cat $d/address)\" = {mac} ] && ls $d/queues; done"
            )),
            t,
        )
        .unwrap();
        let queues: Vec<&str> = out.stdout.split_whitespace().collect();
        assert_eq!(
            queues.iter().filter(|q| q.starts_with("rx-")).count(),
            2,
            "the guest has two receive queues: {queues:?} {out:?}"
        );
        assert_eq!(
            vm_port().queues.map(|q| (q.pairs, q.running)),
            Some((2, 2)),
            "both pairs run"
        );
        let out = exec(&g.dir, &sh(&format!("ping -c 3 -W 5 10.237.{n}.1")), t).unwrap();
        assert!(
            out.success(),
            "ping through the switch failed: {}",
            out.stdout
        );
        tcp_to_listener(&g.dir, listener, 256, "256 KiB guest -> host, two pairs");
        // UDP toward the guest from 64 source ports: 64 flows, spread over
        // both pairs by the port's keyed flow hash.
        let before = vm_port().stats.queue_pairs;
        let sent = 64 * 4;
        for sport in 40000..40064u16 {
            let s = UdpSocket::bind(format!("10.237.{n}.1:{sport}")).unwrap();
            for _ in 0..4 {
                s.send_to(b"to one pair", format!("10.237.{n}.2:9"))
                    .unwrap();
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        let after = vm_port().stats.queue_pairs;
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
        let s = vm_port().stats;
        assert!(s.tx.bytes >= 256 * 1024, "{s:?}");
        // Every frame the guest sent is counted on a pair (also the ones the
        // switch then dropped: the pair counts what the guest put there).
        let on_pairs: u64 = s.queue_pairs.iter().map(|p| p.tx_packets).sum();
        let dropped: u64 = s.tx.drops.values().sum();
        assert!(
            (s.tx.packets..=s.tx.packets + dropped).contains(&on_pairs),
            "{s:?}"
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
