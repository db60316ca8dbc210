//! The test bed: this host's switch (two vhost-user ports and a VXLAN port
//! toward m1), m1's switch, and guests A and B booted on here, pinging each
//! other over MTU 1450 (what the VXLAN path carries).

use std::path::PathBuf;
use std::process::Command;

use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::launch::Launched;
use vnio_vm::spec::VmSpec;
use vnio_vm::state::{State, VmDir};
use vnio_vm::testkit::{run, run_id, wait_booted, Dir, Guard, Kit};

use super::m1::{m1_switch, migrate_cmd, paths, tls_cmd, Paths};
use super::no_route::agent_without_a_route;
use crate::{Reaped, HERE, M1, VNI};

/// Everything the test's steps share. The fields drop in order: the VMs
/// are stopped first, then both switches, then the directories go.
pub struct Bed {
    _guard: Guard,
    _guests: (Launched, Launched),
    _m1_switch: Reaped,
    _here: Switch,
    pub work: Dir,
    pub kit: Kit,
    /// The run's id (names and subnets).
    pub n: u8,
    /// m1's directory (its switch, state root, certificates, cache).
    pub m1: PathBuf,
    /// m1's state root.
    pub remote_root: PathBuf,
    /// m1's switch control socket.
    pub m1_control: PathBuf,
    /// This host's switch control socket.
    pub control: PathBuf,
    pub a: VmDir,
    pub b: VmDir,
    pub a_ip: String,
    pub b_ip: String,
    /// B's name: the guest that moves.
    pub name: String,
    /// B's QEMU on here, before any migration.
    pub old_pid: u32,
    pub p: Paths,
}

impl Bed {
    /// Both switches up, A and B booted; A's agent is found without a
    /// route, and A pings B.
    pub fn up(kit: Kit) -> Bed {
        let n = run_id();
        let work = Dir::new("tohost");
        let m1 = work.join("m1");
        std::fs::create_dir_all(&m1).unwrap();
        let remote_root = m1.join("vms");
        let m1_control = m1.join("control.sock");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let control = sock("control");
        let here = Switch::start(Config {
            switch: SwitchConfig {
                control: control.clone(),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server),
                PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server),
                PortSpec::vxlan("vx", VNI, HERE.parse().unwrap(), &[M1.parse().unwrap()]),
            ],
        })
        .expect("this host's switch");
        let m1_sw = m1_switch(&m1);

        let (a_ip, b_ip) = (format!("10.{n}.0.11"), format!("10.{n}.0.12"));
        let guest = |name: &str, p: &str, ip: &str| {
            let mut s = VmSpec::new(&format!("{name}{n}"));
            s.nics = vec![format!(
                "vhost-user:{},control={},ip={ip}/24",
                sock(p).display(),
                control.display()
            )
            .parse()
            .unwrap()];
            s
        };
        let mut guard = Guard::default();
        let la = kit.launch(&guest("ta", "p1", &a_ip), &mut guard);
        let lb = kit.launch(&guest("tb", "p2", &b_ip), &mut guard);
        wait_booted(&[&la, &lb]);
        let (a, b) = (la.dir.clone(), lb.dir.clone());
        let name = b.name();
        agent_without_a_route(&kit, &a, &a_ip, n);
        // The VXLAN path carries inner frames up to the underlay's MTU less 50.
        for g in [&a, &b] {
            run(g, "ip link set dev eth0 mtu 1450");
        }
        run(&a, &format!("ping -c 2 -W 5 {b_ip}"));
        let old_pid = State::load(&b).unwrap().pid.unwrap();
        let p = paths(&remote_root);
        Bed {
            _guard: guard,
            _guests: (la, lb),
            _m1_switch: m1_sw,
            _here: here,
            work,
            kit,
            n,
            m1,
            remote_root,
            m1_control,
            control,
            a,
            b,
            a_ip,
            b_ip,
            name,
            old_pid,
            p,
        }
    }

    /// `vnio vm migrate B --to m1` (no TLS options).
    pub fn migrate(&self) -> Command {
        migrate_cmd(
            &self.kit.root.0,
            &self.name,
            &self.remote_root,
            &self.m1_control,
        )
    }

    /// `vnio vm migrate B --to m1` over TLS with the test's certificates.
    pub fn migrate_tls(&self) -> Command {
        tls_cmd(
            &self.kit.root.0,
            &self.name,
            &self.remote_root,
            &self.m1_control,
        )
    }

    /// m1's own image cache (`--remote-cache`).
    pub fn cache(&self) -> PathBuf {
        self.m1.join("cache")
    }

    /// The guest image's directory in m1's cache.
    pub fn cached_image(&self) -> PathBuf {
        self.cache()
            .join("images")
            .join(&self.kit.image.manifest.key)
    }

    /// A pings B `count` times (it answers wherever it runs).
    pub fn ping_b(&self, count: u32) {
        run(&self.a, &format!("ping -c {count} -W 5 {}", self.b_ip));
    }
}
