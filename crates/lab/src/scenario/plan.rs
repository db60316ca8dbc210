//! From a scenario to the list of points a run measures: every
//! configuration, at every sweep value, every workload, with defaults and
//! the swept value filled in.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::capabilities::Capabilities;
use super::model::*;

/// Changes to a scenario for one run, from the command line or a set: its
/// length, the configurations measured, knobs. Stored with the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overrides {
    /// Measured time per iteration.
    pub duration: Option<Duration>,
    /// Warm-up per iteration.
    pub warmup: Option<Duration>,
    /// Iterations per point.
    pub iterations: Option<u32>,
    /// Whole seconds wanted at each placement (`RunSpec::placement_seconds`;
    /// 0 turns it off). Absent from runs stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_seconds: Option<u32>,
    /// The most repetitions those may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// CI-sized: 1 s, 200 ms warm-up, 1 iteration, and only the first and
    /// last value of a sweep (explicit values above still win).
    pub quick: bool,
    /// Run only these configurations (empty: all).
    pub configurations: Vec<String>,
    /// Knobs set for this run (`--knob`), in every configuration measured
    /// ([`super::with_knobs`] applies them to the scenario, which
    /// [`Plan::new`] then takes as it runs). Absent from runs stored
    /// before knobs could be overridden.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knobs: Vec<super::KnobOverride>,
}

impl Overrides {
    /// `self` completed by `under` where `self` says nothing.
    pub fn or(&self, under: &Overrides) -> Overrides {
        Overrides {
            duration: self.duration.or(under.duration),
            warmup: self.warmup.or(under.warmup),
            iterations: self.iterations.or(under.iterations),
            placement_seconds: self.placement_seconds.or(under.placement_seconds),
            max_iterations: self.max_iterations.or(under.max_iterations),
            quick: self.quick || under.quick,
            configurations: if self.configurations.is_empty() {
                under.configurations.clone()
            } else {
                self.configurations.clone()
            },
            knobs: if self.knobs.is_empty() {
                under.knobs.clone()
            } else {
                self.knobs.clone()
            },
        }
    }

    /// True when configuration `name` is measured (no filter, or named).
    pub fn measures(&self, name: &str) -> bool {
        self.configurations.is_empty() || self.configurations.iter().any(|c| c == name)
    }
}

/// Contention at one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedContention {
    /// Background loads (count may be 0).
    pub loads: Option<Loads>,
    /// Neighbour flood (rate may be 0).
    pub flood: Option<Flood>,
}

impl ResolvedContention {
    /// True when nothing runs in the background.
    pub fn is_idle(&self) -> bool {
        self.loads.as_ref().is_none_or(|l| l.count == 0)
            && self.flood.as_ref().is_none_or(|f| f.rate == 0)
    }
}

/// A workload with every default and the sweep value applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// Workload name.
    pub name: String,
    /// Kind.
    pub kind: WorkloadKind,
    /// Client host.
    pub from: String,
    /// Served hosts.
    pub to: Vec<String>,
    /// rr/stream transport.
    pub protocol: Protocol,
    /// Message / datagram / write / ping payload bytes.
    pub size: u32,
    /// rr response bytes.
    pub response_size: u32,
    /// rr requests in flight, stream packets per instant.
    pub burst: u32,
    /// Sessions per target.
    pub sessions: u32,
    /// rr TCP_NODELAY.
    pub nodelay: bool,
    /// rr dirty buffers.
    pub dirty: bool,
    /// Open-loop / paced rate per target.
    pub rate: Option<u64>,
    /// Ping interval.
    #[serde(with = "humantime")]
    pub interval: Duration,
    /// Stream from agent to client.
    pub reverse: bool,
    /// rr, ping: measure until this percentile is known ("99:5%").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<String>,
    /// With `ci`: the longest the point may measure.
    #[serde(
        default,
        with = "humantime_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duration: Option<Duration>,
    /// rr open loop: how sends are spaced.
    #[serde(default)]
    pub arrivals: vnio_measure::arrivals::Arrival,
    /// attach, detach: pods per iteration (0 for the other kinds).
    #[serde(default)]
    pub pods: u32,
}

/// Pods an attach or detach workload adds unless it says (issue 35's
/// "p50/p99 over 100 pods").
pub const PODS: u32 = 100;

/// Pods per iteration under `--quick`: enough to see every step work.
pub const QUICK_PODS: u32 = 5;

/// How long a point with `ci` may measure unless it says.
pub const CI_MAX_DURATION: Duration = Duration::from_secs(60);

