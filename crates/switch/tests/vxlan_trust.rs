//! What the underlay cannot do to a vnio switch (root only; prints a skip
//! line otherwise). A switch with two local ports and a VXLAN port whose
//! one listed VTEP is the Linux kernel's `vxlan` device; a stranger on the
//! underlay sends 10^5 datagrams with 10^5 inner source addresses, the
//! local ports' among them, while the local ports talk to each other and
//! to the kernel behind the VTEP; the listed VTEP itself forges the local
//! ports' addresses. Nothing moves, nobody's traffic stops, and the
//! counters say what was dropped and why. And a tenant cannot use the
//! overlay's head-end replication to send past its egress limit.

mod common;

use common::underlay::{ip, ns, skip_reason, tag, veth};
use common::*;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_lab::Netns;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::fdb::FdbEntry;
use vnio_switch::port::SocketMode;
use vnio_switch::wire::{EthernetAddress, Ipv4Address};
use vnio_switch::worker::PortInfo;

/// Datagrams the stranger sends.
const STRANGER_DATAGRAMS: u32 = 100_000;
/// Forged datagrams from the listed VTEP.
const FORGED: u32 = 2_000;
/// The longest a neighbour may go unanswered.
const MAX_GAP: Duration = Duration::from_secs(1);

/// A VXLAN datagram (VNI 42) carrying an ARP-typed frame from `src` to a
/// unicast address nobody has (flooded if it were accepted).
fn datagram(src: EthernetAddress) -> Vec<u8> {
    let mut d = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
    d.extend_from_slice(&[2, 0xee, 0xee, 0xee, 0xee, 0xee]);
    d.extend_from_slice(&src.0);
    d.extend_from_slice(&[0x08, 0x06]);
    d.resize(8 + 60, 0);
    d
}

/// The `i`-th of the stranger's source addresses: every 100th is `a`'s,
/// every 100th + 50 is `b`'s, the others all different.
fn stranger_src(i: u32) -> EthernetAddress {
    match i % 100 {
        0 => mac(1),
        50 => mac(2),
        _ => {
            let b = i.to_be_bytes();
            EthernetAddress([2, 0xbd, b[0], b[1], b[2], b[3]])
        }
    }
}

/// Times between answers of one neighbour.
#[derive(Default, Debug)]
struct Answers {
    last: Option<Instant>,
    longest_gap: Duration,
    answered: u32,
    missed: u32,
}

impl Answers {
    fn record(&mut self, answered: bool, start: Instant) {
        if !answered {
            self.missed += 1;
            return;
        }
        let now = Instant::now();
        let gap = now - self.last.unwrap_or(start);
        self.longest_gap = self.longest_gap.max(gap);
        self.last = Some(now);
        self.answered += 1;
    }
}

/// One UDP echo from `a` to `peer`: whether the echo came back.
fn udp_echo(a: &mut Endpoint, peer: SocketAddrV4, k: u32) -> bool {
    let msg = format!("echo {k}");
    a.udp_send_to(peer, 4000, msg.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    let mut buf = [0u8; 2048];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match a.udp_recv_timeout(&mut buf, left).unwrap() {
            Some((from, _, n)) if from == peer && &buf[..n] == msg.as_bytes() => return true,
            Some(_) => continue,
            None => break,
        }
    }
    false
}

/// One ping from `a` to `dst`: whether it was answered.
fn echo(a: &mut Endpoint, dst: Ipv4Address, seq: u16) -> bool {
    a.ping(dst, 11, seq, b"through the overlay").unwrap();
    a.poll_until(Duration::from_millis(300), |_, ev| match ev {
        Event::EchoReply {
            src,
            ident: 11,
            seq: s,
        } if src == dst && s == seq => Some(()),
        _ => None,
    })
    .is_ok()
}

