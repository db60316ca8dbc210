//! EVPN at scale (not in CI: `scripts/evpn-scale`, root and FRR): one
//! vnio host (the route reflector) and `EVPN_VTEPS` kernel VTEPs (default
//! 64), each with zebra and bgpd, the VTEPs announcing `EVPN_MACS` MACs
//! between them (default 10000, static entries on their bridges, which
//! zebra advertises). Prints the time until the vnio switch has every MAC
//! pinned, the process's memory per MAC, and the pings lost to the first
//! VTEP's host while half the MACs are withdrawn and announced again.

mod common;

use common::frr::{fabric, frr_missing, Host};
use common::underlay::{skip_reason, tag};
use common::*;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's resident memory, in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// Adds (or deletes) the MACs `macs` on the access port of the kernel
/// VTEP in namespace `ns` (static entries, which its zebra advertises).
fn kernel_macs(ns: &str, macs: &[[u8; 6]], add: bool) {
    let mut batch = String::new();
    for m in macs {
        let m = vnio_switch::wire::EthernetAddress(*m);
        batch += &match add {
            true => format!("fdb replace {m} dev kv master static\n"),
            false => format!("fdb del {m} dev kv master\n"),
        };
    }
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "bridge", "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(batch.as_bytes()).unwrap();
    c.wait().unwrap();
}

fn remote_entries(h: &Host) -> usize {
    let fdb = h.sw.as_ref().unwrap().handle().fdb().unwrap();
    fdb.iter().filter(|e| e.remote.is_some()).count()
}

#[test]
#[ignore = "a scale run: scripts/evpn-scale"]
fn evpn_at_scale() {
    if let Some(why) = skip_reason().or_else(frr_missing) {
        println!("skip: EVPN scale run needs root, the vxlan device and FRR ({why})");
        return;
    }
    let (vteps, total) = (
        env("EVPN_VTEPS", 64).clamp(1, 250),
        env("EVPN_MACS", 10_000),
    );
    let per = total / vteps;
    let behind = Ipv4Addr::new(10, 0, 0, 200);
    let mut kernel = vec![behind];
    kernel.extend((1..vteps).map(|k| Ipv4Addr::new(10, 0, 1, k as u8)));
    let t0 = Instant::now();
    let (_u, hosts) = fabric(tag(), 1, &kernel);
    println!(
        "{vteps} kernel VTEPs and their FRR up in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let macs = |k: usize| -> Vec<[u8; 6]> {
        (0..per)
            .map(|i| [6, 0, (k >> 8) as u8, k as u8, (i >> 8) as u8, i as u8])
            .collect()
    };
    let rss0 = rss_kib();
    let t0 = Instant::now();
    for (k, h) in hosts[1..].iter().enumerate() {
        kernel_macs(h.ns.name(), &macs(k), true);
    }
    let want = per * vteps;
    let deadline = t0 + Duration::from_secs(600);
    while remote_entries(&hosts[0]) < want {
        assert!(
            Instant::now() < deadline,
            "{} of {want} MACs after 600 s",
            remote_entries(&hosts[0])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t0.elapsed();
    let rss = rss_kib();
    println!(
        "{want} MACs behind {vteps} VTEPs pinned on the vnio host {:.1} s after they were added; \
         process memory +{} KiB ({} B per MAC, the switch's FDB and agent with the test's own)",
        took.as_secs_f64(),
        rss.saturating_sub(rss0),
        rss.saturating_sub(rss0) * 1024 / want as u64
    );

    // Churn: half the VTEPs withdraw their MACs and announce them again,
    // over and over, while the endpoint pings the first VTEP's host.
    let mut ep = Endpoint::connect(
        &hosts[0].dir.sock("p1"),
        EndpointConfig::new(mac(1), common::ip(1)),
    )
    .unwrap();
    ep.resolve(behind.into(), T)
        .expect("the first VTEP's host answers ARP");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let churners: Vec<(String, Vec<[u8; 6]>)> = hosts[2..]
        .iter()
        .enumerate()
        .filter(|(k, _)| k % 2 == 0)
        .map(|(k, h)| (h.ns.name().to_string(), macs(k + 1)))
        .collect();
    let churn = std::thread::spawn(move || {
        let mut rounds = 0;
        while !s.load(std::sync::atomic::Ordering::SeqCst) {
            for add in [false, true] {
                for (ns, m) in &churners {
                    kernel_macs(ns, m, add);
                }
            }
            rounds += 1;
        }
        rounds
    });
    let (mut sent, mut lost) = (0u32, 0u32);
    let until = Instant::now() + Duration::from_secs(env("EVPN_CHURN_SECS", 20) as u64);
    while Instant::now() < until {
        sent += 1;
        ep.ping(behind.into(), 7, sent as u16, b"churn").unwrap();
        let got = ep.poll_until(Duration::from_millis(500), |_, ev| match ev {
            Event::EchoReply { seq, .. } if seq == sent as u16 => Some(()),
            _ => None,
        });
        if got.is_err() {
            lost += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let rounds = churn.join().unwrap();
    println!(
        "churn: {} MACs withdrawn and announced again {rounds} times; pings lost {lost} of {sent}",
        churners_len(vteps, per)
    );
    drop(hosts);
}

/// MACs the churn moves each round.
fn churners_len(vteps: usize, per: usize) -> usize {
    (vteps.saturating_sub(1)).div_ceil(2) * per
}
