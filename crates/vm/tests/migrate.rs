//! Live migration through the switch with real guests (QEMU, TCG here, as
//! root): guest A pings guest B every 10 ms while B moves to a new QEMU
//! with `vnio_vm::migrate` (what `vnio vm migrate` runs); at most 5% of the
//! pings may be lost, B answers afterwards from a new pid, and a paced TCP
//! stream from B to A across the migration arrives with the sender's md5.
//! The downtime QEMU reports is printed. Without root, QEMU or the guests'
//! static vnio the test prints one "skip:" line and passes.

use std::time::Duration;

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::spec::VmSpec;
use vnio_vm::state::{self, State};
use vnio_vm::testkit::*;

#[test]
fn a_guest_migrates_under_ping_and_tcp_with_little_loss() {
    migrates_under_ping_and_tcp("");
}

/// The same on packed rings: the switch logs the descriptors it writes
/// in the one ring both sides share, and its event area.
#[test]
fn a_guest_on_packed_rings_migrates_under_ping_and_tcp() {
    migrates_under_ping_and_tcp(",packed=on");
}

/// Guest B (NIC options `nic_opts`) migrates while A pings it every 10 ms
/// and B streams to A.
fn migrates_under_ping_and_tcp(nic_opts: &'static str) {
    let Some(kit) = Kit::get("live migration through the switch") else {
        return;
    };
    if std::env::var("VNIO_LOG").as_deref() == Ok("debug") {
        // Shows QEMU's requests: SET_LOG_BASE, the log flag, LOG_ALL on and off.
        vnio_switch::logging::init(vnio_switch::logging::LevelFilter::Debug);
    }
    bounded(Duration::from_secs(900), move || {
        let n = run_id();
        let work = Dir::new("migrate");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let control = sock("control");
        let _sw = Switch::start(Config {
            switch: SwitchConfig {
                control: control.clone(),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server),
                PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server),
            ],
        })
        .expect("switch");
        let (a_ip, b_ip) = (format!("10.{n}.0.11"), format!("10.{n}.0.12"));
        let guest = |name: &str, p: &str, ip: &str| {
            let mut s = VmSpec::new(&format!("{name}{n}"));
            s.accel = vnio_vm::spec::AccelChoice::Auto;
            s.nics = vec![format!(
                "vhost-user:{},control={},ip={ip}/24{nic_opts}",
                sock(p).display(),
                control.display()
            )
            .parse()
            .unwrap()];
            s
        };
        let mut guard = Guard::default();
        let la = kit.launch(&guest("a", "p1", &a_ip), &mut guard);
        let lb = kit.launch(&guest("b", "p2", &b_ip), &mut guard);
        wait_booted(&[&la, &lb]);
        let (a, b) = (la.dir.clone(), lb.dir.clone());
        run(&a, &format!("ping -c 2 -W 5 {b_ip}"));

        let traffic = Traffic::start(&a, &b, &a_ip, &b_ip);

        // The guest's driver negotiated the layout asked for (bit 34:
        // VIRTIO_F_RING_PACKED).
        let packed = || {
            let f = run(&b, "cat /sys/class/net/eth0/device/features");
            f.trim().as_bytes().get(34) == Some(&b'1')
        };
        assert_eq!(packed(), nic_opts.contains("packed=on"), "ring layout");
        let old_pid = State::load(&b).unwrap().pid.unwrap();
        let m = vnio_vm::migrate::migrate(&kit.root.0, &b.name()).expect("migration");
        println!(
            "migration: total {} ms, downtime {} ms, setup {:?} ms, {:?} bytes of RAM, {} ms in all; ports {:?}",
            m.total_ms, m.downtime_ms, m.setup_ms, m.ram_transferred, m.wall_ms, m.ports
        );
        assert_eq!(m.old_pid, old_pid);
        assert_ne!(m.new_pid, old_pid, "a new QEMU runs the guest");
        let st = State::load(&b).unwrap();
        assert_eq!(st.pid, Some(m.new_pid), "the state has the new pid");
        assert!(state::is_ours(m.new_pid, &b));
        assert!(!alive(old_pid), "the source QEMU is gone");
        assert!(m.total_ms > 0, "QEMU reported the migration's time");

        traffic.check(&a, &b);
        // B answers on its new QEMU, on the same layout.
        run(&a, &format!("ping -c 3 -W 5 {b_ip}"));
        assert_eq!(packed(), nic_opts.contains("packed=on"), "ring layout");
        drop(guard);
        assert!(!alive(m.new_pid), "stop ended the migrated QEMU");
    });
}