impl Resolved {
    /// The `--ci` goal of this workload, if it sets one (validated).
    pub fn ci_goal(&self) -> Option<vnio_measure::goal::CiGoal> {
        let ci = self.ci.as_deref()?;
        vnio_measure::goal::CiGoal::parse(ci, self.max_duration.unwrap_or(CI_MAX_DURATION)).ok()
    }
}

impl Resolved {
    fn new(w: &WorkloadSpec, sweep: Option<(SweepParam, u64)>) -> Resolved {
        let at = |p: SweepParam| sweep.filter(|(q, _)| *q == p).map(|(_, v)| v);
        let protocol = w.protocol.unwrap_or_default();
        let default_size = match (w.kind, protocol) {
            (WorkloadKind::Ping, _) | (WorkloadKind::Attach | WorkloadKind::Detach, _) => 56,
            (WorkloadKind::Rr, _) => 256,
            (WorkloadKind::Stream, Protocol::Tcp) => 128 * 1024,
            (WorkloadKind::Stream, Protocol::Udp) => 1472,
        };
        let size = at(SweepParam::Size)
            .map(|v| v as u32)
            .or(w.size)
            .unwrap_or(default_size);
        Resolved {
            name: w.name.clone(),
            kind: w.kind,
            from: w.from.clone(),
            to: w.to.clone(),
            protocol,
            size,
            // A swept size sets both directions unless the response is fixed.
            response_size: w.response_size.unwrap_or(size),
            burst: at(SweepParam::Burst)
                .map(|v| v as u32)
                .or(w.burst)
                .unwrap_or(1),
            sessions: at(SweepParam::Sessions)
                .map(|v| v as u32)
                .or(w.sessions)
                .unwrap_or(1),
            nodelay: w.nodelay.unwrap_or(true),
            dirty: w.dirty.unwrap_or(true),
            rate: at(SweepParam::Rate).or(w.rate),
            interval: w.interval.unwrap_or(Duration::from_millis(1)),
            reverse: w.reverse.unwrap_or(false),
            ci: w.ci.clone(),
            max_duration: w.max_duration,
            arrivals: w.arrivals.unwrap_or_default(),
            pods: match w.kind.is_pod_op() {
                true => w.pods.unwrap_or(PODS),
                false => 0,
            },
        }
    }

    /// One line of the workload's parameters, for tables.
    pub fn describe(&self) -> String {
        let proto = match self.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        };
        let mut s = match self.kind {
            WorkloadKind::Ping => format!(
                "ping {} B every {} x {} session(s)",
                self.size,
                humantime::format(self.interval),
                self.sessions
            ),
            WorkloadKind::Rr => {
                let mut s = format!(
                    "rr {proto} {}/{} B burst {} x {} session(s)",
                    self.size, self.response_size, self.burst, self.sessions
                );
                if let Some(r) = self.rate {
                    s.push_str(&format!(" open loop {r}/s"));
                    if self.arrivals == vnio_measure::arrivals::Arrival::Poisson {
                        s.push_str(" poisson");
                    }
                }
                s
            }
            WorkloadKind::Stream => {
                let mut s = format!(
                    "stream {proto} {} B x {} session(s){}",
                    self.size,
                    self.sessions,
                    if self.reverse { " reverse" } else { "" }
                );
                if let Some(r) = self.rate {
                    s.push_str(&format!(" paced {r} pps burst {}", self.burst));
                }
                s
            }
            WorkloadKind::Attach | WorkloadKind::Detach => format!(
                "{} pods through the CNI plugin, each {} timed",
                self.pods,
                if self.kind == WorkloadKind::Attach {
                    "ADD"
                } else {
                    "DEL"
                }
            ),
        };
        if let Some(ci) = &self.ci {
            s.push_str(&format!(" until ci {ci}"));
        }
        s
    }
}

/// One measurement of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Position in the plan (0-based).
    pub seq: usize,
    /// Configuration name.
    pub configuration: String,
    /// Swept parameter and its value here.
    pub sweep: Option<(SweepParam, u64)>,
    /// The workload, resolved.
    pub workload: Resolved,
    /// Background work during this point.
    pub contention: ResolvedContention,
    /// Why this point is not measured in this build (shown in the report).
    pub skip: Option<String>,
}

/// Everything a run of one scenario measures, in order: configurations
/// outermost (each is built once), then sweep values, then workloads.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Length per iteration after overrides.
    pub run: RunSpec,
    /// Configurations run, in order (after the --configuration filter).
    pub configurations: Vec<Configuration>,
    /// The points.
    pub points: Vec<Point>,
    /// Configurations this build cannot run, with the reasons. A run with
    /// any is refused.
    pub missing: Vec<(String, Vec<String>)>,
    /// Configurations with VM hosts (each boots its guests).
    pub guest_configurations: usize,
}

