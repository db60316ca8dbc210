//! Running a workload against one or more agents: set up each test over its
//! control connection, start every session of every target at one agreed
//! instant, measure, collect the agents' reports, repeat for each iteration.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::client::{resolve, ClientError, Control};
use crate::clock;
use crate::cpu::{Cost, CpuTime, MachineTicks, MachineUse};
use crate::env::{Environment, Placement};
use crate::proto::{AgentReport, TestSpec, Workload};
use crate::result::{Document, Iteration, Measured};
use crate::session::{Ended, Intervals, Outcome, Window};
use crate::stats::Latency;

/// Options every agent-backed workload shares.
#[derive(Clone, Debug, Serialize)]
pub struct Common {
    pub targets: Vec<String>,
    #[serde(skip)]
    pub token: Option<String>,
    /// Sessions per target.
    pub sessions: u32,
    pub duration: Duration,
    pub warmup: Duration,
    pub iterations: u32,
    /// CPUs for client session threads, round-robin.
    pub cpus: Vec<usize>,
    /// CPUs for the agents' session threads, round-robin.
    pub agent_cpus: Vec<usize>,
    pub busy_poll_us: Option<u32>,
    /// The targets are plain UDP echo services (RFC 862: the datagram comes
    /// back as it went), not agents: no control connection, no agent report.
    #[serde(default)]
    pub plain_echo: bool,
    /// Measure in rounds of `duration` until this percentile is known
    /// ([`crate::goal`]); `iterations` is then the least number of rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_goal: Option<crate::goal::CiGoal>,
}

/// Everything a session thread needs.
pub struct SessionCtx {
    pub target: usize,
    /// Index of the session within its target.
    pub index: usize,
    /// Sessions per target.
    pub sessions: usize,
    pub agent: SocketAddr,
    pub key: u64,
    pub port: u16,
    pub window: Window,
    pub intervals: Arc<Intervals>,
    pub cpu: Option<usize>,
    /// The far end is an agent: a UDP session proves its address to it
    /// before data flows ([`crate::cookie`]); a plain echo service is not.
    pub agent_protocol: bool,
}

impl SessionCtx {
    /// Pins the thread as asked; returns the placement record.
    pub fn enter(&self) -> Placement {
        crate::pin::enter(
            format!("client session {} to {}", self.index, self.agent),
            self.cpu,
        )
    }

    /// This session's open-loop schedule at `rate` per second. A target's
    /// sessions are spread evenly over one period, as independent clients
    /// are: N sessions make a steady load, not bursts of N that queue behind
    /// each other (bursts are asked for explicitly, with `burst`).
    pub fn schedule(&self, rate: u64) -> crate::pace::Schedule {
        let period = 1_000_000_000 / rate.max(1);
        let phase = period * self.index as u64 / self.sessions.max(1) as u64;
        crate::pace::Schedule::new(self.window.start_ns + phase, rate, 1)
    }

    /// This session's open-loop arrivals at `rate` per second: the
    /// [`Self::schedule`], or Poisson arrivals seeded by the session's place
    /// (the same run sends at the same instants), and the sample of the
    /// gaps its sends really had.
    pub fn arrivals(
        &self,
        arrival: crate::arrivals::Arrival,
        rate: u64,
    ) -> (crate::arrivals::Arrivals, crate::arrivals::GapSample) {
        use crate::arrivals::{Arrival, Arrivals, GapSample};
        let a = match arrival {
            Arrival::Fixed => Arrivals::fixed(self.schedule(rate)),
            Arrival::Poisson => Arrivals::poisson(
                self.window.start_ns,
                rate,
                (self.target as u64) << 32 | self.index as u64,
            ),
        };
        let measure_s = self.window.end_ns.saturating_sub(self.window.measure_ns) as f64 / 1e9;
        (
            a,
            GapSample::new(arrival, rate, self.window.measure_ns, measure_s),
        )
    }

    /// Proves this UDP session's address to its agent (nothing to prove to
    /// a plain echo service), before the start instant.
    pub fn prove<D: crate::path::Datagrams>(&self, s: &mut D) -> Result<(), Ended> {
        if !self.agent_protocol {
            return Ok(());
        }
        crate::cookie::prove(s, self.key, || self.window.interrupted())
    }

    /// Waits for the agreed start instant.
    pub fn wait_start(&self) {
        clock::wait_until(self.window.start_ns);
    }

    pub fn describe(&self, e: Ended) -> String {
        match e {
            Ended::Stopped => "stopped".into(),
            Ended::Closed => format!(
                "agent {} closed data session {} mid-run (killed?)",
                self.agent, self.index
            ),
            Ended::Failed(m) => format!("session {} to {}: {m}", self.index, self.agent),
        }
    }
}

pub type SessionFn = Arc<dyn Fn(SessionCtx) -> Outcome + Send + Sync>;

