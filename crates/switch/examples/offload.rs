//! The effect and the price of offloads through the switch, side by side
//! in one run: a sender with TSO pushes a TCP stream to a receiver (1) as
//! MTU-sized, fully checksummed frames (no offloads anywhere), (2) as
//! 64 KiB GSO frames to a receiver that takes them (metadata passed
//! through, one copy per 64 KiB), (3) as GSO frames to a receiver that
//! takes partial checksums only (the switch segments), (4) as GSO frames
//! to a receiver without offloads (the switch segments and checksums).
//! Payload Gbps delivered and receive-side frames per MiB for each.
//!
//! `cargo run --release -p vnio-switch --example offload [-- SECONDS [REPS]]`
//! (the lab's `offload` scenario measures the same comparison with kernels
//! on tap ports: `sudo vnio lab run offload`).

use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::device::feature;
use vnio_switch::wire::testing::{pattern, TcpFrame};
use vnio_switch::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_TCPV4};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const MSS: usize = 1448;

struct Case {
    name: &'static str,
    rx_offloads: u64,
    gso: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(2.0);
    let cases = [
        Case {
            name: "MTU frames, no offloads",
            rx_offloads: 0,
            gso: false,
        },
        Case {
            name: "GSO passed through (receiver has TSO)",
            rx_offloads: feature::GUEST_CSUM | feature::GUEST_TSO4,
            gso: true,
        },
        Case {
            name: "GSO segmented by the switch (receiver: csum only)",
            rx_offloads: feature::GUEST_CSUM,
            gso: true,
        },
        Case {
            name: "GSO segmented + checksummed (receiver: none)",
            rx_offloads: 0,
            gso: true,
        },
    ];
    let reps: usize = std::env::args()
        .nth(2)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(3);
    // Cases alternate within each repetition; each case's median is printed.
    // A single case (its index), for profiling one path: VNIO_BENCH_CASE=3.
    let only: Option<usize> = std::env::var("VNIO_BENCH_CASE")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    for _ in 0..reps {
        for (i, c) in cases.iter().enumerate() {
            if only.map_or(true, |o| o == i) {
                runs[i].push(run(c, secs)?);
            }
        }
    }
    let mut base = None;
    for (i, c) in cases.iter().enumerate() {
        let mut v = std::mem::take(&mut runs[i]);
        if v.is_empty() {
            continue;
        }
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        let gbps = v[v.len() / 2];
        let b = *base.get_or_insert(gbps.0);
        println!(
            "{:<52} {:>7.2} Gbps payload  {:>7.1} frames/MiB at the receiver  x{:.2} vs MTU frames",
            c.name,
            gbps.0,
            gbps.1,
            gbps.0 / b
        );
    }
    Ok(())
}

fn run(c: &Case, secs: f64) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("vnio-offload-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: dir.join("ctl.sock"),
            idle_polls: u32::MAX,
            ..Default::default()
        },
        ports: vec![
            PortSpec::vhost_user("a", dir.join("a.sock"), SocketMode::Server),
            PortSpec::vhost_user("b", dir.join("b.sock"), SocketMode::Server),
        ],
    })?;
    let (ma, mb) = (
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    );
    let mut ca = EndpointConfig::new(ma, Ipv4Address([10, 0, 0, 1]));
    ca.offloads = feature::CSUM | feature::HOST_TSO4;
    let mut cb = EndpointConfig::new(mb, Ipv4Address([10, 0, 0, 2]));
    cb.offloads = c.rx_offloads;
    // Room for 30 GSO frames of 64 KiB in 2 KiB receive buffers.
    cb.queue_size = 1024;
    let mut a = Endpoint::connect(&dir.join("a.sock"), ca)?;
    let mut b = Endpoint::connect(&dir.join("b.sock"), cb)?;
    // b announces itself so the switch knows where its MAC is.
    let mut hello = [0u8; 60];
    hello[..6].copy_from_slice(&[0xff; 6]);
    hello[6..12].copy_from_slice(&mb.0);
    hello[12..14].copy_from_slice(&[0x88, 0xb5]);
    b.send_frame(&hello)?;
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0u8; 70_000];
    while a.poll_recv(&mut buf).is_some() {}

    let payload = if c.gso { 44 * MSS } else { MSS };
    let f = TcpFrame {
        payload: pattern(payload, 1),
        ..Default::default()
    };
    let mut frame = f.build(c.gso);
    frame[..6].copy_from_slice(&mb.0);
    frame[6..12].copy_from_slice(&ma.0);
    let hdr = if c.gso {
        VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: f.l4() as u16 + 20,
            gso_size: MSS as u16,
            csum_start: f.l4() as u16,
            csum_offset: 16,
            num_buffers: 0,
        }
    } else {
        VirtioNetHdrRepr::default()
    };
    let hdr_end = f.l4() + 20;
    let (mut bytes, mut frames) = (0u64, 0u64);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        // As many bytes per turn either way: 16 MTU frames or one GSO frame.
        for _ in 0..if c.gso { 1 } else { 16 } {
            if a.send_frame_with(&hdr, &frame).is_err() {
                break;
            }
        }
        while let Some(n) = b.poll_recv(&mut buf) {
            frames += 1;
            bytes += (n - hdr_end) as u64;
        }
    }
    let s = t0.elapsed().as_secs_f64();
    // Counters for a look when the numbers surprise: VNIO_BENCH_VERBOSE=1.
    if std::env::var_os("VNIO_BENCH_VERBOSE").is_some() {
        for p in sw.handle().list()? {
            let drops: u64 = p.stats.rx.drops.values().sum();
            eprintln!(
                "  {}: port {}: tx {} rx {} rx drops {} sw_seg {}",
                c.name,
                p.name,
                p.stats.tx.packets,
                p.stats.rx.packets,
                drops,
                p.stats.rx.sw_segmented
            );
        }
    }
    drop(sw);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        bytes as f64 * 8.0 / s / 1e9,
        frames as f64 / (bytes as f64 / (1 << 20) as f64),
    ))
}
