//! `vnio switch perf` against a running switch: a guest that never takes
//! what it is sent has its receive queue's drops shown under its name, as
//! a count and a rate over `--interval` (`--json`) and since the port was
//! added (the table).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}

/// A frame from mac(`src`) to `dst`.
fn frame(dst: EthernetAddress, src: u8) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

#[test]
fn perf_shows_a_full_receive_queue_under_its_port() {
    let dir = Tmp(std::env::temp_dir().join(format!("vnio-perf-cli-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let ctl = dir.0.join("ctl.sock");
    let sock = |n: u8| dir.0.join(format!("p{n}.sock"));
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: ctl.clone(),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: [1, 2]
            .map(|n| PortSpec::vhost_user(&format!("p{n}"), sock(n), SocketMode::Server))
            .to_vec(),
    })
    .unwrap();
    let ep = |n: u8| {
        Endpoint::connect(
            &sock(n),
            EndpointConfig::new(mac(n), Ipv4Address([10, 0, 0, n])),
        )
        .unwrap()
    };
    // p1's guest never reads: its receive ring fills, then drops.
    let (mut e1, mut e2) = (ep(1), ep(2));
    e1.send_frame(&frame(EthernetAddress([0xff; 6]), 1))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(1)) {
        assert!(Instant::now() < deadline, "mac(1) never learned");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut perf = Command::new(VNIO)
        .args(["switch", "perf", "--interval", "1", "--json", "--control"])
        .arg(&ctl)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Sent all through the interval, whenever it starts.
    let f = frame(mac(1), 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while perf.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "perf never finished");
        if e2.send_frame(&f).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let out = perf.wait_with_output().unwrap();
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        doc["workers"][0]["figures"]["busy_share"].is_number(),
        "{doc}"
    );
    json_shows_holds_and_p1s_drops(&doc);
    // The table, since the ports were added: p1's drops, p2 quiet.
    let total = sw
        .handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "p1")
        .unwrap()
        .stats
        .rx
        .drops["ring_full"];
    let out = Command::new(VNIO)
        .args(["switch", "perf", "--control"])
        .arg(&ctl)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    assert!(text.contains("port p1 over"), "{text}");
    assert!(
        text.contains("  holds (away from polling after a wake-up or event check): "),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("rx ring full: queue 0 "))
        .unwrap_or_else(|| panic!("{text}"));
    let shown: u64 = line
        .split("queue 0 ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(shown >= total, "{line} for {total}");
    assert!(
        text.contains("no ring-full drops or held frames: p2"),
        "{text}"
    );
}

/// `switch perf --json` over an interval: the worker's holds by bucket (it
/// wakes for its ticks), p1's ring-full drops as a count and a rate that
/// agree, none for p2.
fn json_shows_holds_and_p1s_drops(doc: &serde_json::Value) {
    let holds = doc["workers"][0]["counters"]["holds"].as_array().unwrap();
    assert_eq!(holds.len(), vnio_switch::perf::HOLD_BUCKETS, "{doc}");
    assert!(
        holds.iter().map(|k| k.as_u64().unwrap()).sum::<u64>() > 0,
        "{doc}"
    );
    let port = |name: &str| {
        doc["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == name)
            .unwrap_or_else(|| panic!("no {name} in {doc}"))
            .clone()
    };
    let p1 = port("p1");
    let full = &p1["rx_ring_full"][0]["ring_full"];
    let (count, per_sec) = (
        full["count"].as_u64().unwrap(),
        full["per_sec"].as_f64().unwrap(),
    );
    let span = p1["span_ns"].as_f64().unwrap() / 1e9;
    println!("p1 over {span:.3} s: {count} ring-full drops, {per_sec:.0}/s");
    assert!(count > 0 && per_sec > 0.0, "{p1}");
    assert!((0.9..30.0).contains(&span), "{p1}");
    assert!((per_sec * span - count as f64).abs() < 1.0, "{p1}");
    assert_eq!(port("p2")["rx_ring_full"][0]["ring_full"]["count"], 0);
}
