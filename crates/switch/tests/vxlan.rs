//! VXLAN ports against the real thing (root only; prints a skip line
//! otherwise): two vnio switches in two network namespaces joined over a
//! veth pair, and a vnio switch facing the Linux kernel's `vxlan` device on
//! a bridge. Each switch runs in its namespace (started on a thread that
//! joined it: its workers and sockets stay there); the poll-mode endpoints
//! reach them over Unix sockets, which namespaces do not separate.

mod common;

use common::underlay::{ip, ns, skip_reason, tag, veth};
use common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vnio_lab::Netns;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;
use vnio_switch::wire::Ipv4Address;
use vnio_switch::worker::PortInfo;

fn switch_in(ns: &Netns, dir: &Dir, mut extra: Vec<PortSpec>) -> Switch {
    let mut ports = vec![PortSpec::vhost_user(
        "p1",
        dir.sock("p1"),
        SocketMode::Server,
    )];
    ports.append(&mut extra);
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports,
    };
    ns.run(move || Switch::start(cfg)).unwrap().unwrap()
}

fn endpoint_on(dir: &Dir, n: u8) -> Endpoint {
    Endpoint::connect(
        &dir.sock("p1"),
        vnio_switch::endpoint::EndpointConfig::new(mac(n), common::ip(n)),
    )
    .unwrap()
}

fn responder(mut ep: Endpoint, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Endpoint> {
    std::thread::spawn(move || {
        let s = stop.clone();
        ep.serve(Duration::from_secs(60), &move || s.load(Ordering::SeqCst))
            .unwrap();
        ep
    })
}

/// ARP, a ping and 50 UDP echoes from `a` to `dst` (which must answer).
fn talk(a: &mut Endpoint, dst: Ipv4Address, dst_mac: Option<vnio_switch::wire::EthernetAddress>) {
    let m = a.resolve(dst, T).expect("ARP answered across the overlay");
    if let Some(want) = dst_mac {
        assert_eq!(m, want);
    }
    a.ping(dst, 9, 1, b"over vxlan").unwrap();
    let seq = a.poll_until(T, |_, ev| match ev {
        Event::EchoReply { src, ident: 9, seq } if src == dst => Some(seq),
        _ => None,
    });
    assert_eq!(seq.expect("ping answered"), 1);
    let peer = SocketAddrV4::new(dst.into(), 7);
    let mut buf = [0u8; 2048];
    for i in 0..50u32 {
        let msg = format!("datagram {i} {}", "x".repeat(i as usize * 20));
        a.udp_send_to(peer, 4000, msg.as_bytes()).unwrap();
        let (from, port, n) = a
            .udp_recv_timeout(&mut buf, T)
            .unwrap()
            .unwrap_or_else(|| panic!("UDP echo {i}"));
        assert_eq!((from, port, &buf[..n]), (peer, 4000, msg.as_bytes()));
    }
}

fn port<'a>(ports: &'a [PortInfo], name: &str) -> &'a PortInfo {
    ports.iter().find(|p| p.name == name).unwrap()
}

