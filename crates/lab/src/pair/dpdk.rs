//! A poll-mode pair driven by the lab's DPDK endpoint program (knob
//! `endpoints = "dpdk"`, `crates/lab/dpdk/pair.c`): one process per point,
//! its lcore on the client's CPUs, both switch ports as `net_virtio_user`
//! devices, mbufs from a mempool (on hugepages with `endpoint_hugepages`,
//! as the anchor harness has them). Its records become the same
//! `vnio.result/2` document the lab's own pair writes: per-second points,
//! the line probe beside each rate iteration (`placement_probe`), the
//! lcore's CPU time as the client's cost. With `virtqueue = "packed"` the
//! devices offer packed rings in order, as the anchor harness's
//! `VU_EXTRA`; on vnio's switch the layout it served is recorded
//! (`params.rings`) and must be the one asked for.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnio_measure::cpu::{Cost, CpuTime, MachineTicks, MachineUse};
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, Iteration, Measured};
use vnio_measure::stats::Latency;

use super::records::{parse, Record, Total};
use super::{placement, FRAME_OVERHEAD};
use crate::anchor_switch::RuntimeDir;
use crate::scenario::{Point, RunSpec, Virtqueue, WorkloadKind};
use crate::testbed::{endpoints_listen, log_tail, BedHost, Testbed, HUGE_MB};

/// How long the program may take to bring both ports up (it waits 30 s
/// for a switch that connects to listening ports, OVS's way).
const START: Duration = Duration::from_secs(45);
/// Virtio ring size, as the anchor harness gives its endpoints.
const QUEUE_SIZE: u32 = 256;

/// Run point `p` between poll-mode hosts `from` and `to` with the DPDK
/// program.
pub(super) fn measure(
    bed: &Testbed,
    p: &Point,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let program = bed
        .dpdk_program()
        .ok_or("the DPDK endpoint program was not built for this configuration")?;
    let w = &p.workload;
    let rtt = match w.kind {
        WorkloadKind::Rr => true,
        WorkloadKind::Stream => false,
        WorkloadKind::Ping | WorkloadKind::Attach | WorkloadKind::Detach => {
            return Err("the DPDK endpoints run rr and stream only".into())
        }
    };
    let knobs = &bed.description().knobs;
    let virtqueue = knobs.virtqueue.unwrap_or_default();
    let cpus = knobs.client_cpus.clone().unwrap_or_default();
    let probe = if rtt { None } else { knobs.probe_cpus() };
    let watch = if rtt { None } else { placement::Watch::of(bed) };
    let name = format!("dpdk-pair-{}", p.seq);
    let log = bed.scratch().join(format!("{name}.log"));
    let runtime =
        RuntimeDir::named(bed.scratch(), &name, bed.journal()).map_err(|e| e.to_string())?;
    let mut cmd = command(bed, program, &runtime.prefix, &cpus, [from, to], virtqueue)?;
    let secs = |d: Duration| format!("{:.3}", d.as_secs_f64());
    cmd.arg("--")
        .arg(if rtt { "rtt" } else { "rate" })
        .arg((w.size + FRAME_OVERHEAD).to_string())
        .args([secs(run.warmup), secs(run.duration)])
        .arg(run.iterations.to_string())
        .args([from.addr.to_string(), to.addr.to_string()])
        .stdout(Stdio::piped());
    let params = serde_json::json!({
        "kind": if rtt { "pair-rtt" } else { "pair-rate" },
        "endpoints": "dpdk",
        "program": program,
        "payload": w.size,
        "frame": w.size + FRAME_OVERHEAD,
        "burst": if rtt { 1 } else { 32 },
        "mbufs": 16384,
        "queue_size": QUEUE_SIZE,
        "virtqueue": virtqueue.as_str(),
        "duration_s": run.duration.as_secs_f64(),
        "warmup_s": run.warmup.as_secs_f64(),
        "iterations": run.iterations,
        "cpus": cpus,
        "tx": from.vhost_user.as_ref().map(|v| &v.0),
        "rx": to.vhost_user.as_ref().map(|v| &v.0),
        "hugepages": bed.endpoint_huge_dir().is_some(),
        "placement_probe": probe,
    });
    let mut doc = Document::new(
        if rtt { "rr" } else { "stream" },
        params,
        vec![to.addr.to_string()],
        Environment::capture(250),
    );
    let t0 = MachineTicks::read();
    let child = crate::testbed::spawn(&mut cmd, bed.journal(), &log).map_err(|e| e.to_string())?;
    let what = format!("the DPDK endpoint pair ({})", program.display());
    let fail = |why: String| format!("{what} {why}: {}", log_tail(&log));
    // Once both devices are up, what vnio's switch serves them.
    let mut served = None;
    let mut on_ready = || match bed.switch_virtqueues(&[from, to]) {
        Some(Ok(rings)) => {
            let wrong = crate::testbed::virtqueue_mismatch(virtqueue, &rings);
            served = Some(Ok(rings));
            wrong.map_or(Ok(()), Err)
        }
        Some(Err(why)) => {
            served = Some(Err(why));
            Ok(())
        }
        None => Ok(()),
    };
    let reader = follow(child, Reader::new(rtt, watch), run, stop, &mut on_ready).map_err(fail)?;
    match served {
        Some(Ok(rings)) => doc.params["rings"] = crate::testbed::describe_virtqueues(&rings),
        // Not knowing the layout does not spoil the measurement: the
        // point says why it records none.
        Some(Err(why)) => doc
            .errors
            .push(format!("the switch's virtqueue layout is not known: {why}")),
        None => {}
    }
    for e in reader.iterations.iter().flat_map(|it| &it.errors) {
        if !doc.errors.contains(e) {
            doc.errors.push(e.clone());
        }
    }
    doc.iterations = reader.iterations;
    let during = match (t0, MachineTicks::read()) {
        (Some(a), Some(b)) => MachineUse::between(a, b),
        _ => MachineUse::default(),
    };
    doc.environment.set_during(during, 1);
    doc.interrupted = stop.load(Ordering::Relaxed);
    doc.conclude();
    drop(runtime);
    Ok(doc)
}

