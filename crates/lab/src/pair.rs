//! Workloads between two poll-mode endpoints driven by one thread (DPDK's
//! two-port shape, as the anchor harness's `vpair` drives its switches):
//! the same endpoints for vnio's switch, OVS-DPDK and testpmd, so only the
//! switch differs.
//!
//! - `rr` (UDP): one request in flight, client endpoint -> switch -> the
//!   target endpoint, answered by a UDP echo responder that the same thread
//!   serves (`vnio rr --echo-server --via A --via-echo B`), -> back: two
//!   switch traversals per round trip, no kernel and no wake-up.
//! - `stream` (UDP): the client endpoint sends bursts of 32 frames as fast
//!   as its ring takes them and the target endpoint counts what arrives
//!   (and recycles the buffers unread), in one busy loop
//!   (`vnio_switch::endpoint::rate::rate_step`; one CPU does all endpoint
//!   work; two busy-polling processes on one CPU would starve each other),
//!   cheap next to the switch so that the switch is what is measured. The workload's size is
//!   the UDP payload: 22 B makes 64 B frames, 1476 B makes 1518 B frames.
//!
//! - `stream` (TCP): a TCP stream made without a TCP stack
//!   (`vnio_switch::endpoint::tcp_stream`, `pair/tcp.rs`): window-limited MTU
//!   segments toward a receiver that negotiated TSO receive and sleeps on
//!   its notifications, every byte checked: what software LRO merges.
//!
//! With knob `endpoints = "dpdk"`, the UDP stream and rr are driven by the
//! lab's DPDK program instead (`pair/dpdk.rs`): the same shapes, with
//! DPDK's memory pattern, as the anchor harness drives its switches.
//!
//! All yield a `vnio.result/2` document, stored and judged like any other.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vnio_measure::clock::now_ns;
use vnio_measure::cpu::{Cost, CpuTime, MachineTicks, MachineUse};
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, IntervalPoint, Iteration, Measured};
use vnio_switch::endpoint::rate::{rate_step, BURST};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::error_chain;
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

use crate::host::RunnerOptions;
use crate::scenario::{Point, RunSpec, WorkloadKind};
use crate::testbed::{endpoints_listen, BedHost, Testbed};

mod dpdk;
mod placement;
pub use crate::testbed::program;
mod records;
mod switch_busy;
mod tcp;

pub use crate::testbed::{virtqueue_offered, HUGE_MB};

/// UDP echo port the responder answers on (RFC 862).
const ECHO_PORT: u16 = 7;
/// Ethernet, IPv4 and UDP headers: a frame is the payload plus these.
pub const FRAME_OVERHEAD: u32 = 42;
pub use crate::scenario::MAX_PAYLOAD;
/// How long an endpoint waits for its switch.
const OPEN: Duration = Duration::from_secs(15);

/// Run point `p` between poll-mode hosts `from` and `to`.
pub fn measure(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    if bed.description().knobs.endpoints == Some(crate::scenario::Endpoints::Dpdk) {
        return dpdk::measure(bed, p, from, to, run, stop);
    }
    match p.workload.kind {
        WorkloadKind::Rr => rr(bed, p, from, to, run, opts, stop),
        WorkloadKind::Stream if p.workload.protocol == crate::scenario::Protocol::Tcp => {
            tcp::stream(bed, from, to, run, stop)
        }
        WorkloadKind::Stream => rate(bed, p, from, to, run, stop),
        WorkloadKind::Ping | WorkloadKind::Attach | WorkloadKind::Detach => {
            Err("a poll-mode pair runs rr and stream only".into())
        }
    }
}

/// `vhost-user:SOCK,ip=A,mac=M[,listen]` for `host`.
fn via(bed: &Testbed, host: &BedHost) -> Result<String, String> {
    let (sock, mac) = host
        .vhost_user
        .as_ref()
        .ok_or_else(|| format!("{} has no vhost-user port", host.name))?;
    let listen = endpoints_listen(bed.description().wire);
    Ok(format!(
        "vhost-user:{},ip={},mac={mac}{}",
        sock.display(),
        host.addr,
        if listen { ",listen" } else { "" }
    ))
}