#[test]
fn two_vnio_switches_joined_over_vxlan() {
    if let Some(why) = skip_reason() {
        println!("skip: vxlan test needs root and the vxlan device ({why})");
        return;
    }
    bounded(Duration::from_secs(60), || {
        let n = tag();
        let (na, nb) = (ns(&format!("vnvx{n}a")), ns(&format!("vnvx{n}b")));
        let (ua, ub) = (Ipv4Addr::new(10, 77, n, 1), Ipv4Addr::new(10, 77, n, 2));
        veth(&na, "ul", ua, &nb, "ul", ub);
        let (d1, d2) = (Dir::new("vx1"), Dir::new("vx2"));
        let sw1 = switch_in(&na, &d1, vec![PortSpec::vxlan("vx", 42, ua, &[ub])]);
        let sw2 = switch_in(&nb, &d2, vec![PortSpec::vxlan("vx", 42, ub, &[ua])]);
        let mut a = endpoint_on(&d1, 1);
        let mut b = endpoint_on(&d2, 2);

        // a -> b, then b -> a.
        let stop = Arc::new(AtomicBool::new(false));
        let rb = responder(b, stop.clone());
        talk(&mut a, common::ip(2), Some(mac(2)));
        stop.store(true, Ordering::SeqCst);
        b = rb.join().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let ra = responder(a, stop.clone());
        talk(&mut b, common::ip(1), Some(mac(1)));
        stop.store(true, Ordering::SeqCst);
        let mut a = ra.join().unwrap();

        // A frame that would not fit the underlay once encapsulated
        // (1514 > 1500 - 36) is dropped, not fragmented; a datagram of
        // another VNI and one without the I flag are dropped on receipt.
        let big = vec![7u8; 1472];
        a.udp_send_to(SocketAddrV4::new(common::ip(2).into(), 9), 4000, &big)
            .unwrap();
        nb.run(move || {
            let u = UdpSocket::bind(SocketAddrV4::new(ub, 0)).unwrap();
            for flags in [0x08u8, 0x00] {
                let mut d = vec![flags, 0, 0, 0, 0, 0, 43, 0];
                d.extend_from_slice(&[0xff; 6]);
                d.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06]);
                d.resize(8 + 60, 0);
                u.send_to(&d, SocketAddrV4::new(ua, 4789)).unwrap();
            }
        })
        .unwrap();
        let deadline = std::time::Instant::now() + T;
        let drops = loop {
            let ports = sw1.handle().list().unwrap();
            let vx = port(&ports, "vx");
            let d = (vx.stats.rx.drops["too_big"], vx.stats.tx.drops["vni"]);
            if d == (1, 2) || std::time::Instant::now() > deadline {
                break d;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        println!(
            "switch at {ua}: too_big drops toward the overlay {}, vni drops from it {}",
            drops.0, drops.1
        );
        assert_eq!(drops, (1, 2));

        for (sw, other_mac, vtep, local) in [(&sw1, mac(2), ub, ua), (&sw2, mac(1), ua, ub)] {
            let ports = sw.handle().list().unwrap();
            let vx = port(&ports, "vx");
            let fdb = sw.handle().fdb().unwrap();
            let e = fdb
                .iter()
                .find(|e| e.mac == other_mac)
                .expect("the far endpoint learned");
            println!(
                "switch at {local}: fdb {} port {} remote {:?}; vtep rows {:?}; drops tx {:?} rx {:?}",
                e.mac, e.port, e.remote, vx.stats.vteps, vx.stats.tx.drops, vx.stats.rx.drops
            );
            assert_eq!(e.port.0, vx.id, "behind the vxlan port");
            assert_eq!(e.remote, Some(vtep), "behind the far VTEP");
            let row = &vx.stats.vteps[0];
            assert_eq!(row.remote, vtep.to_string());
            assert!(row.packets_in >= 100 && row.packets_out >= 100, "{row:?}");
            assert_eq!(vx.kind, "vxlan");
            assert!(
                vx.stats.tx.drops.iter().all(|(r, d)| *d == 0 || r == "vni"),
                "{:?}",
                vx.stats.tx.drops
            );
            assert!(vx
                .stats
                .rx
                .drops
                .iter()
                .all(|(r, d)| *d == 0 || r == "too_big"));
        }
        drop((sw1, sw2));
    });
}

/// Turns transmit checksum offload off on `ifname` (ETHTOOL_STXCSUM; no
/// ethtool binary needed), in the calling thread's namespace.
fn tx_checksum_off(ifname: &str) -> std::io::Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    let mut v = EthtoolValue {
        cmd: 0x17, // ETHTOOL_STXCSUM
        data: 0,
    };
    let mut req = IfReq {
        name: [0; 16],
        data: &mut v,
        _pad: [0; 16],
    };
    req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    // SAFETY: SIOCETHTOOL reads the ifreq (name, then a pointer to the
    // ethtool_value command) and the command; both live for the call.
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            0x8946, // SIOCETHTOOL
            &mut req as *mut IfReq,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// md5sum of a file, as the tool prints it.