#[test]
fn a_stranger_and_a_forging_vtep_move_nothing_and_stop_nobody() {
    if let Some(why) = skip_reason() {
        println!("skip: vxlan trust test needs root and the vxlan device ({why})");
        return;
    }
    bounded(Duration::from_secs(120), || {
        let u = Underlay::new(tag());
        let dir = Dir::new("vxt");
        let sw = u.vnio(&dir);
        let connect = |name: &str, k: u8| {
            Endpoint::connect(&dir.sock(name), EndpointConfig::new(mac(k), common::ip(k))).unwrap()
        };
        let mut a = connect("p1", 1);
        let b = connect("p2", 2);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let rb = std::thread::spawn(move || {
            let mut b = b;
            b.serve(Duration::from_secs(100), &move || s.load(Ordering::SeqCst))
                .unwrap();
            b
        });
        let peer_b = SocketAddrV4::new(common::ip(2).into(), 7);
        a.resolve(common::ip(2), T).expect("b answers ARP");
        a.resolve(u.kernel, T)
            .expect("the kernel behind the VTEP answers ARP");
        assert!(udp_echo(&mut a, peer_b, 0) && echo(&mut a, u.kernel, 0));

        let (attacking, attack) = u.attack();
        let start = Instant::now();
        let (to_b, to_kernel) = echoes_while(&attacking, &mut a, peer_b, u.kernel);
        let sent = attack.join().unwrap();
        let took = start.elapsed();
        stop.store(true, Ordering::SeqCst);
        // Kept connected until the FDB is read: a port that goes is forgotten.
        let _b = rb.join().unwrap();
        println!(
            "stranger sent {sent} datagrams in {took:.2?}; a<->b {to_b:?}; a<->kernel {to_kernel:?}"
        );

        let fdb = sw.handle().fdb().unwrap();
        let ports = sw.handle().list().unwrap();
        nothing_moved(&fdb, &ports, u.uk);
        // Nobody stopped.
        for (who, ans) in [("b", &to_b), ("the kernel", &to_kernel)] {
            assert!(
                ans.longest_gap < MAX_GAP,
                "{who} went unanswered for {:?}",
                ans.longest_gap
            );
            assert!(ans.answered >= 10, "{who}: {ans:?}");
        }
        counters_say_why(&ports, sent, u.uk);
        drop(sw);
    });
}

/// V: vnio's switch; K: the kernel VTEP (listed) and the stranger, with
/// an address on the overlay behind the VTEP.
struct Underlay {
    nv: Netns,
    nk: Netns,
    uv: Ipv4Addr,
    uk: Ipv4Addr,
    stranger: Ipv4Addr,
    kernel: Ipv4Address,
}

impl Underlay {
    fn new(n: u8) -> Underlay {
        let (nv, nk) = (ns(&format!("vnvt{n}v")), ns(&format!("vnvt{n}k")));
        let (uv, uk) = (Ipv4Addr::new(10, 79, n, 1), Ipv4Addr::new(10, 79, n, 2));
        let stranger = Ipv4Addr::new(10, 79, n, 9);
        veth(&nv, "ul", uv, &nk, "ul", uk);
        ip(
            &nk,
            &["addr", "add", &format!("{stranger}/24"), "dev", "ul"],
        );
        let (uk_s, uv_s) = (uk.to_string(), uv.to_string());
        ip(
            &nk,
            &[
                "link", "add", "vx0", "type", "vxlan", "id", "42", "local", &uk_s, "remote", &uv_s,
                "dstport", "4789", "dev", "ul",
            ],
        );
        let kernel = common::ip(3);
        ip(&nk, &["addr", "add", &format!("{kernel}/24"), "dev", "vx0"]);
        ip(&nk, &["link", "set", "vx0", "mtu", "1450", "up"]);
        Underlay {
            nv,
            nk,
            uv,
            uk,
            stranger,
            kernel,
        }
    }