fn rr(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let w = &p.workload;
    let out = bed.scratch().join(format!("rr-pair-{}.json", p.seq));
    let log = bed.scratch().join(format!("rr-pair-{}.log", p.seq));
    let fmt = crate::scenario::humantime::format;
    let mut cmd = std::process::Command::new(&opts.vnio);
    cmd.args(["rr", "-p", "udp", "--echo-server"])
        .args(["-t", &format!("{}:{ECHO_PORT}", to.addr)])
        .args(["-s", &w.size.to_string()])
        .args(["-d", &fmt(run.duration), "--warmup", &fmt(run.warmup)])
        .args(["--iterations", &run.iterations.to_string()])
        .args(["--via", &via(bed, from)?])
        .args(["--via-echo", &via(bed, to)?])
        .arg("-o")
        .arg(&out)
        .stdout(std::process::Stdio::null());
    if let Some(c) = &bed.description().knobs.client_cpus {
        let list: Vec<String> = c.iter().map(|c| c.to_string()).collect();
        cmd.args(["--cpu", &list.join(",")]);
    }
    let child = crate::testbed::spawn(&mut cmd, &opts.journal, &log).map_err(|e| e.to_string())?;
    crate::testbed::wait_or_interrupt(child, stop, "vnio rr")?;
    let text = std::fs::read_to_string(&out).map_err(|_| {
        format!(
            "vnio rr between the endpoints wrote no result: {}",
            crate::testbed::log_tail(&log)
        )
    })?;
    serde_json::from_str(&text).map_err(|e| format!("vnio rr result {}: {e}", out.display()))
}

/// One end of the pair.
struct End {
    sock: std::path::PathBuf,
    mac: EthernetAddress,
    ip: Ipv4Addr,
    /// Rings and buffers on hugepages (knob `endpoint_hugepages`).
    huge: bool,
}

impl End {
    fn of(bed: &Testbed, host: &BedHost) -> Result<End, String> {
        let (sock, mac) = host
            .vhost_user
            .as_ref()
            .ok_or_else(|| format!("{} has no vhost-user port", host.name))?;
        Ok(End {
            sock: sock.clone(),
            mac: mac
                .parse()
                .map_err(|_| format!("{}: bad MAC {mac}", host.name))?,
            ip: host.addr,
            huge: bed.description().knobs.endpoint_hugepages == Some(true),
        })
    }

    fn open(&self, listen: bool) -> Result<Endpoint, String> {
        self.open_with(listen, |_| {})
    }

    /// Open with the endpoint's configuration adjusted by `set`.
    fn open_with(
        &self,
        listen: bool,
        set: impl FnOnce(&mut EndpointConfig),
    ) -> Result<Endpoint, String> {
        let mut cfg = EndpointConfig::new(self.mac, Ipv4Address::from(self.ip));
        cfg.echo_port = None;
        cfg.hugepages = self.huge;
        set(&mut cfg);
        cfg.connect_timeout = OPEN;
        if listen {
            Endpoint::listen(&self.sock, cfg, OPEN)
        } else {
            Endpoint::connect(&self.sock, cfg)
        }
        .map_err(|e| format!("endpoint on {}: {}", self.sock.display(), error_chain(&e)))
    }
}

fn rate(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let w = &p.workload;
    let (a, b) = (End::of(bed, from)?, End::of(bed, to)?);
    let listen = endpoints_listen(bed.description().wire);
    let knobs = &bed.description().knobs;
    let cpus = knobs.client_cpus.clone().unwrap_or_default();
    // The placement the host gives the switch's and the client's CPUs,
    // and on vnio's switch its busy share.
    let probe = knobs.probe_cpus();
    let watch = placement::Watch::of(bed);
    let params = serde_json::json!({
        "kind": "pair-rate",
        "payload": w.size,
        "frame": w.size + FRAME_OVERHEAD,
        "burst": BURST,
        "duration_s": run.duration.as_secs_f64(),
        "warmup_s": run.warmup.as_secs_f64(),
        "iterations": run.iterations,
        "cpus": cpus,
        "tx": a.sock,
        "rx": b.sock,
        "hugepages": a.huge,
        "placement_probe": probe,
    });
    let mut doc = Document::new(
        "stream",
        params,
        vec![to.addr.to_string()],
        Environment::capture(250),
    );
    let size = w.size;
    let run = run.clone();
    let stop_flag = stop.clone();
    // Its own thread, pinned where the scenario puts the client (the
    // runner's thread keeps its placement).
    let (its, during) = std::thread::scope(|scope| {
        scope
            .spawn(move || -> Result<_, String> {
                crate::testbed::pin_self(&cpus)?;
                // The receiver first: OVS connects to the sockets in turn.
                let mut rx = b.open(listen)?;
                let mut tx = a.open(listen)?;
                let frame = udp_frame(&a, &b, size)?;
                let t0 = MachineTicks::read();
                let mut its = Vec::new();
                for index in 0..run.iterations as usize {
                    if stop_flag.load(Ordering::Relaxed) {
                        break;
                    }
                    its.push(iteration(
                        &mut tx,
                        &mut rx,
                        &frame,
                        index,
                        &run,
                        watch.as_ref(),
                        &stop_flag,
                    ));
                }
                let during = match (t0, MachineTicks::read()) {
                    (Some(a), Some(b)) => MachineUse::between(a, b),
                    _ => MachineUse::default(),
                };
                Ok((its, during))
            })
            .join()
            .map_err(|_| "the pair's thread panicked".to_string())?
    })?;
    // An iteration's own trouble (a probe that could not start) is the
    // point's too, once.
    for e in its.iter().flat_map(|it| &it.errors) {
        if !doc.errors.contains(e) {
            doc.errors.push(e.clone());
        }
    }
    doc.iterations = its;
    doc.environment.set_during(during, 1);
    doc.interrupted = stop.load(Ordering::Relaxed);
    doc.conclude();
    Ok(doc)
}