/// A workload as the runner sees it.
pub struct Job {
    pub name: &'static str,
    pub params: serde_json::Value,
    pub workload: Workload,
    pub session: SessionFn,
    /// Whether per-target results carry latency statistics.
    pub latency: bool,
    /// Requested rate per target (open loop, paced).
    pub requested_rate: Option<f64>,
    /// The address data sessions come from when it is not this host's
    /// control connection (a kernel-bypass endpoint).
    pub data_from: Option<std::net::IpAddr>,
    /// Completes a target's figures with the agent's report (streams).
    pub with_report: fn(&mut Measured, &AgentReport, &[&Outcome]),
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Agent(#[from] ClientError),
    #[error("{0}")]
    Setup(String),
}

/// Runs `job` for every iteration; a failure before anything was measured is
/// an error, a failure later ends the run with what was measured and the
/// error recorded in the document.
pub fn run(
    common: &Common,
    job: &Job,
    stop: Arc<AtomicBool>,
    progress: &dyn Fn(&str),
) -> Result<Document, RunError> {
    let addrs: Vec<SocketAddr> = common
        .targets
        .iter()
        .map(|t| resolve(t))
        .collect::<Result<_, _>>()?;
    let env = Environment::capture(250);
    let mut doc = Document::new(job.name, job.params.clone(), common.targets.clone(), env);
    let wanted = common.iterations.max(1) as usize;
    for i in 0.. {
        let more = common
            .ci_goal
            .is_some_and(|g| g.another_round(&doc, common.duration));
        if i >= wanted && !more {
            break;
        }
        progress(&round_name(i, wanted, common.ci_goal.is_some()));
        match iteration(i, common, job, &addrs, stop.clone()) {
            Ok(it) => {
                let failed = !it.errors.is_empty();
                doc.errors.extend(it.errors.iter().cloned());
                doc.iterations.push(it);
                if failed {
                    break;
                }
            }
            Err(e) if doc.iterations.is_empty() => return Err(e),
            Err(e) => {
                doc.errors.push(crate::client::one_line(&e));
                break;
            }
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            doc.interrupted = true;
            break;
        }
    }
    if let Some(last) = doc.iterations.last() {
        let during = last.machine;
        let threads = (common.sessions as usize * addrs.len()).min(doc.environment.cpus);
        doc.environment.set_during(during, threads);
        doc.environment.placement = last.placement.clone();
    }
    doc.conclude();
    if let Some(g) = &common.ci_goal {
        g.conclude(&mut doc);
    }
    Ok(doc)
}

/// "iteration 2/3", or "round 4 (until the interval is narrow)".
pub(crate) fn round_name(i: usize, wanted: usize, goal: bool) -> String {
    if goal && i >= wanted {
        format!("round {} (until the interval is narrow enough)", i + 1)
    } else {
        format!("iteration {}/{}", i + 1, wanted)
    }
}

/// A target started for an iteration: its control connection (none for a
/// plain echo service), the session key and the ports its sessions use.
type Started = (Option<Control>, u64, Vec<u16>);

fn iteration(
    index: usize,
    c: &Common,
    job: &Job,
    addrs: &[SocketAddr],
    stop: Arc<AtomicBool>,
) -> Result<Iteration, RunError> {
    let lead_ns: u64 = 300_000_000;
    let start_unix = clock::realtime_ns() + lead_ns + 100_000_000 * addrs.len() as u64;
    let mut controls = start_targets(c, job, addrs, start_unix)?;
    // The agreed instant, mapped onto this host's monotonic clock.
    let start_ns = clock::now_ns() + start_unix.saturating_sub(clock::realtime_ns());
    let window = Window::new(
        start_ns,
        c.warmup.as_nanos() as u64,
        c.duration.as_nanos() as u64,
        stop,
    );
    let intervals = Arc::new(Intervals::default());
    let handles = spawn_sessions(c, job, addrs, &controls, &window, &intervals)?;
    clock::wait_until(start_ns);
    let (cpu0, ticks0) = (CpuTime::process(), MachineTicks::read());
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| Outcome {
                error: Some("a session thread panicked".into()),
                ..Default::default()
            })
        })
        .collect();
    let end_ns = clock::now_ns();
    let (cpu1, ticks1) = (CpuTime::process(), MachineTicks::read());
    let mut it = Iteration {
        index,
        ..Default::default()
    };
    // The measured window actually covered: cut short by Ctrl-C or a failure.
    it.seconds = (end_ns.min(window.end_ns).saturating_sub(window.measure_ns)) as f64 / 1e9;
    it.machine = match (ticks0, ticks1) {
        (Some(a), Some(b)) => MachineUse::between(a, b),
        _ => MachineUse::default(),
    };
    let reports = stop_targets(&mut controls, &mut it);
    let ops_total = summarise(job, addrs, &outcomes, &reports, &mut it);
    it.client_cost = Cost::new(cpu1.since(cpu0), ops_total, it.merged.bytes);
    it.intervals = intervals.points();
    Ok(it)
}

