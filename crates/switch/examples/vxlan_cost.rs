//! What VXLAN encapsulation costs per frame, next to a plain forward. One
//! thread drives three [`Datapath`]s, each with a poll-mode endpoint `a`
//! sending bursts of 32 frames of an unknown destination to its one other
//! port (so each frame goes to exactly that port):
//!
//! - `vnic`: a vhost-user port whose endpoint drains it (a plain forward,
//!   no system call);
//! - `uplink`: an AF_PACKET uplink on a veth (TX ring, one `send` per round);
//! - `vxlan`: a VXLAN port sending to a remote VTEP through the same veth
//!   (encapsulation into the port's slots, one `sendmmsg` per round through
//!   the raw socket: routing, the outer IPv4 header and the veth in the kernel).
//!
//! The veth's far end drops everything early (the frames' MACs are not
//! its own), so the kernel's part is the transmit path on both. Runs
//! alternate (vnic, uplink, vxlan, vnic, ...) so a change in the host's
//! mood hits all three; the medians and the ratios are printed. Root only
//! (a network namespace of its own for the veth).
//!
//! `cargo run --release -p vnio-switch --example vxlan_cost [-- FRAME_LEN [SECONDS [ROUNDS [ONLY]]]]`
//!
//! ONLY (`vnic`, `uplink` or `vxlan`) runs one of them: for an instruction
//! count of the switch's own part, without the kernel's, e.g.
//! `valgrind --tool=callgrind --toggle-collect='*Datapath::poll*' ... 64 1 1 vxlan`
//! divided by the frames it prints.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use vnio_switch::config::{PortSpec, SwitchConfig};
use vnio_switch::datapath::{Datapath, Port};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::fdb::Fdb;
use vnio_switch::port::uplink::{UplinkOptions, UplinkPort};
use vnio_switch::port::vhost_user::VhostUserPort;
use vnio_switch::port::vxlan::{VxlanOptions, VxlanPort};
use vnio_switch::port::{SocketMode, Watch};
use vnio_switch::wire::Ipv4Address;
use vnio_switch::PortId;

const BURST: usize = 32;
type Err = Box<dyn std::error::Error>;

