//! Running a scenario's plan: for each configuration build the testbed,
//! for each point start the contention, run the workload from the client's
//! namespace through the measurement library (every session of every
//! target starts at one agreed instant, iterations with the median chosen),
//! stop the contention, hand the outcome to the caller (who stores it at
//! once), and always tear the testbed down.
//!
//! The stop flag (set by SIGINT in the CLI) ends the current iteration
//! early; what was measured is kept, no further point starts, and the
//! testbed is torn down as usual.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vnio_measure::result::Document;

use crate::contention::{ContentionReport, Running};
pub use crate::host::RunnerOptions;
pub use crate::outcome::{PointOutcome, Status};
use std::net::SocketAddr;

use crate::scenario::{HostKind, Plan, Point, Protocol, RunSpec, Scenario, WorkloadKind};
use crate::testbed::{BedContext, BedDescription, Testbed};

pub mod interleave;
mod via;
use via::rr_via;

/// What the caller sees while a run goes on.
#[derive(Debug)]
pub enum Event<'a> {
    /// A configuration's testbed is being built.
    Building {
        /// Configuration name.
        configuration: &'a str,
    },
    /// A point starts (index counts from 0 over the whole plan).
    PointStarted {
        /// The point.
        point: &'a Point,
    },
    /// Progress inside a point ("iteration 2/3").
    Progress(&'a str),
    /// A point ended (measured, failed or skipped).
    PointFinished {
        /// What came of it.
        outcome: &'a PointOutcome,
    },
    /// A configuration's testbed is being removed.
    TearingDown {
        /// Configuration name.
        configuration: &'a str,
    },
    /// An interleaved run repeats its whole plan once more, past its
    /// iterations (`placement_seconds`).
    Repeating {
        /// This repetition, from 1.
        repetition: u32,
        /// The most it may make.
        cap: u32,
        /// Points each repetition runs.
        points: usize,
        /// What is still short, in words.
        why: &'a str,
    },
    /// A line worth keeping above the progress (a run that ended short
    /// of what it asked for).
    Note(&'a str),
}

/// The runner reports through this; the CLI draws progress bars with it.
pub trait Observer: Sync {
    /// Something happened.
    fn event(&self, event: Event<'_>);
}

/// An observer that ignores everything.
pub struct Silent;

impl Observer for Silent {
    fn event(&self, _: Event<'_>) {}
}

/// What a whole scenario run did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunSummary {
    /// Points by status.
    pub ok: usize,
    /// Stopped during measurement.
    pub interrupted: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped by this build.
    pub skipped: usize,
    /// True when the stop flag ended the run early.
    pub stopped: bool,
    /// The testbeds as built, per configuration.
    pub testbeds: Vec<BedDescription>,
}

/// Why a run could not start. (Failures of single configurations or points
/// are recorded in their outcomes instead: the rest of the run goes on.)
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not root.
    #[error("vnio lab run builds network namespaces and needs root: run it as root (sudo)")]
    NotRoot,
    /// A configuration this build cannot run.
    #[error("this build cannot run {0}")]
    Unsupported(String),
    /// The caller's sink refused an outcome (e.g. the store failed).
    #[error("{0}")]
    Sink(String),
}

/// Run `plan` (made from `scenario`). Every outcome goes to `sink` as soon
/// as it is known, so a crash loses only the point in progress.
pub fn run(
    scenario: &Scenario,
    plan: &Plan,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
    observer: &dyn Observer,
    sink: &mut dyn FnMut(&PointOutcome) -> Result<(), String>,
) -> Result<RunSummary, RunError> {
    if !crate::is_root() {
        return Err(RunError::NotRoot);
    }
    if plan.run.interleave && plan.run.repetition_cap() > 1 {
        return interleave::run(scenario, plan, opts, stop, observer, sink);
    }
    if !plan.missing.is_empty() {
        let list: Vec<String> = plan
            .missing
            .iter()
            .map(|(cfg, why)| format!("configuration `{cfg}` ({})", why.join("; ")))
            .collect();
        return Err(RunError::Unsupported(list.join(", ")));
    }
    // What a crashed earlier run left (its owner is dead) goes first.
    // Machines first: their cleaning may use SSH sockets in local scratch
    // directories.
    let _ = crate::machine::MachineJournal::beside(&opts.journal).clean(false);
    let _ = opts.journal.clean_orphans();
    let ctx = BedContext {
        vnio: opts.vnio.clone(),
        journal: opts.journal.clone(),
        guests: opts.guests.clone(),
        stop: stop.clone(),
    };
    let mut summary = RunSummary::default();
    let mut record = |o: PointOutcome, summary: &mut RunSummary| -> Result<(), RunError> {
        match o.status {
            Status::Ok => summary.ok += 1,
            Status::Interrupted => summary.interrupted += 1,
            Status::Failed => summary.failed += 1,
            Status::Skipped => summary.skipped += 1,
        }
        observer.event(Event::PointFinished { outcome: &o });
        sink(&o).map_err(RunError::Sink)
    };
    for cfg in &plan.configurations {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let points: Vec<&Point> = plan
            .points
            .iter()
            .filter(|p| p.configuration == cfg.name)
            .collect();
        // A configuration whose points are all skipped is not built.
        if points.iter().all(|p| p.skip.is_some()) {
            for p in points {
                record(skipped(p), &mut summary)?;
            }
            continue;
        }
        observer.event(Event::Building {
            configuration: &cfg.name,
        });
        let bed = match Testbed::build(scenario, cfg, &ctx) {
            Ok(bed) => bed,
            Err(e) => {
                let why = format!("building configuration {}: {e}", cfg.name);
                for p in points {
                    let o = if p.skip.is_some() {
                        skipped(p)
                    } else {
                        failed(p, why.clone(), None)
                    };
                    record(o, &mut summary)?;
                }
                continue;
            }
        };
        summary.testbeds.push(bed.description().clone());
        let mut result = Ok(());
        for p in points {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if p.skip.is_some() {
                result = record(skipped(p), &mut summary);
            } else {
                observer.event(Event::PointStarted { point: p });
                let o = measure_point(&bed, p, &plan.run, opts, stop, observer);
                result = record(o, &mut summary);
            }
            if result.is_err() {
                break;
            }
        }
        observer.event(Event::TearingDown {
            configuration: &cfg.name,
        });
        // Errors here leave entries in the journal for `vnio lab clean`.
        let _ = bed.teardown();
        result?;
    }
    summary.stopped = stop.load(Ordering::Relaxed);
    Ok(summary)
}

fn skipped(p: &Point) -> PointOutcome {
    PointOutcome {
        point: p.clone(),
        status: Status::Skipped,
        error: p.skip.clone(),
        document: None,
        contention: None,
    }
}

fn failed(p: &Point, why: String, contention: Option<ContentionReport>) -> PointOutcome {
    PointOutcome {
        point: p.clone(),
        status: Status::Failed,
        error: Some(why),
        document: None,
        contention,
    }
}

fn measure_point(
    bed: &Testbed,
    p: &Point,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
    observer: &dyn Observer,
) -> PointOutcome {
    let running = match Running::start(bed, &p.contention, &opts.vnio, &opts.journal) {
        Ok(r) => r,
        Err(e) => return failed(p, format!("starting contention: {e}"), None),
    };
    let measured = if bed.description().knobs.testbed_cpu == Some(true) {
        crate::testbed::per_iteration(bed, run, stop, |one| {
            workload(bed, p, one, opts, stop, observer)
        })
    } else {
        workload(bed, p, run, opts, stop, observer)
    };
    let contention = running.stop();
    let contention =
        (!p.contention.is_idle() || !contention.errors.is_empty()).then_some(contention);
    match measured {
        Err(e) => failed(p, e, contention),
        Ok(doc) => {
            let status = if doc.interrupted {
                Status::Interrupted
            } else if doc.iterations.is_empty() {
                Status::Failed
            } else {
                Status::Ok
            };
            PointOutcome {
                point: p.clone(),
                status,
                error: (!doc.errors.is_empty()).then(|| doc.errors.join("; ")),
                document: Some(doc),
                contention,
            }
        }
    }
}

/// Run one workload from its client's namespace (or, for a poll-mode
/// client, through `vnio rr --via`).
fn workload(
    bed: &Testbed,
    p: &Point,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
    observer: &dyn Observer,
) -> Result<Document, String> {
    let w = &p.workload;
    let knobs = &bed.description().knobs;
    let from = bed
        .host(&w.from)
        .ok_or_else(|| format!("no host {}", w.from))?;
    if w.kind.is_pod_op() {
        return crate::testbed::pods::measure(bed, p, from, run, opts, stop);
    }
    let mut targets = Vec::new();
    for t in &w.to {
        let h = bed.host(t).ok_or_else(|| format!("no host {t}"))?;
        targets.push(h);
    }
    // Both endpoints of a pair are driven here: a poll-mode target on
    // another machine (its port is not here) answers UDP echo instead.
    let local_pmd =
        |h: &crate::testbed::BedHost| h.kind == HostKind::PollMode && h.vhost_user.is_some();
    if local_pmd(from) && targets.iter().all(|t| local_pmd(t)) {
        return crate::pair::measure(bed, p, from, targets[0], run, opts, stop);
    }
    let tool = knobs.instrument.unwrap_or_default();
    if tool != crate::tools::Instrument::Vnio {
        return crate::tools::measure(bed, p, from, targets[0], run, opts, stop);
    }
    if from.kind == HostKind::PollMode {
        return rr_via(bed, p, from, targets[0], run, opts, stop);
    }
    if from.kind == HostKind::Vm {
        return in_guest(from, &targets, p, run, knobs);
    }
    let client = from
        .netns()
        .ok_or_else(|| format!("client {} is not a namespace host", w.from))?;
    in_namespace(client, &targets, p, run, knobs, stop, observer)
}

/// Point `p` measured by the measurement library from `client`'s
/// namespace. The client's threads run in its namespace: threads started
/// from a thread that joined a namespace are in it too, so every session
/// socket the measurement library opens belongs there.
fn in_namespace(
    client: &vnio_topo::Netns,
    targets: &[&crate::testbed::BedHost],
    p: &Point,
    run: &RunSpec,
    knobs: &crate::scenario::Knobs,
    stop: &Arc<AtomicBool>,
    observer: &dyn Observer,
) -> Result<Document, String> {
    use vnio_measure::proto::Transport;
    let w = &p.workload;
    // Poll-mode targets answer UDP echo (RFC 862), not the agent protocol.
    let echo = targets.iter().all(|h| h.kind == HostKind::PollMode);
    let progress = |msg: &str| observer.event(Event::Progress(msg));
    let transport = match w.protocol {
        Protocol::Tcp => Transport::Tcp,
        Protocol::Udp => Transport::Udp,
    };
    let common = vnio_measure::run::Common {
        targets: targets
            .iter()
            .map(|h| {
                if echo {
                    SocketAddr::from((h.addr, ECHO_PORT)).to_string()
                } else {
                    h.agent_addr().to_string()
                }
            })
            .collect(),
        token: None,
        sessions: w.sessions,
        duration: run.duration,
        warmup: run.warmup,
        iterations: run.iterations,
        cpus: knobs.client_cpus.clone().unwrap_or_default(),
        agent_cpus: knobs.agent_cpus.clone().unwrap_or_default(),
        busy_poll_us: knobs.busy_poll_us,
        plain_echo: echo && w.kind == WorkloadKind::Rr,
        ci_goal: w.ci_goal(),
    };
    let stop = stop.clone();
    let job = match w.kind {
        WorkloadKind::Rr => vnio_measure::rr::job(&common, rr_params(p, knobs, transport)),
        WorkloadKind::Stream => {
            vnio_measure::stream::job(&common, stream_params(p, knobs, transport))
        }
        WorkloadKind::Attach | WorkloadKind::Detach => {
            return Err("attach and detach run no traffic".into())
        }
        WorkloadKind::Ping => {
            let params = ping_params(targets, p, run, knobs);
            return client
                .run(|| vnio_measure::ping::run(&params, stop, &progress))
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string());
        }
    };
    client
        .run(|| vnio_measure::run::run(&common, &job, stop, &progress))
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// A request-response workload's parameters.
fn rr_params(
    p: &Point,
    knobs: &crate::scenario::Knobs,
    transport: vnio_measure::proto::Transport,
) -> vnio_measure::rr::RrParams {
    let w = &p.workload;
    vnio_measure::rr::RrParams {
        transport,
        request: w.size,
        response: w.response_size,
        burst: w.burst,
        nodelay: w.nodelay,
        dirty: w.dirty,
        rate_per_session: w.rate.map(|r| (r / u64::from(w.sessions.max(1))).max(1)),
        arrival: w.arrivals,
        busy_poll_us: knobs.busy_poll_us,
        rx_timestamp: knobs.rx_timestamp.unwrap_or(false),
        via: None,
    }
}

/// A stream workload's parameters.
fn stream_params(
    p: &Point,
    knobs: &crate::scenario::Knobs,
    transport: vnio_measure::proto::Transport,
) -> vnio_measure::stream::StreamParams {
    use vnio_measure::stream::{Direction, StreamParams};
    let w = &p.workload;
    StreamParams {
        transport,
        direction: if w.reverse {
            Direction::Receive
        } else {
            Direction::Send
        },
        size: w.size,
        rate_per_session: w.rate.map(|r| (r / u64::from(w.sessions.max(1))).max(1)),
        burst: w.burst.max(1),
        busy_poll_us: knobs.busy_poll_us,
    }
}

/// A ping workload's parameters.
fn ping_params(
    targets: &[&crate::testbed::BedHost],
    p: &Point,
    run: &RunSpec,
    knobs: &crate::scenario::Knobs,
) -> vnio_measure::ping::PingParams {
    let w = &p.workload;
    vnio_measure::ping::PingParams {
        targets: targets.iter().map(|h| h.addr.to_string()).collect(),
        interval: w.interval,
        sessions: w.sessions,
        size: w.size as usize,
        duration: run.duration,
        warmup: run.warmup,
        iterations: run.iterations,
        cpus: knobs.client_cpus.clone().unwrap_or_default(),
        rx_timestamp: knobs.rx_timestamp.unwrap_or(false),
        ci_goal: w.ci_goal(),
    }
}

/// A guest client: the guest's own `vnio` runs the workload (through the
/// command channel, no network path needed) and prints its result
/// document. Its timestamps come from the guest's clock: under TCG they
/// stretch with the emulation, so compare configurations, not absolutes.
fn in_guest(
    from: &crate::testbed::BedHost,
    targets: &[&crate::testbed::BedHost],
    p: &Point,
    run: &RunSpec,
    knobs: &crate::scenario::Knobs,
) -> Result<Document, String> {
    let guest = from
        .guest()
        .ok_or_else(|| format!("{} has no guest", from.name))?;
    let w = &p.workload;
    let fmt = crate::scenario::humantime::format;
    let join = |v: Vec<String>| v.join(",");
    let agents = join(targets.iter().map(|h| h.agent_addr().to_string()).collect());
    let proto = match w.protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
    };
    let mut argv: Vec<String> = vec!["vnio".into(), w.kind.as_str().into()];
    let mut push = |a: &[&str]| argv.extend(a.iter().map(|s| s.to_string()));
    match w.kind {
        WorkloadKind::Rr => {
            push(&["-p", proto, "-t", &agents]);
            push(&["-s", &format!("{},{}", w.size, w.response_size)]);
            push(&["-b", &w.burst.to_string()]);
            if w.nodelay {
                push(&["--nodelay"]);
            }
            if w.dirty {
                push(&["--dirty"]);
            }
            if let Some(r) = w.rate {
                push(&["--rate", &r.to_string()]);
            }
            if knobs.rx_timestamp == Some(true) {
                push(&["--rx-timestamp"]);
            }
        }
        WorkloadKind::Stream => {
            push(&["-p", proto, "-t", &agents, "-s", &w.size.to_string()]);
            push(&["-b", &w.burst.max(1).to_string()]);
            if w.reverse {
                push(&["-R"]);
            }
            if let Some(r) = w.rate {
                push(&["--rate", &r.to_string()]);
            }
        }
        WorkloadKind::Ping => {
            let hosts = join(targets.iter().map(|h| h.addr.to_string()).collect());
            push(&[
                "-t",
                &hosts,
                "-i",
                &fmt(w.interval),
                "-s",
                &w.size.to_string(),
            ]);
            if knobs.rx_timestamp == Some(true) {
                push(&["--rx-timestamp"]);
            }
        }
        WorkloadKind::Attach | WorkloadKind::Detach => {
            return Err("attach and detach run no traffic".into())
        }
    }
    if let (Some(us), true) = (knobs.busy_poll_us, w.kind != WorkloadKind::Ping) {
        push(&["--busy-poll", &us.to_string()]);
    }
    push(&["--sessions", &w.sessions.to_string()]);
    push(&["-d", &fmt(run.duration), "--warmup", &fmt(run.warmup)]);
    push(&["--iterations", &run.iterations.to_string(), "--json"]);
    // The guest's clock and CPU run slow under TCG: generous, but bounded.
    let timeout = (run.duration + run.warmup) * run.iterations * 4 + GUEST_SLACK;
    let out = guest.exec(&argv, timeout)?;
    serde_json::from_str(&out).map_err(|e| {
        format!(
            "the result of `{}` in VM {} does not parse: {e}",
            argv.join(" "),
            from.name
        )
    })
}

/// Time a workload in a guest may take beyond its length (startup, and
/// the command channel under TCG).
const GUEST_SLACK: std::time::Duration = std::time::Duration::from_secs(60);

/// UDP echo port of the poll-mode endpoint's responder.
const ECHO_PORT: u16 = 7;