    /// vnio in V: two vNIC ports and a VXLAN port that lists K's VTEP only.
    fn vnio(&self, dir: &Dir) -> Switch {
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
                PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Server),
                PortSpec::vxlan("vx", 42, self.uv, &[self.uk]),
            ],
        };
        self.nv.run(move || Switch::start(cfg)).unwrap().unwrap()
    }

    /// The attackers, both on K's side of the underlay: the stranger
    /// floods datagrams from ever new addresses, the listed VTEP now and
    /// then forges a frame from a's or b's. Returns the flag that is true
    /// while they run and the thread that says how many the stranger sent.
    fn attack(&self) -> (Arc<AtomicBool>, std::thread::JoinHandle<u32>) {
        let (uv, uk, stranger) = (self.uv, self.uk, self.stranger);
        let attacking = Arc::new(AtomicBool::new(true));
        let flag = attacking.clone();
        let attack = self
            .nk
            .run(move || {
                let to = SocketAddrV4::new(uv, 4789);
                let st = UdpSocket::bind(SocketAddrV4::new(stranger, 0)).unwrap();
                let listed = UdpSocket::bind(SocketAddrV4::new(uk, 0)).unwrap();
                std::thread::spawn(move || {
                    let mut sent = 0u32;
                    for i in 0..STRANGER_DATAGRAMS {
                        if st.send_to(&datagram(stranger_src(i)), to).is_ok() {
                            sent += 1;
                        }
                        if i % (STRANGER_DATAGRAMS / FORGED) == 0 {
                            let victim = mac(1 + (i / 50 % 2) as u8);
                            listed.send_to(&datagram(victim), to).unwrap();
                        }
                        if i % 1000 == 0 {
                            // Spread over about two seconds, as the echoes run.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    flag.store(false, Ordering::SeqCst);
                    sent
                })
            })
            .unwrap();
        (attacking, attack)
    }
}

/// a's echoes with b and with the kernel, while `attacking` and for 500 ms
/// after.
fn echoes_while(
    attacking: &AtomicBool,
    a: &mut Endpoint,
    peer_b: SocketAddrV4,
    kernel: Ipv4Address,
) -> (Answers, Answers) {
    let start = Instant::now();
    let (mut to_b, mut to_kernel) = (Answers::default(), Answers::default());
    let mut k = 1u32;
    let mut after = None;
    while after.map_or(true, |t: Instant| t.elapsed() < Duration::from_millis(500)) {
        if after.is_none() && !attacking.load(Ordering::SeqCst) {
            after = Some(Instant::now());
        }
        to_b.record(udp_echo(a, peer_b, k), start);
        to_kernel.record(echo(a, kernel, k as u16), start);
        k += 1;
    }
    (to_b, to_kernel)
}

/// Nothing moved: a's and b's addresses stay on their ports, nothing is
/// learned behind the stranger.
fn nothing_moved(fdb: &[FdbEntry], ports: &[PortInfo], uk: Ipv4Addr) {
    let id = |name: &str| ports.iter().find(|p| p.name == name).unwrap().id;
    let on = |m: EthernetAddress| fdb.iter().find(|e| e.mac == m).map(|e| e.port.0);
    assert_eq!(on(mac(1)), Some(id("p1")), "a's address stays on p1");
    assert_eq!(on(mac(2)), Some(id("p2")), "b's address stays on p2");
    assert!(
        fdb.iter().all(|e| e.remote.map_or(true, |r| r == uk)),
        "nothing learned behind the stranger: {fdb:?}"
    );
    assert!(fdb.len() <= 4, "only the neighbours are known: {fdb:?}");
}

/// The counters say what was dropped and why.
fn counters_say_why(ports: &[PortInfo], sent: u32, uk: Ipv4Addr) {
    let port = |name: &str| ports.iter().find(|p| p.name == name).unwrap();
    let vx = port("vx");
    let unknown = vx.stats.tx.drops["unknown_vtep"];
    println!(
        "vx: unknown_vtep {unknown}, mac_kept {}, vtep rows {:?}; p1 flaps {}, p2 flaps {}",
        vx.stats.tx.mac_kept,
        vx.stats.vteps,
        port("p1").stats.tx.mac_flaps,
        port("p2").stats.tx.mac_flaps
    );
    // The kernel may drop some of the burst at the socket: what
    // reached the switch was dropped, every one of it.
    assert!(unknown > u64::from(sent) / 2, "{unknown} of {sent}");
    assert!(unknown <= u64::from(sent));
    assert!(
        vx.stats.tx.mac_kept >= u64::from(FORGED) / 2,
        "forged frames kept"
    );
    assert!(vx.stats.vteps.iter().all(|r| r.remote == uk.to_string()));
    assert_eq!(
        port("p1").stats.tx.mac_flaps + port("p2").stats.tx.mac_flaps,
        0
    );
}

/// A vNIC limited to 10 Mbit/s floods broadcast frames toward a VXLAN
/// port with 8 remote VTEPs: each flood costs it 8 datagrams' bytes, so
/// about 10 Mbit/s of datagrams leave (not 80), and the floods past its
/// limit are counted as `egress` drops on the VXLAN port.
#[test]
fn floods_to_vteps_are_charged_to_the_senders_limit() {
    use vnio_switch::datapath::Port;
    use vnio_switch::port::vxlan::{VxlanOptions, VxlanPort};
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("vxt-egress");
        let (mut dp, mut eps) = driven(&dir, 1);
        let limit = vnio_switch::egress::EgressPolicy {
            limit_bps: Some(10_000_000),
            ..Default::default()
        };
        dp.table_mut().set_egress(0, limit);
        let remotes: Vec<Ipv4Addr> = (3..=10).map(|k| Ipv4Addr::new(127, 0, 0, k)).collect();
        let dstport = 40_000 + (std::process::id() % 20_000) as u16;
        let Ok(vx) = VxlanPort::open(VxlanOptions {
            vni: 42,
            local: Ipv4Addr::new(127, 0, 0, 2),
            remotes: remotes.clone(),
            accept: vec![],
            dstport,
            evpn: false,
            ttl: None,
            underlay_mtu: 1500,
            capacity_bps: None,
        }) else {
            println!("skip: no UDP socket on 127.0.0.2:{dstport}");
            return;
        };
        let sw = SwitchConfig::default();
        let spec = PortSpec::vxlan("vx", 42, Ipv4Addr::new(127, 0, 0, 2), &remotes);
        dp.add(
            vnio_switch::PortId(2),
            "vx".into(),
            spec.policy().unwrap(),
            spec.policies(&sw),
            Port::Vxlan(vx),
        );
        let mut f = vec![0u8; 1000];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(1).0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        let burst: Vec<&[u8]> = vec![&f[..]; 16];
        let (start, secs) = (Instant::now(), 1.0);
        let mut floods = 0u64;
        while start.elapsed().as_secs_f64() < secs {
            floods += eps[0].send_burst(&burst) as u64;
            dp.poll(Instant::now(), 64);
        }
        dp.poll(Instant::now(), 64);
        let (_, slot) = dp.table().slots().find(|(_, s)| s.name == "vx").unwrap();
        let Port::Vxlan(v) = &slot.port else {
            unreachable!()
        };
        let out: u64 = v.vteps().iter().map(|r| r.bytes_out).sum();
        let datagrams: u64 = v.vteps().iter().map(|r| r.packets_out).sum();
        let dropped = slot.stats.snapshot().rx.drops["egress"];
        let bps = out as f64 * 8.0 / start.elapsed().as_secs_f64();
        println!(
            "{floods} floods offered; {datagrams} datagrams, {:.1} Mbit/s of inner frames to 8 VTEPs; {dropped} floods past the limit",
            bps / 1e6
        );
        assert!(bps < 10e6 * 1.5, "{bps} bit/s: the copies were not charged");
        assert!(bps > 10e6 * 0.3, "{bps} bit/s: the limit starved the port");
        assert_eq!(datagrams % 8, 0, "each flood goes to all 8 or none");
        assert!(dropped > 0 && dropped + datagrams / 8 <= floods);
    });
}