/// A datapath with vhost-user port `a` (its endpoint connected) and `other`.
fn bench_dp(
    dir: &Path,
    tag: &str,
    other: Option<Port>,
) -> Result<(Datapath, Endpoint, Option<Endpoint>), Err> {
    let sw = SwitchConfig::default();
    let mut dp = Datapath::new(Fdb::new(sw.fdb_capacity, sw.aging()));
    let a_sock = dir.join(format!("{tag}-a.sock"));
    let b_sock = dir.join(format!("{tag}-b.sock"));
    let spec = PortSpec::vhost_user("a", &a_sock, SocketMode::Server);
    dp.add(
        PortId(0),
        "a".into(),
        spec.policy()?,
        spec.policies(&sw),
        Port::VhostUser(VhostUserPort::new(&a_sock, SocketMode::Server)?),
    );
    let vnic = other.is_none();
    let port = match other {
        Some(p) => p,
        None => Port::VhostUser(VhostUserPort::new(&b_sock, SocketMode::Server)?),
    };
    dp.add(
        PortId(1),
        "b".into(),
        spec.policy()?,
        spec.policies(&sw),
        port,
    );
    let (s1, s2) = (a_sock.clone(), b_sock.clone());
    let connect = std::thread::spawn(move || {
        let a = Endpoint::connect(
            &s1,
            EndpointConfig::new(
                "02:00:00:00:00:01".parse().unwrap(),
                Ipv4Address([10, 0, 0, 1]),
            ),
        );
        let b = vnic.then(|| {
            Endpoint::connect(
                &s2,
                EndpointConfig::new(
                    "02:00:00:00:00:02".parse().unwrap(),
                    Ipv4Address([10, 0, 0, 2]),
                ),
            )
        });
        (a, b)
    });
    let running = |dp: &Datapath| {
        dp.table().slots().all(|(_, s)| match &s.port {
            Port::VhostUser(p) => p.device.ready(0) && p.device.ready(1),
            _ => true,
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !connect.is_finished() || !running(&dp) {
        if Instant::now() > deadline {
            return Err("the endpoints did not connect".into());
        }
        let now = Instant::now();
        for slot in 0..2 {
            dp.on_event(slot, Watch::Listener, now);
            dp.on_event(slot, Watch::Connection, now);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let (a, b) = connect.join().map_err(|_| "connect thread panicked")?;
    Ok((dp, a?, b.transpose()?))
}

fn ip(ns: &str, args: &[&str]) -> Result<(), Err> {
    let o = Command::new("ip").arg("-n").arg(ns).args(args).output()?;
    if !o.status.success() {
        return Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&o.stderr)).into());
    }
    Ok(())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Err> {
    let mut args = std::env::args().skip(1);
    let len: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1.0);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let only = args.next();
    if !vnio_lab::is_root() {
        println!("skip: needs root (a namespace with a veth)");
        return Ok(());
    }
    let name = format!("vnxb{}", std::process::id());
    let ns = vnio_lab::Netns::create(&name)?;
    ns.set_sysctl("net.ipv6.conf.all.disable_ipv6", "1")?;
    ip(
        &name,
        &["link", "add", "bx0", "type", "veth", "peer", "name", "bx1"],
    )?;
    ip(&name, &["addr", "add", "10.99.0.1/24", "dev", "bx0"])?;
    // The remote VTEP's MAC is nobody's: the far end drops the packets
    // where it drops the uplink's frames (not for this host).
    ip(
        &name,
        &[
            "neigh",
            "add",
            "10.99.0.2",
            "lladdr",
            "02:99:00:00:00:02",
            "dev",
            "bx0",
            "nud",
            "permanent",
        ],
    )?;
    for l in ["bx0", "bx1"] {
        ip(&name, &["link", "set", l, "up"])?;
    }
    let dir = std::env::temp_dir().join(format!("vnio-vxcost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let d = dir.clone();
    let result =
        ns.run(move || run(&d, len, secs, rounds, only.as_deref()).map_err(|e| e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(Into::into)
}

fn run(dir: &Path, len: usize, secs: f64, rounds: usize, only: Option<&str>) -> Result<(), Err> {
    let up = UplinkPort::open("bx0", &UplinkOptions::default())?;
    let vx = VxlanPort::open(VxlanOptions {
        vni: 42,
        local: Ipv4Addr::new(10, 99, 0, 1),
        remotes: vec![Ipv4Addr::new(10, 99, 0, 2)],
        accept: vec![],
        dstport: 4789,
        evpn: false,
        ttl: None,
        underlay_mtu: 1500,
        capacity_bps: None,
    })?;
    if !vx.per_flow_ports() {
        println!("note: no raw socket, the vxlan port sends through its UDP socket");
    }
    let mut benches = [
        ("vnic", bench_dp(dir, "vnic", None)?),
        ("uplink", bench_dp(dir, "up", Some(Port::Uplink(up)))?),
        ("vxlan", bench_dp(dir, "vx", Some(Port::Vxlan(vx)))?),
    ];
    // A UDP frame (the flow hash reads its addresses and ports) to a MAC
    // nobody has: flooded to the one other port.
    let mut f = vec![0u8; len.max(60)];
    f[..6].copy_from_slice(&[0x02, 0x77, 0, 0, 0, 9]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[14 + 9] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 9]);
    f[34..38].copy_from_slice(&[0x13, 0x88, 0x00, 0x07]);
    let burst: Vec<&[u8]> = vec![&f; BURST];
    let mut buf = vec![0u8; 2048];
    let mut ns_per: [Vec<f64>; 3] = Default::default();
    let mut counts = [0u64; 3];
    for _ in 0..rounds {
        for (k, (name, (dp, a, b))) in benches.iter_mut().enumerate() {
            if only.is_some_and(|o| o != *name) {
                ns_per[k].push(f64::NAN);
                continue;
            }
            let (mut frames, mut in_switch) = (0u64, Duration::ZERO);
            let end = Instant::now() + Duration::from_secs_f64(secs);
            while Instant::now() < end {
                for _ in 0..8 {
                    a.send_burst(&burst);
                    let t = Instant::now();
                    frames += dp.poll(t, 64) as u64;
                    in_switch += t.elapsed();
                    if let Some(b) = b.as_mut() {
                        while b.poll_recv(&mut buf).is_some() {}
                    }
                }
            }
            counts[k] += frames;
            ns_per[k].push(in_switch.as_nanos() as f64 / frames.max(1) as f64);
        }
    }
    let m: Vec<f64> = ns_per.iter_mut().map(|v| median(v)).collect();
    for (k, (name, (dp, ..))) in benches.iter().enumerate() {
        let s = dp.table().slot(1).map(|s| s.stats.rx.snapshot());
        let (pk, drops) = s.map_or((0, 0), |s| (s.packets, s.drops.values().sum::<u64>()));
        println!(
            "{name:<6} {len} B: {:.1} ns per frame in the switch (median of {rounds} x {secs} s; runs {:?}); {} frames, delivered {pk}, drops {drops}",
            m[k],
            ns_per[k].iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>(),
            counts[k],
        );
    }
    if only.is_some() {
        return Ok(());
    }
    println!(
        "ratios: vxlan/vnic {:.2}, vxlan/uplink {:.2}, uplink/vnic {:.2}",
        m[2] / m[0],
        m[2] / m[1],
        m[1] / m[0]
    );
    Ok(())
}