fn md5(path: &std::path::Path) -> String {
    let out = Command::new("md5sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn blob(len: usize, salt: u32) -> Vec<u8> {
    let mut x = 0x1234_5678u32 ^ salt;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn vnio_and_the_kernel_vxlan_device_learn_each_other() {
    if let Some(why) = skip_reason() {
        println!("skip: vxlan test needs root and the vxlan device ({why})");
        return;
    }
    bounded(Duration::from_secs(90), || {
        let k = KernelSide::new(tag());
        let dir = Dir::new("vxk");
        let sw = k.vnio_with_a_tap(&dir);
        // The endpoint stays connected to the end, as the kernel learns it.
        let _a = k.endpoint_talks_to_the_host(&dir);
        k.tcp_between_the_tap_and_the_host(&dir);
        k.vnio_learned_the_host(&sw);
        k.the_kernel_learned_the_endpoint();
        drop(sw);
    });
}

/// V: the vnio switch (and a tap whose kernel stack does TCP); K: the
/// kernel VTEP and a bridge; H: a host on that bridge.
struct KernelSide {
    nv: Netns,
    nk: Netns,
    nh: Netns,
    /// V's and K's addresses on the underlay.
    uv: Ipv4Addr,
    uk: Ipv4Addr,
    /// H's address on the overlay.
    host: Ipv4Address,
}

impl KernelSide {
    /// The namespaces, the underlay, K's VTEP and bridge, and H on it.
    fn new(n: u8) -> KernelSide {
        let (nv, nk, nh) = (
            ns(&format!("vnvx{n}v")),
            ns(&format!("vnvx{n}k")),
            ns(&format!("vnvx{n}h")),
        );
        let (uv, uk) = (Ipv4Addr::new(10, 78, n, 1), Ipv4Addr::new(10, 78, n, 2));
        veth(&nv, "ul", uv, &nk, "ul", uk);
        let (uk_s, uv_s) = (uk.to_string(), uv.to_string());
        ip(
            &nk,
            &[
                "link", "add", "vx0", "type", "vxlan", "id", "42", "local", &uk_s, "remote", &uv_s,
                "dstport", "4789", "dev", "ul",
            ],
        );
        ip(&nk, &["link", "add", "br0", "type", "bridge"]);
        ip(&nk, &["link", "set", "vx0", "master", "br0"]);
        ip(
            &nk,
            &[
                "link",
                "add",
                "hk",
                "type",
                "veth",
                "peer",
                "name",
                "hh",
                "netns",
                nh.name(),
            ],
        );
        ip(&nk, &["link", "set", "hk", "master", "br0"]);
        for l in ["vx0", "br0", "hk"] {
            ip(&nk, &["link", "set", l, "up"]);
        }
        // The overlay's MTU: 1500 on the underlay less 50.
        let host = common::ip(2);
        ip(&nh, &["link", "set", "hh", "mtu", "1450"]);
        ip(&nh, &["addr", "add", &format!("{host}/24"), "dev", "hh"]);
        ip(&nh, &["link", "set", "hh", "up"]);
        // H's frames cross veths to the kernel VTEP and on to vnio's
        // namespace without ever meeting hardware: with transmit checksum
        // offload on, their inner checksums stay partial (the skb says so,
        // the bytes do not), and a UDP socket hands vnio the bytes. A real
        // NIC would have finished them; here H finishes them itself.
        nh.run(|| tx_checksum_off("hh")).unwrap().unwrap();
        KernelSide {
            nv,
            nk,
            nh,
            uv,
            uk,
            host,
        }
    }

    /// vnio in V: a VXLAN port toward K and a tap (vxt0) with an address.
    fn vnio_with_a_tap(&self, dir: &Dir) -> Switch {
        let sw = switch_in(
            &self.nv,
            dir,
            vec![
                PortSpec::vxlan("vx", 42, self.uv, &[self.uk]),
                PortSpec::tap("tap", "vxt0"),
            ],
        );
        let nv = &self.nv;
        let tap_ip = common::ip(3);
        ip(nv, &["link", "set", "vxt0", "mtu", "1450"]);
        ip(nv, &["addr", "add", &format!("{tap_ip}/24"), "dev", "vxt0"]);
        ip(nv, &["link", "set", "vxt0", "up"]);
        sw
    }

    /// An endpoint behind vnio: ARP, ping and UDP echoes from H (which
    /// echoes UDP on port 7).
    fn endpoint_talks_to_the_host(&self, dir: &Dir) -> Endpoint {
        let host = self.host;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let u = self
            .nh
            .run(move || UdpSocket::bind(SocketAddrV4::new(host.into(), 7)).unwrap())
            .unwrap();
        let echo = std::thread::spawn(move || {
            u.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut b = [0u8; 2048];
            while !s.load(Ordering::SeqCst) {
                if let Ok((k, from)) = u.recv_from(&mut b) {
                    let _ = u.send_to(&b[..k], from);
                }
            }
        });
        let mut a = endpoint_on(dir, 1);
        talk(&mut a, host, None);
        stop.store(true, Ordering::SeqCst);
        echo.join().unwrap();
        println!("endpoint behind vnio: ARP, ping and 50 UDP echoes with the kernel behind vx0");
        a
    }

    /// TCP between the tap's stack (V) and H, both ways, through vnio's
    /// software segmentation (the tap sends 64 KiB TSO frames) and the
    /// kernel VTEP: every byte arrives.
    fn tcp_between_the_tap_and_the_host(&self, dir: &Dir) {
        let host = self.host;
        let up = blob(4 << 20, 1);
        let down = blob(2 << 20, 2);
        let (up2, down2) = (up.clone(), down.clone());
        let listener = self
            .nh
            .run(move || TcpListener::bind(SocketAddrV4::new(host.into(), 5001)).unwrap())
            .unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut got = vec![0u8; up2.len()];
            c.read_exact(&mut got).unwrap();
            c.write_all(&down2).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            got
        });
        let mut c = self
            .nv
            .run(move || {
                TcpStream::connect_timeout(&SocketAddrV4::new(host.into(), 5001).into(), T).unwrap()
            })
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(&up).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        let got_up = server.join().unwrap();
        for (name, bytes) in [
            ("sent-up", &up),
            ("recv-up", &got_up),
            ("sent-down", &down),
            ("recv-down", &back),
        ] {
            std::fs::write(dir.0.join(name), bytes).unwrap();
        }
        let sums: Vec<String> = ["sent-up", "recv-up", "sent-down", "recv-down"]
            .iter()
            .map(|f| md5(&dir.0.join(f)))
            .collect();
        println!(
            "tcp tap(V) -> H: {} bytes md5 {} / {}; H -> tap(V): {} bytes md5 {} / {}",
            got_up.len(),
            sums[0],
            sums[1],
            back.len(),
            sums[2],
            sums[3]
        );
        assert_eq!(sums[0], sums[1]);
        assert_eq!(sums[2], sums[3]);
        assert!(!sums[0].is_empty());
    }

    /// vnio learned H's address behind K's VTEP, and cut the tap's TSO
    /// frames before encapsulating them.
    fn vnio_learned_the_host(&self, sw: &Switch) {
        let out = Command::new("ip")
            .args(["-n", self.nh.name(), "-o", "link", "show", "hh"])
            .output()
            .unwrap();
        let hh_mac = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let ports = sw.handle().list().unwrap();
        let vx = port(&ports, "vx");
        let fdb = sw.handle().fdb().unwrap();
        let e = fdb
            .iter()
            .find(|e| e.mac.to_string() == hh_mac)
            .unwrap_or_else(|| panic!("{hh_mac} learned: {fdb:?}"));
        println!(
            "vnio fdb: {} port {} remote {:?}; vtep rows {:?}; vx rx (to the overlay) sw_segmented {} sw_checksums {} drops {:?}",
            e.mac,
            e.port,
            e.remote,
            vx.stats.vteps,
            vx.stats.rx.sw_segmented,
            vx.stats.rx.sw_checksums,
            vx.stats.rx.drops
        );
        assert_eq!((e.port.0, e.remote), (vx.id, Some(self.uk)));
        assert!(
            vx.stats.rx.sw_segmented > 0,
            "the tap's TSO frames were cut before encapsulation"
        );
    }

    /// K's bridge learned the endpoint's address behind vnio's VTEP.
    fn the_kernel_learned_the_endpoint(&self) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                self.nk.name(),
                "bridge",
                "fdb",
                "show",
                "dev",
                "vx0",
            ])
            .output()
            .unwrap();
        let kernel = String::from_utf8_lossy(&out.stdout).to_string();
        let line = kernel
            .lines()
            .find(|l| l.starts_with(&mac(1).to_string()) && l.contains("dst"))
            .unwrap_or_else(|| panic!("the endpoint's MAC behind vnio in:\n{kernel}"));
        println!("kernel: bridge fdb show dev vx0: {line}");
        assert!(line.contains(&format!("dst {}", self.uv)), "{line}");
    }
}
