//! Interrupt coalescing's effect and price, side by side in one run, with
//! two poll-mode endpoints that behave like interrupt-driven guests (take
//! what is there, arm the call with EVENT_IDX, sleep in epoll until it):
//!
//! 1. request-response at 1 K round trips/s: round-trip p50/p99 under
//!    `off`, `adaptive` and `static:32:50` (what a static hold adds);
//! 2. a one-way stream at a fixed rate: calls per frame at the receiver and
//!    the receiver's and the switch worker's CPU per frame, `off` vs `adaptive`.
//!
//! Policies alternate within the run (off, adaptive, off, adaptive, ...) and
//! the median repetition of each is printed with the ratios.
//!
//! `cargo run --release -p vnio-switch --example coalesce -- [REPS] [STREAM_KPPS]`
//! (the lab's `coalesce` scenario measures the same comparison end to end:
//! `sudo vnio lab run coalesce`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const MA: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MB: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn frame(dst: EthernetAddress, src: EthernetAddress) -> [u8; 64] {
    let mut f = [0u8; 64];
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

/// CPU time of a thread in nanoseconds (/proc schedstat: time on CPU).
fn cpu_ns(task: &str) -> u64 {
    std::fs::read_to_string(format!("{task}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// The switch worker's /proc task directory.
fn worker_task() -> String {
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.starts_with("vnio-switch-wor") {
            return e.path().display().to_string();
        }
    }
    panic!("no switch worker thread");
}

struct Bench {
    sw: Switch,
    a: Endpoint,
    b: Option<Endpoint>,
}

impl Bench {
    fn new(dir: &std::path::Path) -> Result<Self, Box<dyn std::error::Error>> {
        let sw = Switch::start(Config {
            switch: SwitchConfig {
                control: dir.join("ctl.sock"),
                ..Default::default()
            },
            ports: vec![
                PortSpec::vhost_user("a", dir.join("a.sock"), SocketMode::Server),
                PortSpec::vhost_user("b", dir.join("b.sock"), SocketMode::Server),
            ],
        })?;
        let mut a = Endpoint::connect(
            &dir.join("a.sock"),
            EndpointConfig::new(MA, Ipv4Address([10, 0, 0, 1])),
        )?;
        let mut b = Endpoint::connect(
            &dir.join("b.sock"),
            EndpointConfig::new(MB, Ipv4Address([10, 0, 0, 2])),
        )?;
        a.send_frame(&frame(MB, MA))?;
        b.send_frame(&frame(MA, MB))?;
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = [0u8; 2048];
        while a.poll_recv(&mut buf).is_some() {}
        while b.poll_recv(&mut buf).is_some() {}
        Ok(Self { sw, a, b: Some(b) })
    }

    fn policy(&self, p: &str) {
        for port in ["a", "b"] {
            self.sw
                .handle()
                .set_port(
                    port,
                    PolicyUpdate {
                        coalesce: Some(p.parse().unwrap()),
                        ..Default::default()
                    },
                )
                .unwrap();
        }
    }

    fn rx(&self, port: &str) -> vnio_switch::stats::QueueSnapshot {
        self.sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == port)
            .unwrap()
            .stats
            .rx
    }
}

/// Waits for a frame like an interrupt-driven guest: poll, arm, sleep.
fn recv_blocking(e: &mut Endpoint, buf: &mut [u8], stop: &AtomicBool) -> Option<usize> {
    loop {
        if let Some(n) = e.poll_recv(buf) {
            return Some(n);
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let _ = e.wait(Duration::from_millis(10));
    }
}

/// 1 K round trips per second for `secs`; returns sorted round trips.
fn rr(bench: &mut Bench, secs: f64) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut b = bench.b.take().unwrap();
    let st = stop.clone();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let reply = frame(MA, MB);
        while recv_blocking(&mut b, &mut buf, &st).is_some() {
            let _ = b.send_frame(&reply);
        }
        b
    });
    let req = frame(MB, MA);
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::new();
    let n = (secs * 1000.0) as u32;
    let t0 = Instant::now();
    let never = AtomicBool::new(false);
    for i in 0..n {
        let at = t0 + Duration::from_millis(u64::from(i));
        while Instant::now() < at {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        let s = Instant::now();
        bench.a.send_frame(&req).unwrap();
        recv_blocking(&mut bench.a, &mut buf, &never);
        rtts.push(s.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    bench.b = Some(echo.join().unwrap());
    rtts.sort();
    rtts
}

struct Stream {
    frames: u64,
    calls: u64,
    recv_cpu_ns: u64,
    worker_cpu_ns: u64,
}

/// A paced one-way stream a -> b at `kpps` for `secs`.
fn stream(bench: &mut Bench, kpps: u64, secs: f64) -> Stream {
    let stop = Arc::new(AtomicBool::new(false));
    let mut b = bench.b.take().unwrap();
    let st = stop.clone();
    let rx = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let c0 = cpu_ns("/proc/thread-self");
        let mut n = 0u64;
        while recv_blocking(&mut b, &mut buf, &st).is_some() {
            n += 1;
        }
        (b, n, cpu_ns("/proc/thread-self") - c0)
    });
    let before = bench.rx("b");
    let worker = worker_task();
    let w0 = cpu_ns(&worker);
    let f = frame(MB, MA);
    let burst = 8u64;
    let gap = Duration::from_nanos(burst * 1_000_000 / kpps);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut next = t0;
    while next < end {
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        for _ in 0..burst {
            let _ = bench.a.send_frame(&f);
        }
        next += gap;
    }
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (b, frames, recv_cpu_ns) = rx.join().unwrap();
    bench.b = Some(b);
    let after = bench.rx("b");
    Stream {
        frames,
        calls: after.notifications_sent - before.notifications_sent,
        recv_cpu_ns,
        worker_cpu_ns: cpu_ns(&worker) - w0,
    }
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

fn median_by<T, F: Fn(&T) -> f64>(mut v: Vec<T>, f: F) -> T {
    v.sort_by(|x, y| f(x).total_cmp(&f(y)));
    v.swap_remove(v.len() / 2)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let kpps: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let dir = std::env::temp_dir().join(format!("vnio-coalesce-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut bench = Bench::new(&dir)?;

    println!("# request-response, 1 K round trips/s, 64-byte frames, 2 s per repetition, {reps} repetitions alternating");
    let policies = ["off", "adaptive", "static:32:50"];
    let mut runs: Vec<Vec<Vec<Duration>>> = vec![Vec::new(); policies.len()];
    for _ in 0..reps {
        for (i, p) in policies.iter().enumerate() {
            bench.policy(p);
            runs[i].push(rr(&mut bench, 2.0));
        }
    }
    let mut p50 = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let r = median_by(std::mem::take(&mut runs[i]), |v| pct(v, 0.5));
        println!(
            "rr   {p:<14} p50 {:>7.2} µs  p99 {:>7.2} µs  p99.9 {:>7.2} µs",
            pct(&r, 0.5),
            pct(&r, 0.99),
            pct(&r, 0.999)
        );
        p50.push(pct(&r, 0.5));
    }
    println!(
        "rr   adaptive/off p50 ratio {:.3} (target within 5%); static:32:50 adds {:.1} µs at p50",
        p50[1] / p50[0],
        p50[2] - p50[0]
    );

    println!("# stream a -> b at {kpps} Kpps (bursts of 8), 2 s per repetition, receiver interrupt-driven");
    let mut s_runs: Vec<Vec<Stream>> = vec![Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (i, p) in ["off", "adaptive"].iter().enumerate() {
            bench.policy(p);
            s_runs[i].push(stream(&mut bench, kpps, 2.0));
        }
    }
    let mut calls_per = Vec::new();
    let mut cpu_per = Vec::new();
    for (i, p) in ["off", "adaptive"].iter().enumerate() {
        let r = median_by(std::mem::take(&mut s_runs[i]), |s| {
            s.calls as f64 / s.frames.max(1) as f64
        });
        let f = r.frames.max(1) as f64;
        println!(
            "stream {p:<12} frames {:>8}  calls/frame {:>7.4}  receiver CPU {:>6.0} ns/frame  worker CPU {:>6.0} ns/frame",
            r.frames,
            r.calls as f64 / f,
            r.recv_cpu_ns as f64 / f,
            r.worker_cpu_ns as f64 / f
        );
        calls_per.push(r.calls as f64 / f);
        cpu_per.push((r.recv_cpu_ns + r.worker_cpu_ns) as f64 / f);
    }
    println!(
        "stream off/adaptive calls ratio {:.1}x (target >= 5x); CPU per frame (receiver + worker) adaptive/off {:.2}",
        calls_per[0] / calls_per[1].max(1e-9),
        cpu_per[1] / cpu_per[0]
    );
    drop(bench);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
