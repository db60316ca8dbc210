//! Other instruments in vnio's place (knob `instrument`): sockperf
//! ping-pong and a raw echo loop for request-response, iperf3 for TCP
//! streams, run between the same namespaces as `vnio rr` and `vnio stream`,
//! so a configuration per instrument compares them point by point (what
//! `bench/instrument.sh` did beside the lab).
//!
//! Each iteration runs the tool's client for the warm-up and then for the
//! measured duration (sockperf also warms up on its own), against its
//! server started in the target's namespace for the point; the result is a
//! `vnio.result/2` document like the instrument's: sockperf's round-trip
//! percentiles (`--full-rtt`; no histogram), the raw loop's every round
//! trip (recorded into the instrument's histogram after the loop, so the
//! loop itself does nothing but send, receive and read the clock),
//! iperf3's received bytes. The client's CPU is what the lab's reaped
//! children used over the run (`getrusage`), the tool's only child then.

mod output;
mod raw_echo;

pub use output::{parse_iperf3, parse_sockperf};

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnio_measure::cpu::{Cost, CpuTime};
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, Iteration, Measured};

use crate::host::RunnerOptions;
pub use crate::scenario::Instrument;
use crate::scenario::{Point, Protocol, RunSpec};
use crate::testbed::{BedHost, Testbed};

/// Run point `p` from `from` to `to` with the configuration's instrument.
pub fn measure(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let w = &p.workload;
    let tool = bed.description().knobs.instrument.unwrap_or_default();
    let (Some(client), Some(server)) = (from.netns(), to.netns()) else {
        return Err("other instruments run between namespace hosts".into());
    };
    let target = SocketAddr::from((to.addr, TOOL_PORT));
    let udp = w.protocol == Protocol::Udp;
    let mut doc = Document::new(
        tool.as_str(),
        serde_json::json!({ "instrument": tool.as_str(), "size": w.size, "protocol": if udp { "udp" } else { "tcp" } }),
        vec![target.to_string()],
        Environment::capture(250),
    );
    // Placement as the instrument's: the client's threads on
    // `client_cpus`, the server's on `agent_cpus`.
    let knobs = &bed.description().knobs;
    let client_cpus = knobs.client_cpus.clone().unwrap_or_default();
    let agent_cpus = knobs.agent_cpus.clone().unwrap_or_default();
    // The server, for the whole point.
    let log = bed
        .scratch()
        .join(format!("{}-server-{}.log", tool.as_str(), p.seq));
    let _server = start_server(tool, server, to, udp, &agent_cpus, &log, opts)?;
    wait_listening(client, target, udp, tool)?;
    for i in 0..run.iterations.max(1) {
        if stop.load(Ordering::Relaxed) {
            doc.interrupted = true;
            break;
        }
        let cpu0 = children_cpu();
        // The raw loop runs in a thread of this process: its own CPU.
        let got = match tool {
            Instrument::RawEcho => raw_echo_client(client, udp, target, w.size, run, &client_cpus)?
                .map(|(m, cpu)| (m, Some(cpu))),
            _ => run_client(bed, p, tool, client, to, run, opts, stop, i, &client_cpus)
                .map(|m| (m, None)),
        };
        let (mut m, thread_cpu) = match got {
            Ok(m) => m,
            Err(e) if doc.iterations.is_empty() => return Err(e),
            Err(e) => {
                doc.errors.push(e);
                break;
            }
        };
        m.target = target.to_string();
        let cpu = thread_cpu.unwrap_or_else(|| children_cpu().since(cpu0));
        doc.iterations.push(Iteration {
            index: i as usize,
            seconds: run.duration.as_secs_f64(),
            per_target: vec![m.clone()],
            client_cost: Cost::new(cpu, m.ops, m.bytes),
            merged: Measured {
                target: "all".into(),
                ..m
            },
            ..Default::default()
        });
    }
    doc.conclude();
    Ok(doc)
}

/// Where the tools' servers listen (beside the agent's 7700).
const TOOL_PORT: u16 = 7711;

/// A point's server: a process (stopped when dropped), or the raw loop's
/// thread, told to stop when this is dropped.
/// The instrument's server in `server` (the target's namespace) on
/// `to`'s address, its threads on `cpus`, for the whole point: the raw
/// loop's in a thread of this process, the others' as a process logging
/// to `log`.
fn start_server(
    tool: Instrument,
    server: &vnio_topo::Netns,
    to: &BedHost,
    udp: bool,
    cpus: &[usize],
    log: &std::path::Path,
    opts: &RunnerOptions,
) -> Result<Server, String> {
    let target = SocketAddr::from((to.addr, TOOL_PORT));
    if tool == Instrument::RawEcho {
        let stop_server = Arc::new(AtomicBool::new(false));
        server
            .spawn({
                let stop = stop_server.clone();
                let cpus = cpus.to_vec();
                move || {
                    pin_this_thread(&cpus);
                    raw_echo::serve(udp, target, &stop)
                }
            })
            .map_err(|e| format!("starting the raw echo server: {e}"))?;
        return Ok(Server {
            _process: None,
            stop: Some(stop_server),
        });
    }
    let mut cmd = server.command(tool.program().expect("an external tool"));
    match tool {
        Instrument::Sockperf => {
            cmd.args(["server", "-i", &to.addr.to_string()])
                .args(["-p", &TOOL_PORT.to_string()]);
            if !udp {
                cmd.arg("--tcp");
            }
        }
        _ => {
            cmd.args(["-s", "-B", &to.addr.to_string()])
                .args(["-p", &TOOL_PORT.to_string()]);
        }
    }
    cmd.stdout(Stdio::null());
    let p = crate::testbed::spawn(&mut cmd, &opts.journal, log).map_err(|e| e.to_string())?;
    if !cpus.is_empty() {
        crate::testbed::pin_process(p.id() as i32, cpus)?;
    }
    Ok(Server {
        _process: Some(p),
        stop: None,
    })
}

