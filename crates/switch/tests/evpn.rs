//! VXLAN ports in EVPN mode against real FRR (root and Debian's `frr`;
//! prints a skip line otherwise): three hosts (network namespaces on one
//! underlay bridge), each with zebra and bgpd (iBGP, the first a route
//! reflector) and a vnio switch with an `evpn` VXLAN port and a poll-mode
//! endpoint. The routes converge (timed), endpoints reach each other
//! across hosts, and unicast after convergence floods to nobody.

mod common;

use common::underlay::{ip, ns, skip_reason, tag};
use common::*;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_lab::Netns;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;

const ZEBRA: &str = "/usr/lib/frr/zebra";
const BGPD: &str = "/usr/lib/frr/bgpd";
const VNI: u32 = 4242;
/// How long FRR may take to converge (sessions, then routes).
const CONVERGE: Duration = Duration::from_secs(60);

/// zebra and bgpd of one namespace, killed (by their pid files) when dropped.
struct Frr {
    dir: PathBuf,
}

impl Frr {
    /// Starts zebra and bgpd in `ns` with address `me` peering with
    /// `peers` (as their route reflector when `rr`).
    fn start(ns: &Netns, dir: &Path, me: Ipv4Addr, peers: &[Ipv4Addr], rr: bool) -> Self {
        let _ = std::fs::create_dir_all(dir);
        let mut conf = format!(
            "hostname {}\nrouter bgp 65000\n bgp router-id {me}\n no bgp default ipv4-unicast\n timers bgp 3 9\n",
            ns.name()
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
        let _ = Command::new("chown")
            .args(["-R", "frr:frr"])
            .arg(dir)
            .status();
        let frr = Self {
            dir: dir.to_path_buf(),
        };
        let d = dir.to_str().unwrap();
        for (bin, conf) in [
            (ZEBRA, "/dev/null".to_string()),
            (BGPD, format!("{d}/frr.conf")),
        ] {
            let name = Path::new(bin).file_name().unwrap().to_str().unwrap();
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
                .args([
                    "-i",
                    &format!("{d}/{name}.pid"),
                    "-z",
                    &format!("{d}/zserv.api"),
                ])
                .args(["-f", &conf, "--vty_socket", d])
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {out:?}");
        }
        frr
    }

    fn vtysh(&self, cmd: &str) -> String {
        let out = Command::new("vtysh")
            .args(["--vty_socket", self.dir.to_str().unwrap(), "-c", cmd])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        for name in ["bgpd", "zebra"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(format!("{name}.pid"))) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Host {
    // Dropped in this order: FRR, the switch, then the namespace.
    frr: Option<Frr>,
    sw: Option<Switch>,
    dir: Dir,
    addr: Ipv4Addr,
    ns: Netns,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.frr.take();
        self.sw.take();
    }
}

fn evpn_port(local: Ipv4Addr) -> PortSpec {
    PortSpec {
        evpn: true,
        ..PortSpec::vxlan("vx", VNI, local, &[])
    }
}

fn host(ns: Netns, k: u8, addr: Ipv4Addr) -> Host {
    let dir = Dir::new(&format!("ev{k}"));
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![
            PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
            evpn_port(addr),
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

/// Three hosts on one underlay bridge (in a namespace of its own).
fn underlay(n: u8) -> (Netns, Vec<Host>) {
    let u = ns(&format!("vnev{n}u"));
    ip(&u, &["link", "add", "br0", "type", "bridge"]);
    ip(&u, &["link", "set", "br0", "up"]);
    let mut hosts = Vec::new();
    for k in 1..=3u8 {
        let h = ns(&format!("vnev{n}h{k}"));
        let addr = Ipv4Addr::new(10, 78, n, k);
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
        hosts.push(host(h, k, addr));
    }
    (u, hosts)
}

fn frr_present() -> Option<String> {
    for bin in [ZEBRA, BGPD, "/usr/bin/vtysh"] {
        if !Path::new(bin).exists() {
            return Some(format!("no {bin} (scripts/setup --e2e installs frr)"));
        }
    }
    None
}

/// Whether `h`'s switch has `mac` pinned behind `vtep`.
fn pinned(h: &Host, mac: vnio_switch::wire::EthernetAddress, vtep: Ipv4Addr) -> bool {
    let fdb = h.sw.as_ref().unwrap().handle().fdb().unwrap();
    fdb.iter().any(|e| e.mac == mac && e.remote == Some(vtep))
}

fn datagrams_in(h: &Host, from: Ipv4Addr) -> u64 {
    let vx = port(h.sw.as_ref().unwrap().handle(), "vx");
    vx.stats
        .vteps
        .iter()
        .filter(|r| r.remote == from.to_string())
        .map(|r| r.packets_in)
        .sum()
}

/// Datagrams each host's EVPN port dropped as from an unknown VTEP.
fn unknown_vteps(hosts: &[Host]) -> Vec<u64> {
    hosts
        .iter()
        .map(|h| {
            let vx = port(h.sw.as_ref().unwrap().handle(), "vx");
            vx.stats.tx.drops.get("unknown_vtep").copied().unwrap_or(0)
        })
        .collect()
}

#[test]
fn three_hosts_converge_and_reach_each_other_through_frr() {
    if let Some(why) = skip_reason().or_else(frr_present) {
        println!("skip: EVPN test needs root, the vxlan device and FRR ({why})");
        return;
    }
    bounded(Duration::from_secs(150), || {
        let n = tag();
        let (_u, mut hosts) = underlay(n);
        let addrs: Vec<Ipv4Addr> = hosts.iter().map(|h| h.addr).collect();
        let mut eps: Vec<Endpoint> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let cfg = vnio_switch::endpoint::EndpointConfig::new(
                    mac(i as u8 + 1),
                    common::ip(i as u8 + 1),
                );
                Endpoint::connect(&h.dir.sock("p1"), cfg).unwrap()
            })
            .collect();
        let started = Instant::now();
        for (i, h) in hosts.iter_mut().enumerate() {
            let peers: Vec<Ipv4Addr> = match i {
                0 => addrs[1..].to_vec(),
                _ => vec![addrs[0]],
            };
            let dir = std::env::temp_dir().join(format!("vnio-evpn-{}-{i}", std::process::id()));
            h.frr = Some(Frr::start(&h.ns, &dir, h.addr, &peers, i == 0));
        }
        // Each endpoint says who it is (a broadcast its switch learns from)
        // until every switch has every other endpoint pinned behind its host.
        let deadline = started + CONVERGE;
        loop {
            for (i, ep) in eps.iter_mut().enumerate() {
                ep.send_frame(&frame([0xff; 6], i as u8 + 1, 0x88b5))
                    .unwrap();
                ep.drain(64);
            }
            let done = (0..3)
                .all(|i| (0..3).all(|j| i == j || pinned(&hosts[i], mac(j as u8 + 1), addrs[j])));
            if done {
                break;
            }
            if Instant::now() > deadline {
                for h in &hosts {
                    let f = h.frr.as_ref().unwrap();
                    println!("{}", f.vtysh("show bgp l2vpn evpn summary"));
                    println!("{}", f.vtysh(&format!("show evpn mac vni {VNI}")));
                    println!("{:?}", h.sw.as_ref().unwrap().handle().fdb());
                }
                panic!("EVPN did not converge within {CONVERGE:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        println!(
            "EVPN converged (3 hosts, route reflector): {:.2} s from FRR's start",
            started.elapsed().as_secs_f64()
        );
        let strangers_at_convergence = unknown_vteps(&hosts);
        for h in &hosts {
            let vx = port(h.sw.as_ref().unwrap().handle(), "vx");
            let rows: Vec<&str> = vx.stats.vteps.iter().map(|r| r.remote.as_str()).collect();
            assert_eq!(rows.len(), 2, "flood list of {}: {rows:?}", h.addr);
        }

        // Endpoint 1 talks to endpoint 2 (ARP, then unicast): host 3 hears
        // the ARP broadcast and nothing of the unicast.
        let mut b = eps.remove(1);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let rb = std::thread::spawn(move || {
            b.serve(Duration::from_secs(60), &move || s.load(Ordering::SeqCst))
                .unwrap();
            b
        });
        let a = &mut eps[0];
        a.resolve(common::ip(2), T)
            .expect("ARP answered across EVPN");
        let before = datagrams_in(&hosts[2], addrs[0]);
        a.ping(common::ip(2), 9, 1, b"over evpn").unwrap();
        let got = a.poll_until(T, |_, ev| match ev {
            vnio_switch::endpoint::stack::Event::EchoReply { seq, .. } => Some(seq),
            _ => None,
        });
        assert_eq!(got.expect("ping answered across EVPN"), 1);
        let peer = std::net::SocketAddrV4::new(common::ip(2).into(), 7);
        let mut buf = [0u8; 2048];
        for i in 0..100u32 {
            a.udp_send_to(peer, 4000, format!("datagram {i}").as_bytes())
                .unwrap();
            a.udp_recv_timeout(&mut buf, T).unwrap().expect("echoed");
        }
        stop.store(true, Ordering::SeqCst);
        rb.join().unwrap();
        let floods = datagrams_in(&hosts[2], addrs[0]) - before;
        println!("unknown-unicast floods to host 3 during 101 unicast exchanges 1<->2: {floods}");
        assert_eq!(floods, 0);
        // Strangers were dropped only while routes were still arriving.
        assert_eq!(unknown_vteps(&hosts), strangers_at_convergence);
        drop(hosts);
    });
}
