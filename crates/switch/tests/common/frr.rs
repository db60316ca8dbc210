//! A small EVPN fabric for the EVPN tests (root and Debian's `frr`):
//! hosts as network namespaces on one underlay bridge, each with FRR's
//! zebra and bgpd (iBGP, the first host a route reflector), and either a
//! vnio switch with an `evpn` VXLAN port and vhost-user ports `p1`, `p2`,
//! or a kernel VTEP (Linux bridge and `vxlan` device, an address behind it
//! on a veth). Everything goes when the hosts and the underlay drop.

use super::underlay::{ip, ns};
use super::Dir;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use vnio_lab::Netns;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;

const ZEBRA: &str = "/usr/lib/frr/zebra";
const BGPD: &str = "/usr/lib/frr/bgpd";
const VTYSH: &str = "/usr/bin/vtysh";
/// The fabric's VNI.
pub const VNI: u32 = 4242;

/// Why the EVPN tests cannot run here, if they cannot.
pub fn frr_missing() -> Option<String> {
    [ZEBRA, BGPD, VTYSH]
        .iter()
        .find(|b| !Path::new(b).exists())
        .map(|b| format!("no {b} (scripts/setup --e2e installs frr)"))
}

/// zebra and bgpd of one namespace, killed (by their pid files) when dropped.
pub struct Frr {
    dir: PathBuf,
}