/// One iteration of the raw loop's client in `client` (a thread of this
/// process on `cpus`): the warm-up, then the measured duration; what it
/// measured and the thread's CPU (the outer error: the thread did not
/// run; the inner one: the loop failed).
fn raw_echo_client(
    client: &vnio_topo::Netns,
    udp: bool,
    target: SocketAddr,
    size: u32,
    run: &RunSpec,
    cpus: &[usize],
) -> Result<Result<(Measured, CpuTime), String>, String> {
    let (warm, dur) = (run.warmup, run.duration);
    let cpus = cpus.to_vec();
    let got = client
        .run(move || {
            pin_this_thread(&cpus);
            let t0 = CpuTime::thread();
            raw_echo::client(udp, target, size as usize, warm)?;
            let lat = raw_echo::client(udp, target, size as usize, dur)?;
            Ok::<_, String>((lat, CpuTime::thread().since(t0)))
        })
        .map_err(|e| e.to_string())?;
    let (lat, cpu) = match got {
        Ok(got) => got,
        Err(e) => return Ok(Err(e)),
    };
    let mut m = Measured {
        target: "all".into(),
        ops: lat.count(),
        sent: lat.count(),
        bytes: lat.count() * 2 * size as u64,
        ..Default::default()
    };
    m.finish(Some(&lat), run.duration.as_secs_f64());
    Ok(Ok((m, cpu)))
}

struct Server {
    _process: Option<vnio_topo::Process>,
    stop: Option<Arc<AtomicBool>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            // The thread sees it within its socket timeout and returns.
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Wait until the server answers: a TCP connect (sockperf's UDP server
/// binds before it prints, so a short wait covers it).
fn wait_listening(
    client: &vnio_topo::Netns,
    target: SocketAddr,
    udp: bool,
    tool: Instrument,
) -> Result<(), String> {
    if udp {
        std::thread::sleep(Duration::from_millis(300));
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ok = client
            .run(move || {
                std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok()
            })
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the {} server at {target} did not start listening",
                tool.as_str()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pin the calling thread to `cpus` (none: leave it).
fn pin_this_thread(cpus: &[usize]) {
    use nix::sched::{sched_setaffinity, CpuSet};
    if cpus.is_empty() {
        return;
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        let _ = set.set(c);
    }
    let _ = sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
}

/// CPU of this process's reaped children so far.
fn children_cpu() -> CpuTime {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike;
    let Ok(u) = getrusage(UsageWho::RUSAGE_CHILDREN) else {
        return CpuTime::default();
    };
    CpuTime {
        user_ns: u.user_time().num_nanoseconds().max(0) as u64,
        sys_ns: u.system_time().num_nanoseconds().max(0) as u64,
    }
}

/// One iteration of sockperf's or iperf3's client, parsed.
#[allow(clippy::too_many_arguments)]
fn run_client(
    bed: &Testbed,
    p: &Point,
    tool: Instrument,
    client: &vnio_topo::Netns,
    to: &BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
    i: u32,
    cpus: &[usize],
) -> Result<Measured, String> {
    let w = &p.workload;
    let name = format!("{}-{}-{i}", tool.as_str(), p.seq);
    let (out, log) = (
        bed.scratch().join(format!("{name}.out")),
        bed.scratch().join(format!("{name}.log")),
    );
    // sockperf takes whole seconds (and warms up 400 ms of them itself).
    let secs = (run.warmup + run.duration)
        .as_secs_f64()
        .ceil()
        .max(1.0)
        .to_string();
    let mut cmd: Command = client.command(tool.program().expect("an external tool"));
    let addr = to.addr.to_string();
    let port = TOOL_PORT.to_string();
    match tool {
        Instrument::Sockperf => {
            cmd.args(["ping-pong", "--full-rtt", "-i", &addr, "-p", &port])
                .args(["-m", &w.size.to_string(), "-t", &secs]);
            if w.protocol == Protocol::Tcp {
                cmd.arg("--tcp");
            }
        }
        _ => {
            // The first warm-up's seconds are left out (-O): iperf3 counts
            // only whole seconds, so the run is rounded up.
            let omit = run.warmup.as_secs_f64().ceil().max(1.0) as u64;
            let total = omit + run.duration.as_secs_f64().ceil().max(1.0) as u64;
            cmd.args(["-c", &addr, "-p", &port, "-J"])
                .args(["-O", &omit.to_string(), "-t", &total.to_string()])
                .args(["-l", &w.size.to_string()]);
        }
    }
    let file = std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    cmd.stdout(file);
    let child = crate::testbed::spawn(&mut cmd, &opts.journal, &log).map_err(|e| e.to_string())?;
    if !cpus.is_empty() {
        crate::testbed::pin_process(child.id() as i32, cpus)?;
    }
    crate::testbed::wait_or_interrupt(child, stop, tool.as_str())?;
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let parsed = match tool {
        Instrument::Sockperf => parse_sockperf(&text),
        _ => parse_iperf3(&text, w.size),
    };
    parsed.ok_or_else(|| {
        // What it said last, on either stream.
        let said = output::strip_ansi(&text)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| crate::testbed::log_tail(&log));
        format!("{} printed no result: {said}", tool.as_str())
    })
}
