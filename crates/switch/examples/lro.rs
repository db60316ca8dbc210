//! Software LRO's effect and price, side by side in one run (LRO on and off
//! alternating on the same switch and endpoints).
//!
//! A sending thread pushes a TCP stream as 1448-byte segments in bursts of
//! 32 (a guest's transmit batches), with a TCP-like window: never more than
//! `WINDOW` bytes unconsumed by the receiver (it blocks until the receiver
//! catches up), so nothing overflows and nothing is lost. Twice: fully
//! checksummed segments (a sender without offloads: the switch verifies
//! every segment it merges), then segments whose checksum is left to
//! offload (trusted: merged without a check). A receiving thread stands in
//! for a guest that negotiated TSO receive and mergeable buffers, doing
//! what its driver and stack do per byte and per frame: it sleeps on the
//! call eventfd when its ring is empty (an interrupt-driven NAPI poll, 64
//! frames per poll), copies each frame out of its buffers (the copy to the
//! application), verifies the TCP checksum of every frame the header does
//! not vouch for (no NEEDS_CSUM or DATA_VALID: the stack's software
//! checksum), and checks that every byte is the one sent at that stream
//! offset, in order (the run stops on any difference or loss). It does not
//! model the rest of a kernel's per-frame work (socket buffers, GRO, TCP
//! state), which is what fewer frames would save most in a real guest, so
//! this bench understates LRO's receive-side saving. The switch worker
//! sleeps when idle, so its CPU time is the work it does.
//!
//! Printed: frames the receiver gets per MiB, payload Gbps, CPU per MiB in
//! the receiver and in the switch worker (and the sender's, for the
//! record), calls per MiB, and request-response round trips with one
//! 100-byte PSH segment each way between busy-polling endpoints, p50/p99:
//! what LRO costs a latency flow. Medians over the rounds.
//!
//! `cargo run --release -p vnio-switch --example lro -- [ROUNDS] [SECS]`
//! (the stream itself is
//! `vnio_switch::endpoint::tcp_stream`, which the lab's `lro` scenario runs
//! between poll-mode hosts). `VNIO_BENCH_CASE=on`,
//! `off`, `on-full`, `off-partial`, ... runs those cases only (for
//! profiling); `VNIO_BENCH_VERBOSE=1` prints the switch's counters after
//! each case; `VNIO_BENCH_COALESCE` sets the receiving port's interrupt
//! coalescing (default: the switch's default, adaptive).

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use vnio_switch::coalesce::Coalesce;
use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::tcp_stream::{self, Flow, StreamStats, BURST, MSS, QUEUE, WINDOW};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::device::feature;
use vnio_switch::wire::tcp::flags;
use vnio_switch::wire::testing::{pattern, TcpFrame};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const MA: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MB: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn cpu_ns(task: &str) -> u64 {
    std::fs::read_to_string(format!("{task}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn worker_task() -> String {
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.starts_with("vnio-switch-wor") {
            return e.path().display().to_string();
        }
    }
    panic!("no switch worker thread");
}

fn addressed(mut f: Vec<u8>, dst: EthernetAddress, src: EthernetAddress) -> Vec<u8> {
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f
}

/// One case's stream (the library's), with the switch worker's CPU and
/// the calls the receiver got, which only an in-process switch can read.
struct Stream {
    s: StreamStats,
    worker_cpu: u64,
    calls: u64,
}

fn stream(a: &mut Endpoint, b: &mut Endpoint, secs: f64, partial: bool) -> Stream {
    let worker = worker_task();
    let w0 = cpu_ns(&worker);
    let flow = Flow {
        src: MA,
        dst: MB,
        partial,
    };
    let s = tcp_stream::run(
        a,
        b,
        &flow,
        Duration::from_secs_f64(secs),
        &AtomicBool::new(false),
    );
    Stream {
        s,
        worker_cpu: cpu_ns(&worker) - w0,
        calls: 0,
    }
}

fn rr(a: &mut Endpoint, b: &mut Endpoint, secs: f64) -> Vec<Duration> {
    let seg = |from: EthernetAddress, to: EthernetAddress, seq: u32| {
        let f = TcpFrame {
            seq,
            flags: flags::ACK | flags::PSH,
            payload: pattern(100, seq),
            ..Default::default()
        };
        addressed(f.build(false), to, from)
    };
    let (req, resp) = (seg(MA, MB, 10), seg(MB, MA, 20));
    let mut buf = vec![0u8; 70_000];
    let mut v = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t = Instant::now();
        a.send_frame(&req).unwrap();
        while b.poll_recv(&mut buf).is_none() {}
        b.send_frame(&resp).unwrap();
        while a.poll_recv(&mut buf).is_none() {}
        v.push(t.elapsed());
    }
    v.sort();
    v
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// (LRO, the sender leaves checksums to offload), in the order they run.
const CASES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2.0);
    let only = std::env::var("VNIO_BENCH_CASE").ok();
    let verbose = std::env::var_os("VNIO_BENCH_VERBOSE").is_some();
    let dir = std::env::temp_dir().join(format!("vnio-lro-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (sw, mut a, mut b) = start(&dir)?;
    let mut buf = vec![0u8; 70_000];
    // The receiving port's interrupt coalescing (VNIO_BENCH_COALESCE; the default policy otherwise).
    let coalesce: Coalesce = match std::env::var("VNIO_BENCH_COALESCE") {
        Ok(c) => c.parse()?,
        Err(_) => Coalesce::default(),
    };
    println!(
        "# stream: {MSS}-byte TCP segments in bursts of {BURST}; window {} KiB; queues of {QUEUE}; receiver's coalescing {coalesce}; {secs} s per case; {reps} rounds of LRO off then on, with full checksums (the sender has no offloads: the switch verifies what it merges) then partial ones (checksum offload: trusted); receiver: NAPI polls of 64, sleeps on its call eventfd, copies out, software checksum unless offloaded, byte check; the switch worker sleeps when idle",
        WINDOW / 1024
    );
    println!("# request-response: one 100-byte PSH segment each way between busy-polling endpoints, {} s per case", secs / 2.0);
    let mut runs: Vec<Vec<Stream>> = CASES.iter().map(|_| Vec::new()).collect();
    let mut rrs: [Vec<Vec<Duration>>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (i, &(on, partial)) in CASES.iter().enumerate() {
            let name = format!(
                "{}-{}",
                if on { "on" } else { "off" },
                if partial { "partial" } else { "full" }
            );
            if only.as_deref().is_some_and(|c| !name.starts_with(c)) {
                continue;
            }
            let case = Case {
                on,
                partial,
                secs,
                coalesce,
                verbose,
            };
            runs[i].push(case.run(&sw, &mut a, &mut b)?);
            // Nothing of this case may reach the next one (an aggregate waits 50 µs at most).
            std::thread::sleep(Duration::from_millis(2));
            while a.poll_recv(&mut buf).is_some() || b.poll_recv(&mut buf).is_some() {}
            if !partial {
                rrs[usize::from(on)].push(rr(&mut a, &mut b, secs / 2.0));
            }
        }
    }
    let res = print_streams(&mut runs);
    print_ratios(&res);
    print_rr(&mut rrs);
    drop(sw);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A switch with ports a and b in `dir`, an endpoint on each (a sends
/// with checksum offload, b takes TSO frames), both known to the switch
/// and their rings empty.
fn start(dir: &Path) -> Res<(Switch, Endpoint, Endpoint)> {
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
    let mut ca = EndpointConfig::new(MA, Ipv4Address([10, 0, 0, 1]));
    ca.queue_size = QUEUE;
    ca.offloads = feature::CSUM;
    let mut a = Endpoint::connect(&dir.join("a.sock"), ca)?;
    let mut cb = EndpointConfig::new(MB, Ipv4Address([10, 0, 0, 2]));
    cb.offloads = feature::GUEST_CSUM | feature::GUEST_TSO4;
    cb.queue_size = QUEUE;
    let mut b = Endpoint::connect(&dir.join("b.sock"), cb)?;
    // Both announce themselves so the switch knows their ports.
    for (e, m) in [(&mut a, MA), (&mut b, MB)] {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&m.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        e.send_frame(&f)?;
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0u8; 70_000];
    while a.poll_recv(&mut buf).is_some() {}
    while b.poll_recv(&mut buf).is_some() {}
    Ok((sw, a, b))
}

/// One case of one round.
struct Case {
    on: bool,
    partial: bool,
    secs: f64,
    coalesce: Coalesce,
    verbose: bool,
}

impl Case {
    /// Sets the receiving port's LRO, runs the stream and checks that every
    /// byte came, as sent.
    fn run(&self, sw: &Switch, a: &mut Endpoint, b: &mut Endpoint) -> Res<Stream> {
        let (on, partial) = (self.on, self.partial);
        sw.handle()
            .set_port(
                "b",
                PolicyUpdate {
                    lro: Some(on),
                    coalesce: Some(self.coalesce),
                    ..Default::default()
                },
            )
            .unwrap();
        let calls = || -> Res<u64> {
            Ok(sw
                .handle()
                .list()?
                .iter()
                .find(|p| p.name == "b")
                .map_or(0, |p| p.stats.rx.notifications_sent))
        };
        let c0 = calls()?;
        let mut run = stream(a, b, self.secs, partial);
        run.calls = calls()? - c0;
        let s = &run.s;
        assert_eq!(s.bad, 0, "bytes not as sent (LRO {on})");
        // The window keeps the receiver's ring from overflowing: nothing is dropped.
        assert_eq!(s.lost, 0, "bytes lost (LRO {on})");
        if self.verbose {
            for p in sw.handle().list()? {
                let drops: u64 = p.stats.rx.drops.values().sum();
                eprintln!(
                    "  lro {on} partial {partial}: port {}: tx {} rx {} rx drops {} lro_merged {} calls {} (receiver: verified {} lost {} timeouts {})",
                    p.name,
                    p.stats.tx.packets,
                    p.stats.rx.packets,
                    drops,
                    p.stats.rx.lro_merged,
                    p.stats.rx.notifications_sent,
                    s.verified,
                    s.lost,
                    s.rx_timeouts
                );
            }
        }
        Ok(run)
    }
}

/// Prints each case's medians; returns them (None: the case did not run).
fn print_streams(runs: &mut [Vec<Stream>]) -> Vec<Option<[f64; 7]>> {
    let mib = |r: &Stream| r.s.bytes as f64 / (1 << 20) as f64;
    let med = |v: &mut [Stream], key: &dyn Fn(&Stream) -> f64| {
        v.sort_by(|x, y| key(x).total_cmp(&key(y)));
        key(&v[v.len() / 2])
    };
    let mut res = Vec::new();
    for (i, &(on, partial)) in CASES.iter().enumerate() {
        let v = &mut runs[i];
        if v.is_empty() {
            res.push(None);
            continue;
        }
        let r = [
            med(v, &|r| r.s.bytes as f64 * 8.0 / r.s.secs / 1e9),
            med(v, &|r| r.s.frames as f64 / mib(r)),
            med(v, &|r| r.s.rx_cpu_ns as f64 / mib(r) / 1e3),
            med(v, &|r| r.worker_cpu as f64 / mib(r) / 1e3),
            med(v, &|r| (r.s.rx_cpu_ns + r.worker_cpu) as f64 / mib(r) / 1e3),
            med(v, &|r| r.s.tx_cpu_ns as f64 / mib(r) / 1e3),
            med(v, &|r| r.calls as f64 / mib(r)),
        ];
        println!(
            "{:<7} {:<8} {:>6.2} Gbps  {:>6.1} frames/MiB  CPU µs/MiB: receiver {:>6.1} worker {:>6.1} (sum {:>6.1}; sender {:>6.1})  calls/MiB {:>6.1}",
            if on { "LRO on" } else { "LRO off" },
            if partial { "partial" } else { "full" },
            r[0], r[1], r[2], r[3], r[4], r[5], r[6]
        );
        res.push(Some(r));
    }
    res
}

/// Prints LRO on against off, for each kind of checksum.
fn print_ratios(res: &[Option<[f64; 7]>]) {
    for k in [0, 2] {
        let (Some(off), Some(on)) = (&res[k], &res[k + 1]) else {
            continue;
        };
        println!(
                "on/off, {} checksums: frames per MiB {:.3}, throughput {:.2}, CPU per MiB: worker {:.2}, receiver {:.2}, both {:.2}, calls per MiB {:.2}",
                if k == 0 { "full" } else { "partial" },
                on[1] / off[1],
                on[0] / off[0],
                on[3] / off[3],
                on[2] / off[2],
                on[4] / off[4],
                on[6] / off[6]
            );
    }
}

/// Prints the request-response percentiles, LRO off and on.
fn print_rr(rrs: &mut [Vec<Vec<Duration>>; 2]) {
    let mut p = [[0.0; 2]; 2];
    for (i, name) in ["LRO off", "LRO on"].iter().enumerate() {
        let r = &mut rrs[i];
        if r.is_empty() {
            continue;
        }
        r.sort_by(|x, y| pct(x, 0.5).total_cmp(&pct(y, 0.5)));
        p[i][0] = pct(&r[r.len() / 2], 0.5);
        r.sort_by(|x, y| pct(x, 0.99).total_cmp(&pct(y, 0.99)));
        p[i][1] = pct(&r[r.len() / 2], 0.99);
        println!(
            "{name:<7} rr p50 {:>6.2} µs  p99 {:>6.2} µs",
            p[i][0], p[i][1]
        );
    }
    if p[0][0] > 0.0 && p[1][0] > 0.0 {
        println!(
            "on/off: rr p50 {:.2}, rr p99 {:.2}",
            p[1][0] / p[0][0],
            p[1][1] / p[0][1]
        );
    }
}