impl Frr {
    /// Starts zebra and bgpd in `ns`, router `me`, peering with `peers`
    /// (as their route reflector when `rr`).
    fn start(ns: &Netns, me: Ipv4Addr, peers: &[Ipv4Addr], rr: bool) -> Self {
        let dir = std::env::temp_dir().join(format!("vnio-frr-{}-{me}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut conf = format!(
            "router bgp 65000\n bgp router-id {me}\n no bgp default ipv4-unicast\n timers bgp 3 9\n"
        );
        for p in peers {
            conf += &format!(" neighbor {p} remote-as 65000\n neighbor {p} timers connect 1\n");
        }
        conf += " address-family l2vpn evpn\n";
        for p in peers {
            conf += &format!("  neighbor {p} activate\n");
            if rr {
                conf += &format!("  neighbor {p} route-reflector-client\n");
            }
        }
        conf += "  advertise-all-vni\n exit-address-family\n";
        std::fs::write(dir.join("frr.conf"), conf).unwrap();
        // The daemons drop to user frr: their files must be its.
        let _ = Command::new("chown")
            .arg("-R")
            .arg("frr:frr")
            .arg(&dir)
            .status();
        let frr = Self { dir };
        let d = frr.dir.to_str().unwrap();
        let bgpd_conf = format!("{d}/frr.conf");
        for (bin, name, conf) in [(ZEBRA, "zebra", "/dev/null"), (BGPD, "bgpd", &*bgpd_conf)] {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns.name(),
                    bin,
                    "-d",
                    "-u",
                    "frr",
                    "-g",
                    "frr",
                ])
                .args(["-i", &format!("{d}/{name}.pid")])
                .args(["-z", &format!("{d}/zserv.api")])
                .args(["-f", conf, "--vty_socket", d])
                .output()
                .unwrap();
            assert!(out.status.success(), "{name} did not start: {out:?}");
        }
        frr
    }

    /// What `vtysh -c cmd` prints.
    pub fn vtysh(&self, cmd: &str) -> String {
        let out = Command::new(VTYSH)
            .args(["--vty_socket", self.dir.to_str().unwrap(), "-c", cmd])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Frr {
    /// Stops the daemons as a service manager would (SIGTERM: zebra takes
    /// its routes out of the kernel as it leaves) and waits for them.
    pub fn stop(mut self) {
        stop_daemons(&self.dir, "TERM");
        self.dir = PathBuf::new();
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        // Teardown: at once (a graceful exit takes seconds).
        if !self.dir.as_os_str().is_empty() {
            stop_daemons(&self.dir, "KILL");
        }
    }
}

/// Sends `signal` to the daemons whose pid files are in `dir`, waits up
/// to 5 s for each to exit, and removes `dir`.
fn stop_daemons(dir: &Path, signal: &str) {
    for name in ["bgpd", "zebra"] {
        let Ok(pid) = std::fs::read_to_string(dir.join(format!("{name}.pid"))) else {
            continue;
        };
        let pid = pid.trim();
        let _ = Command::new("kill").args(["-s", signal, pid]).status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Whether process `pid` runs (a zombie has exited).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Stops the daemons of earlier runs that ended without unwinding (a
/// test that timed out): their directories name a process that is gone.
fn stop_stale_daemons() {
    let Ok(dirs) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for d in dirs.flatten() {
        let name = d.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("vnio-frr-")
            .and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if !alive(pid) {
            stop_daemons(&d.path(), "KILL");
        }
    }
}

/// One host of the fabric.
pub struct Host {
    pub frr: Option<Frr>,
    /// The vnio switch (None: a kernel VTEP).
    pub sw: Option<Switch>,
    pub dir: Dir,
    /// Its underlay address (the VTEP).
    pub addr: Ipv4Addr,
    pub ns: Netns,
}

impl Drop for Host {
    fn drop(&mut self) {
        // FRR first: it must not see the shadow devices go.
        self.frr.take();
        self.sw.take();
    }
}

fn vnio_host(ns: Netns, k: usize, addr: Ipv4Addr) -> Host {
    let dir = Dir::new(&format!("ev{k}"));
    let mut evpn = PortSpec::vxlan("vx", VNI, addr, &[]);
    if let Some(v) = evpn.kind.vxlan_mut() {
        v.evpn = true;
    }
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            // Room for the scale run's MACs (the default table holds 8192).
            fdb_capacity: 1 << 16,
            ..SwitchConfig::default()
        },
        ports: vec![
            PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
            PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server),
            evpn,
        ],
    };
    let sw = ns.run(move || Switch::start(cfg)).unwrap().unwrap();
    Host {
        frr: None,
        sw: Some(sw),
        dir,
        addr,
        ns,
    }
}

/// A Linux bridge and `vxlan` device (the standard port, no learning:
/// FRR fills its FDB), and `host` on a veth behind it.
fn kernel_host(ns: Netns, k: usize, addr: Ipv4Addr, host: Ipv4Addr) -> Host {
    let (vni, a) = (VNI.to_string(), addr.to_string());
    ip(
        &ns,
        &["link", "add", "kb", "type", "bridge", "stp_state", "0"],
    );
    ip(
        &ns,
        &[
            "link",
            "add",
            "kx",
            "type",
            "vxlan",
            "id",
            &vni,
            "local",
            &a,
            "dstport",
            "4789",
            "nolearning",
        ],
    );
    ip(
        &ns,
        &["link", "add", "kv", "type", "veth", "peer", "name", "kp"],
    );
    for d in ["kx", "kv"] {
        ip(&ns, &["link", "set", d, "master", "kb"]);
    }
    ip(&ns, &["addr", "add", &format!("{host}/24"), "dev", "kp"]);
    for d in ["kb", "kx", "kv", "kp"] {
        ip(&ns, &["link", "set", d, "up"]);
    }
    // Only kp answers ARP for its address (the bridge would too: same
    // namespace).
    in_ns(&ns, &["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1"]);
    in_ns(
        &ns,
        &["bridge", "link", "set", "dev", "kx", "learning", "off"],
    );
    Host {
        frr: None,
        sw: None,
        dir: Dir::new(&format!("ev{k}")),
        addr,
        ns,
    }
}

/// Runs `args` in `ns`, which must succeed.
fn in_ns(ns: &Netns, args: &[&str]) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// `vnio` vnio hosts and after them a kernel VTEP per address in
/// `kernel` (the address behind it), on underlay 10.78.`n`.0/24, FRR
/// running on each.
pub fn fabric(n: u8, vnio: usize, kernel: &[Ipv4Addr]) -> (Netns, Vec<Host>) {
    stop_stale_daemons();
    let u = ns(&format!("vnev{n}u"));
    ip(&u, &["link", "add", "br0", "type", "bridge"]);
    ip(&u, &["link", "set", "br0", "up"]);
    let count = vnio + kernel.len();
    let mut hosts = Vec::new();
    for k in 1..=count {
        let h = ns(&format!("vnev{n}h{k}"));
        let addr = Ipv4Addr::new(10, 78, n, k as u8);
        let side = format!("h{k}");
        ip(
            &u,
            &[
                "link",
                "add",
                &side,
                "type",
                "veth",
                "peer",
                "name",
                "ul",
                "netns",
                h.name(),
            ],
        );
        ip(&u, &["link", "set", &side, "master", "br0", "up"]);
        ip(&h, &["addr", "add", &format!("{addr}/24"), "dev", "ul"]);
        ip(&h, &["link", "set", "ul", "up"]);
        ip(&h, &["link", "set", "lo", "up"]);
        hosts.push(match k.checked_sub(vnio + 1).and_then(|i| kernel.get(i)) {
            Some(&behind) => kernel_host(h, k, addr, behind),
            _ => vnio_host(h, k, addr),
        });
    }
    let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.addr).collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        let peers = match i {
            0 => addrs[1..].to_vec(),
            _ => vec![addrs[0]],
        };
        h.frr = Some(Frr::start(&h.ns, h.addr, &peers, i == 0));
    }
    (u, hosts)
}