impl Plan {
    /// True when a configuration of the plan has a VM host (the run must
    /// prepare the guest image and QEMU first).
    pub fn has_vm_hosts(&self) -> bool {
        self.guest_configurations > 0
    }

    /// Expand `s` with `o`'s length and configurations applied; `s` is the
    /// scenario as it runs, `o.knobs` already set ([`super::with_knobs`]).
    pub fn new(s: &Scenario, o: &Overrides, caps: &Capabilities) -> Result<Plan, String> {
        let mut run = s.run.clone();
        if o.quick {
            run.duration = Duration::from_secs(1);
            run.warmup = Duration::from_millis(200);
            run.iterations = 1;
            run.placement_seconds = 0;
        }
        if let Some(d) = o.duration {
            run.duration = d;
        }
        if let Some(w) = o.warmup {
            run.warmup = w;
        }
        if let Some(i) = o.iterations {
            run.iterations = i.max(1);
        }
        if let Some(n) = o.placement_seconds {
            run.placement_seconds = n;
        }
        if let Some(m) = o.max_iterations {
            run.max_iterations = Some(m.max(1));
        }
        if run.placement_seconds > 0 && !run.interleave {
            return Err(
                "placement seconds need interleaved iterations ([run] interleave = true): \
                 the repetitions added must reach every configuration alike"
                    .to_owned(),
            );
        }
        for name in &o.configurations {
            if !s.configurations.iter().any(|c| &c.name == name) {
                let known: Vec<&str> = s.configurations.iter().map(|c| c.name.as_str()).collect();
                return Err(format!(
                    "no configuration {name:?} in this scenario (it has {})",
                    known.join(", ")
                ));
            }
        }
        let configurations: Vec<Configuration> = s
            .configurations
            .iter()
            .filter(|c| o.measures(&c.name))
            .cloned()
            .collect();
        let values: Vec<Option<(SweepParam, u64)>> = match &s.sweep {
            None => vec![None],
            Some(sw) => {
                let mut v = sw.values.clone();
                if o.quick && v.len() > 2 {
                    v = vec![v[0], v[v.len() - 1]];
                }
                v.into_iter().map(|x| Some((sw.parameter, x))).collect()
            }
        };
        let mut points = Vec::new();
        let mut missing = Vec::new();
        for cfg in &configurations {
            let gaps = caps.missing(s, cfg);
            if !gaps.is_empty() {
                missing.push((cfg.name.clone(), gaps));
            }
            for &sweep in &values {
                let contention = contention_at(&s.contention, sweep);
                for w in &s.workloads {
                    let mut workload = Resolved::new(w, sweep);
                    if o.quick {
                        workload.pods = workload.pods.min(QUICK_PODS);
                    }
                    points.push(Point {
                        seq: points.len(),
                        configuration: cfg.name.clone(),
                        sweep,
                        workload,
                        contention: contention.clone(),
                        skip: caps.skip_reason(s, cfg, w),
                    });
                }
            }
        }
        let guest_configurations = configurations
            .iter()
            .filter(|c| {
                s.hosts
                    .iter()
                    .any(|h| super::validate::kind_in(s, c, &h.name) == HostKind::Vm)
            })
            .count();
        Ok(Plan {
            run,
            configurations,
            points,
            missing,
            guest_configurations,
        })
    }

    /// Rough wall time: each measured point costs its iterations plus about
    /// a second of set-up, each configuration a few seconds to build, and
    /// one with guests their boot (under TCG about half a minute).
    pub fn estimate(&self) -> Duration {
        let per_iteration = self.run.duration + self.run.warmup + Duration::from_millis(700);
        let measured = self.points.iter().filter(|p| p.skip.is_none()).count() as u32;
        per_iteration * self.run.iterations * measured
            + Duration::from_secs(1) * measured
            + Duration::from_secs(3) * self.configurations.len() as u32
            + Duration::from_secs(30) * self.guest_configurations as u32
    }
}

fn contention_at(c: &Contention, sweep: Option<(SweepParam, u64)>) -> ResolvedContention {
    let mut out = ResolvedContention {
        loads: c.loads.clone(),
        flood: c.flood.clone(),
    };
    match sweep {
        Some((SweepParam::Loads, v)) => {
            if let Some(l) = &mut out.loads {
                l.count = v as u32;
            }
        }
        Some((SweepParam::FloodRate, v)) => {
            if let Some(f) = &mut out.flood {
                f.rate = v;
            }
        }
        _ => {}
    }
    out
}