/// Asks every target's agent to start the test at `start_unix` (a plain
/// echo service needs no asking).
fn start_targets(
    c: &Common,
    job: &Job,
    addrs: &[SocketAddr],
    start_unix: u64,
) -> Result<Vec<Started>, RunError> {
    let warm_dur_ns = (c.warmup + c.duration).as_nanos() as u64;
    let spec = TestSpec {
        workload: job.workload.clone(),
        sessions: c.sessions,
        duration_ms: warm_dur_ns / 1_000_000 + 1,
        cpus: c.agent_cpus.clone(),
        busy_poll_us: c.busy_poll_us,
        start_at_unix_ns: start_unix,
        data_from: job.data_from,
    };
    let mut controls = Vec::with_capacity(addrs.len());
    for &addr in addrs {
        if c.plain_echo {
            // Any key will do: an echo service returns it with the datagram.
            let key = clock::realtime_ns() ^ (u64::from(std::process::id()) << 40);
            controls.push((None, key, vec![addr.port()]));
            continue;
        }
        let mut ctl = Control::connect(addr, c.token.as_deref())?;
        let (key, ports) = ctl.start(&spec)?;
        controls.push((Some(ctl), key, ports));
    }
    Ok(controls)
}

/// One thread per session, `c.sessions` per target, each on its CPU.
fn spawn_sessions(
    c: &Common,
    job: &Job,
    addrs: &[SocketAddr],
    controls: &[Started],
    window: &Window,
    intervals: &Arc<Intervals>,
) -> Result<Vec<std::thread::JoinHandle<Outcome>>, RunError> {
    let mut handles = Vec::new();
    let mut global = 0usize;
    for (t, (_, key, ports)) in controls.iter().enumerate() {
        for s in 0..c.sessions as usize {
            let port = if ports.len() == 1 {
                ports[0]
            } else {
                *ports.get(s).unwrap_or(&0)
            };
            let ctx = SessionCtx {
                target: t,
                index: s,
                sessions: c.sessions as usize,
                agent: addrs[t],
                key: *key,
                port,
                window: window.clone(),
                intervals: intervals.clone(),
                cpu: crate::pin::pick(&c.cpus, global),
                agent_protocol: !c.plain_echo,
            };
            global += 1;
            let f = job.session.clone();
            let h = std::thread::Builder::new()
                .name(format!("s{t}.{s}"))
                .spawn(move || f(ctx))
                .map_err(|e| RunError::Setup(format!("cannot start a session thread: {e}")))?;
            handles.push(h);
        }
    }
    Ok(handles)
}

/// Stops every agent; their reports by target (`None`: no agent, or its
/// error, kept in `it`).
fn stop_targets(controls: &mut [Started], it: &mut Iteration) -> Vec<Option<AgentReport>> {
    let mut reports = Vec::with_capacity(controls.len());
    for (ctl, _, _) in controls.iter_mut() {
        let Some(ctl) = ctl else {
            reports.push(None);
            continue;
        };
        match ctl.stop() {
            Ok(r) => reports.push(Some(r)),
            Err(e) => {
                it.errors.push(crate::client::one_line(&e));
                reports.push(None);
            }
        }
    }
    reports
}

/// Each target's figures and the merged ones into `it`, from the sessions'
/// `outcomes` and the agents' `reports`. Returns the operations counted.
fn summarise(
    job: &Job,
    addrs: &[SocketAddr],
    outcomes: &[Outcome],
    reports: &[Option<AgentReport>],
    it: &mut Iteration,
) -> u64 {
    let mut merged_lat = Latency::new();
    let mut merged = Measured {
        target: "all".into(),
        ..Default::default()
    };
    let mut ops_total = 0u64;
    let mut agent_cpu = CpuTime::default();
    for (t, addr) in addrs.iter().enumerate() {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.target == t).collect();
        let (mut m, lat, target_ops_total) =
            crate::session::sum_target(&mine, addr.to_string(), it);
        m.requested_rate = job.requested_rate;
        if let Some(r) = &reports[t] {
            (job.with_report)(&mut m, r, &mine);
            m.agent_cost = Some(Cost::new(r.cpu, target_ops_total, m.bytes));
            agent_cpu.add(r.cpu);
            it.placement.extend(r.placement.iter().cloned());
        }
        m.finish(job.latency.then_some(&lat), it.seconds);
        if job.requested_rate.is_some() {
            m.achieved_rate = Some(m.ops_per_s);
        }
        merged_lat.merge(&lat);
        merged.add_counts(&m);
        ops_total += target_ops_total;
        it.per_target.push(m);
    }
    merged.requested_rate = job.requested_rate.map(|r| r * addrs.len() as f64);
    merged.finish(job.latency.then_some(&merged_lat), it.seconds);
    if merged.requested_rate.is_some() {
        merged.achieved_rate = Some(merged.ops_per_s);
    }
    if !reports.is_empty() && reports.iter().all(Option::is_some) {
        merged.agent_cost = Some(Cost::new(agent_cpu, ops_total, merged.bytes));
    }
    it.merged = merged;
    let gaps: Vec<_> = outcomes.iter().filter_map(|o| o.gaps.as_ref()).collect();
    it.arrivals = crate::checks::arrivals(&gaps);
    ops_total
}

/// For workloads whose figures come from the client alone.
pub fn no_report(_: &mut Measured, _: &AgentReport, _: &[&Outcome]) {}