/// An Ethernet/IPv4/UDP frame from `a` to `b` with `payload` zero bytes.
fn udp_frame(a: &End, b: &End, payload: u32) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; (payload + FRAME_OVERHEAD) as usize];
    let body = vec![0u8; payload as usize];
    vnio_switch::endpoint::stack::build_udp(
        &mut out,
        b.mac,
        a.mac,
        a.ip.into(),
        b.ip.into(),
        9,
        9,
        &body,
    )
    .ok_or("the frame does not fit")?;
    Ok(out)
}

/// Warm up, then count for the measured window, second by second; with
/// `watch`, the line probe (and on vnio's switch the reading of its
/// counters) runs beside it.
fn iteration(
    tx: &mut Endpoint,
    rx: &mut Endpoint,
    frame: &[u8],
    index: usize,
    run: &RunSpec,
    watch: Option<&placement::Watch>,
    stop: &AtomicBool,
) -> Iteration {
    let mut errors = Vec::new();
    let beside = watch.map(|w| w.start(&mut errors));
    let burst: Vec<&[u8]> = vec![frame; BURST];
    let (mut sent, mut got) = (0u64, 0u64);
    // What the ring does not take now is offered again in the next burst
    // (the switch not keeping up shows as a lower rate, not as loss).
    let mut step = |sent: &mut u64, got: &mut u64| {
        let (s, g) = rate_step(tx, rx, &burst);
        *sent += s as u64;
        *got += g as u64;
    };
    let warm_end = now_ns() + run.warmup.as_nanos() as u64;
    while now_ns() < warm_end && !stop.load(Ordering::Relaxed) {
        step(&mut sent, &mut got);
    }
    (sent, got) = (0, 0);
    let cpu0 = CpuTime::thread();
    let window = std::time::Instant::now();
    if let Some(b) = &beside {
        b.window(window);
    }
    let start = now_ns();
    let end = start + run.duration.as_nanos() as u64;
    let mut intervals = Vec::new();
    let (mut second_end, mut got_before) = (start + 1_000_000_000, 0u64);
    loop {
        // Look at the clock once per 16 bursts.
        for _ in 0..16 {
            step(&mut sent, &mut got);
        }
        let t = now_ns();
        if t >= second_end {
            intervals.push(IntervalPoint {
                t_s: intervals.len() as u64,
                ops: got - got_before,
                ..Default::default()
            });
            got_before = got;
            second_end += 1_000_000_000;
        }
        if t >= end || stop.load(Ordering::Relaxed) {
            break;
        }
    }
    let seconds = (now_ns() - start) as f64 / 1e9;
    let cpu = CpuTime::thread().since(cpu0);
    let length = Duration::from_secs_f64(seconds);
    let (line_round_trip, switch_seconds) = match beside {
        Some(b) => {
            let seen = b.finish(window, length, &mut errors);
            (seen.line_round_trip, seen.switch_seconds)
        }
        None => (None, None),
    };
    let payload = frame.len() as u64 - u64::from(FRAME_OVERHEAD);
    let bytes = got * payload;
    let merged = Measured {
        target: "all".into(),
        ops: got,
        ops_per_s: got as f64 / seconds,
        sent,
        lost: sent.saturating_sub(got),
        loss_pct: if sent == 0 {
            0.0
        } else {
            100.0 * sent.saturating_sub(got) as f64 / sent as f64
        },
        achieved_rate: Some(got as f64 / seconds),
        bytes,
        gbps: bytes as f64 * 8.0 / seconds / 1e9,
        ..Default::default()
    };
    Iteration {
        index,
        seconds,
        per_target: vec![merged.clone()],
        merged,
        intervals,
        client_cost: Cost::new(cpu, got, bytes),
        errors,
        line_round_trip,
        switch_seconds,
        ..Default::default()
    }
}