/// The program with its EAL options: pinned to `cpus`, its memory, the
/// two hosts' ports in order (A sends, B receives and answers), offering
/// `virtqueue`.
fn command(
    bed: &Testbed,
    program: &std::path::Path,
    prefix: &str,
    cpus: &[usize],
    hosts: [&BedHost; 2],
    virtqueue: Virtqueue,
) -> Result<Command, String> {
    // Every thread of it (DPDK's control threads too) on the client's
    // CPUs, as the lab's own pair keeps to them.
    let mut cmd = if cpus.is_empty() {
        Command::new(program)
    } else {
        let mut c = Command::new("taskset");
        c.args(["-c", &list(cpus)]).arg(program);
        c
    };
    let lcore = if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("0@(0-{})", n - 1)
    } else {
        format!("0@({})", list(cpus))
    };
    cmd.args(["--lcores", &lcore, "--no-pci", "--no-telemetry"])
        .args(["--file-prefix", prefix]);
    match bed.endpoint_huge_dir() {
        Some(dir) => {
            cmd.args(["--in-memory", "--single-file-segments", "--huge-dir"])
                .arg(dir)
                .args(["-m", &HUGE_MB.to_string()]);
        }
        // Without hugepages DPDK keeps legacy memory, which --in-memory
        // refuses; its run-time directory is the journaled one.
        None => {
            cmd.args(["--no-huge", "-m", "256"]);
        }
    }
    let server = endpoints_listen(bed.description().wire);
    for (i, host) in hosts.iter().enumerate() {
        let (sock, mac) = host
            .vhost_user
            .as_ref()
            .ok_or_else(|| format!("{} has no vhost-user port", host.name))?;
        cmd.arg("--vdev").arg(vdev(i, sock, mac, server, virtqueue));
    }
    Ok(cmd)
}

/// The `net_virtio_user` device of port `i` on socket `sock`: one queue
/// pair of [`QUEUE_SIZE`], the host's `mac`, listening when the switch
/// connects (`server`), offering `virtqueue`.
fn vdev(i: usize, sock: &std::path::Path, mac: &str, server: bool, virtqueue: Virtqueue) -> String {
    format!(
        "net_virtio_user{i},path={},queues=1,queue_size={QUEUE_SIZE},mac={mac}{}{}",
        sock.display(),
        if server { ",server=1" } else { "" },
        vdev_options(virtqueue)
    )
}

