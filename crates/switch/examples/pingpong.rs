//! A quick look at the data path's cost: two poll-mode endpoints in one
//! thread, one frame in flight (round trips through the switch), then a
//! one-way burst rate. Busy-polls two cores for about two seconds; not a
//! benchmark (that compares against OVS-DPDK and testpmd, see docs/switch.md).
//!
//! `cargo run --release -p vnio-switch --example pingpong [-- FRAME_LEN]`

use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::Ipv4Address;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let len: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64);
    let dir = std::env::temp_dir().join(format!("vnio-pingpong-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.join("ctl.sock"),
            idle_polls: u32::MAX,
            ..Default::default()
        },
        ports: vec![
            PortSpec::vhost_user("a", dir.join("a.sock"), SocketMode::Server),
            PortSpec::vhost_user("b", dir.join("b.sock"), SocketMode::Server),
        ],
    };
    let sw = Switch::start(cfg)?;
    let (ma, mb) = ("02:00:00:00:00:01".parse()?, "02:00:00:00:00:02".parse()?);
    let mut a = Endpoint::connect(
        &dir.join("a.sock"),
        EndpointConfig::new(ma, Ipv4Address([10, 0, 0, 1])),
    )?;
    let mut b = Endpoint::connect(
        &dir.join("b.sock"),
        EndpointConfig::new(mb, Ipv4Address([10, 0, 0, 2])),
    )?;
    let mut ab = vec![0x11u8; len];
    ab[..6].copy_from_slice(&mb.0);
    ab[6..12].copy_from_slice(&ma.0);
    ab[12..14].copy_from_slice(&[0x88, 0xb5]);
    let mut ba = ab.clone();
    ba[..6].copy_from_slice(&ma.0);
    ba[6..12].copy_from_slice(&mb.0);
    let mut buf = vec![0u8; 2048];

    // Round trips, one frame in flight.
    let mut rtts = Vec::with_capacity(200_000);
    let end = Instant::now() + Duration::from_secs(1);
    while Instant::now() < end {
        let t0 = Instant::now();
        a.send_frame(&ab)?;
        while b.poll_recv(&mut buf).is_none() {}
        b.send_frame(&ba)?;
        while a.poll_recv(&mut buf).is_none() {}
        rtts.push(t0.elapsed());
    }
    rtts.sort();
    let pct = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "{len} B round trip through the switch: n={} p50={:.2} µs p99={:.2} µs p99.9={:.2} µs max={:.1} µs",
        rtts.len(),
        pct(0.5),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );

    // One-way rate: a sends as fast as its ring allows, b drains.
    let (mut sent, mut got) = (0u64, 0u64);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(1);
    while Instant::now() < end {
        for _ in 0..32 {
            if a.send_frame(&ab).is_err() {
                break;
            }
            sent += 1;
        }
        while b.poll_recv(&mut buf).is_some() {
            got += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{len} B one way: sent {:.3} Mpps, received {:.3} Mpps",
        sent as f64 / secs / 1e6,
        got as f64 / secs / 1e6
    );
    for p in sw.handle().list()? {
        let drops: u64 = p.stats.rx.drops.values().sum();
        println!(
            "port {}: tx {} rx {} rx drops {}",
            p.name, p.stats.tx.packets, p.stats.rx.packets, drops
        );
    }
    drop(sw);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