/// The device options that offer `virtqueue`: packed rings with IN_ORDER,
/// the anchor harness's `VU_EXTRA=",packed_vq=1,in_order=1"`; nothing for
/// split rings (virtio-user's default, IN_ORDER asked as well).
fn vdev_options(virtqueue: Virtqueue) -> &'static str {
    match virtqueue {
        Virtqueue::Split => "",
        Virtqueue::Packed => ",packed_vq=1,in_order=1",
    }
}

/// Reads the program's records into `reader` until it ends; on `stop`,
/// interrupts it (once: it ends the window and prints what it has);
/// `on_ready` runs when both devices are up, before the warm-up, and
/// fails the run with its reason. What went wrong, without the program's
/// name.
fn follow(
    mut child: vnio_topo::Process,
    mut reader: Reader,
    run: &RunSpec,
    stop: &AtomicBool,
    on_ready: &mut dyn FnMut() -> Result<(), String>,
) -> Result<Reader, String> {
    // Its output, line by line, from a thread of its own (the program
    // must never wait on a full pipe).
    let stdout = child
        .child_mut()
        .stdout
        .take()
        .ok_or("stdout is not piped")?;
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut deadline = Instant::now() + START;
    let mut signalled = false;
    loop {
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                let record = parse(&line)?;
                if record == Record::Ready {
                    on_ready()?;
                    let each = run.warmup + run.duration + Duration::from_secs(5);
                    deadline = Instant::now() + each * run.iterations + START;
                }
                reader.take(record)?;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if stop.load(Ordering::Relaxed) && !signalled {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            signalled = true;
        }
        if Instant::now() > deadline {
            return Err("did not finish in time".into());
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if let Some(why) = reader.error.take() {
        return Err(format!("failed: {why}"));
    }
    if !status.success() && !signalled {
        return Err(format!("exited ({status})"));
    }
    if reader.iterations.is_empty() && !signalled {
        return Err("ended without a measurement".into());
    }
    Ok(reader)
}

/// `1,2,3`.
fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The program's records gathered into iterations.
struct Reader {
    rtt: bool,
    watch: Option<placement::Watch>,
    beside: Option<placement::Beside>,
    errors: Vec<String>,
    window: Option<Instant>,
    intervals: Vec<vnio_measure::result::IntervalPoint>,
    latency: Latency,
    iterations: Vec<Iteration>,
    error: Option<String>,
}

impl Reader {
    fn new(rtt: bool, watch: Option<placement::Watch>) -> Reader {
        Reader {
            rtt,
            watch,
            beside: None,
            errors: Vec::new(),
            window: None,
            intervals: Vec::new(),
            latency: Latency::new(),
            iterations: Vec::new(),
            error: None,
        }
    }

    fn take(&mut self, record: Record) -> Result<(), String> {
        match record {
            Record::Ready => {}
            Record::Warmup(_) => {
                // Before the warm-up, so starting their threads stays
                // out of the window.
                self.beside = self.watch.as_ref().map(|w| w.start(&mut self.errors));
            }
            Record::Window { mono_ns, .. } => {
                let window = instant_of(mono_ns);
                if let Some(b) = &self.beside {
                    b.window(window);
                }
                self.window = Some(window);
            }
            Record::Second { point, .. } => self.intervals.push(point),
            Record::Rtt { ns, count, .. } => {
                for _ in 0..count {
                    self.latency.record(ns);
                }
            }
            Record::Total { iteration, total } => {
                let window = self.window.take().ok_or_else(|| {
                    format!("printed iteration {iteration}'s total before its window")
                })?;
                let it = self.iteration(iteration, window, total);
                self.iterations.push(it);
            }
            Record::Error(why) => self.error = Some(why),
        }
        Ok(())
    }

    fn iteration(&mut self, index: usize, window: Instant, t: Total) -> Iteration {
        let seconds = t.ns as f64 / 1e9;
        let cpu = CpuTime {
            user_ns: t.user_ns,
            sys_ns: t.sys_ns,
        };
        let length = Duration::from_nanos(t.ns);
        let (line_round_trip, switch_seconds) = match self.beside.take() {
            Some(b) => {
                let seen = b.finish(window, length, &mut self.errors);
                (seen.line_round_trip, seen.switch_seconds)
            }
            None => (None, None),
        };
        let mut merged = Measured {
            target: "all".into(),
            ops: t.received,
            sent: t.sent,
            lost: t.sent.saturating_sub(t.received),
            bytes: t.bytes,
            ..Default::default()
        };
        if self.rtt {
            merged.finish(Some(&self.latency), seconds);
            self.latency = Latency::new();
        } else {
            merged.finish(None, seconds);
            merged.achieved_rate = Some(merged.ops_per_s);
        }
        Iteration {
            index,
            seconds,
            per_target: vec![merged.clone()],
            client_cost: Cost::new(cpu, merged.ops, merged.bytes),
            merged,
            intervals: std::mem::take(&mut self.intervals),
            errors: std::mem::take(&mut self.errors),
            line_round_trip,
            switch_seconds,
            ..Default::default()
        }
    }
}

/// The instant `mono_ns` of CLOCK_MONOTONIC (the clock [`Instant`] reads
/// on Linux), to place the program's window against the probe's samples.
fn instant_of(mono_ns: u64) -> Instant {
    let now = Instant::now();
    let ago = vnio_measure::clock::now_ns().saturating_sub(mono_ns);
    now.checked_sub(Duration::from_nanos(ago)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `follow` over a stand-in for the program that prints `script`'s
    /// output and exits as it says.
    fn follow_sh(script: &str) -> Result<Reader, String> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdout(Stdio::piped());
        let child = vnio_topo::Process::spawn(&mut cmd).unwrap();
        let stop = AtomicBool::new(false);
        follow(
            child,
            Reader::new(false, None),
            &RunSpec::default(),
            &stop,
            &mut || Ok(()),
        )
    }

    #[test]
    fn packed_devices_offer_what_the_anchor_harness_appends() {
        let sock = std::path::Path::new("/run/vnio/lab/x/h1.sock");
        let mac = "52:54:00:77:01:01";
        assert_eq!(
            vdev(0, sock, mac, false, Virtqueue::Split),
            "net_virtio_user0,path=/run/vnio/lab/x/h1.sock,queues=1,queue_size=256,mac=52:54:00:77:01:01"
        );
        assert_eq!(
            vdev(1, sock, mac, false, Virtqueue::Packed),
            "net_virtio_user1,path=/run/vnio/lab/x/h1.sock,queues=1,queue_size=256,mac=52:54:00:77:01:01,packed_vq=1,in_order=1"
        );
        // Listening for OVS-DPDK's client ports, packed as well.
        assert!(vdev(0, sock, mac, true, Virtqueue::Packed)
            .ends_with(",server=1,packed_vq=1,in_order=1"));
    }

    #[test]
    fn a_layout_check_that_fails_stops_the_program_before_the_warmup() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo ready; sleep 5; echo warmup 0"])
            .stdout(Stdio::piped());
        let child = vnio_topo::Process::spawn(&mut cmd).unwrap();
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        let Err(e) = follow(
            child,
            Reader::new(false, None),
            &RunSpec::default(),
            &stop,
            &mut || Err("served split rings".into()),
        ) else {
            panic!("accepted")
        };
        assert_eq!(e, "served split rings");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    }

    #[test]
    fn records_become_iterations() {
        let r = follow_sh(
            "echo ready; echo warmup 0; echo window 0 1; echo second 0 0 7 0 0 0 0; \
             echo total 0 1000000000 9 7 154 5 1",
        )
        .unwrap();
        assert_eq!(r.iterations.len(), 1);
        let it = &r.iterations[0];
        assert_eq!((it.merged.ops, it.merged.sent, it.merged.lost), (7, 9, 2));
        assert_eq!(it.intervals.len(), 1);
        assert_eq!(it.client_cost.cpu.total_ns(), 6);
    }

    #[test]
    fn a_program_that_dies_fails_or_prints_garbage_is_one_line() {
        for (script, says) in [
            ("echo ready; exit 3", "exited (exit status: 3)"),
            ("echo ready; kill -9 $$", "signal: 9"),
            ("echo ready", "ended without a measurement"),
            (
                "echo 'error the switch did not bring both ports up'; exit 1",
                "failed: the switch did not bring both ports up",
            ),
            (
                "echo ready; echo 'EAL: hello'",
                "unexpected output \"EAL: hello\"",
            ),
            (
                "echo total 0 1 1 1 1 1 1",
                "printed iteration 0's total before its window",
            ),
        ] {
            let Err(e) = follow_sh(script) else {
                panic!("{script}: accepted")
            };
            assert!(e.contains(says), "{script}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
