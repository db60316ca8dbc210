//! The result document: one versioned JSON document per run, with every
//! parameter, the environment, each iteration's statistics and histograms,
//! and the chosen (median) iteration.

use serde::{Deserialize, Serialize};

use crate::cpu::{Cost, MachineUse};
use crate::env::{Environment, Placement};
use crate::placement::LineRoundTrips;
use crate::stats::{median_by_mean, Encoded, Latency, Summary};
use crate::switch_seconds::SwitchSecond;

/// Names the layout of [`Document`]; bumped on incompatible changes. /2
/// added each percentile's confidence interval (`latency.ci`); a /1
/// document still reads, with empty intervals.
pub const SCHEMA: &str = "vnio.result/2";

/// One point of the per-second series.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalPoint {
    pub t_s: u64,
    pub ops: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// What was measured toward one target, or merged over all.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Measured {
    /// The agent or ping target, or "all" for the merge.
    pub target: String,
    /// Round-trip statistics (rr, ping).
    pub latency: Option<Summary>,
    pub histogram: Option<Encoded>,
    /// Transactions (rr, ping) or packets (stream) in the measured window.
    pub ops: u64,
    pub ops_per_s: f64,
    /// Requests or packets sent, and those never answered or received.
    pub sent: u64,
    pub lost: u64,
    pub loss_pct: f64,
    /// Open-loop and paced runs: the rate asked for and the rate achieved.
    pub requested_rate: Option<f64>,
    pub achieved_rate: Option<f64>,
    /// Sends that left after their scheduled instant.
    pub late: u64,
    /// Payload bytes moved in the measured window.
    pub bytes: u64,
    pub gbps: f64,
    /// CPU the agent spent on this target's sessions.
    pub agent_cost: Option<Cost>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Iteration {
    pub index: usize,
    /// Length of the measured window.
    pub seconds: f64,
    pub merged: Measured,
    pub per_target: Vec<Measured>,
    pub intervals: Vec<IntervalPoint>,
    /// CPU of this client process, over transactions or packets incl. warm-up.
    pub client_cost: Cost,
    pub machine: MachineUse,
    pub placement: Vec<Placement>,
    pub errors: Vec<String>,
    /// CPU of the test bed's other processes over this iteration (the lab
    /// fills it in when asked: the switch, poll-mode endpoints, guests'
    /// QEMU); empty from the instrument alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub testbed_cost: Vec<ProcessCost>,
    /// How long a cache line took between the two CPUs of the test bed
    /// during the measured window, second by second (the lab fills it in
    /// beside rate workloads when asked: which placement the host gave
    /// them); none from the instrument alone, and in documents stored
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_round_trip: Option<LineRoundTrips>,
    /// What vnio's switch's workers did in each whole second of the
    /// measured window (second `s` at index `s`, as the window's
    /// per-second series; null for a second whose counters were not read
    /// in time): the lab fills it in beside probed rate workloads on
    /// vnio's switch; none on other wires, and in documents stored before
    /// it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_seconds: Option<Vec<Option<SwitchSecond>>>,
    /// Open loop: whether the sends' gaps were the arrivals asked for
    /// ([`crate::checks::arrivals`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<crate::checks::SampleCheck>,
}

/// CPU one process of the test bed spent over an iteration, its set-up and
/// warm-up included (the process is not the instrument's: the lab samples
/// it from outside, in nanoseconds on CPU).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessCost {
    /// What the process is, e.g. "switch", "endpoint server", "qemu a".
    pub name: String,
    pub cpu_ns: u64,
    /// Share of one core over the iteration's wall time, %.
    pub busy_pct: f64,
    /// CPU ns per transaction (rr, ping) or packet (stream) measured.
    pub ns_per_op: f64,
    /// CPU ns per KiB measured.
    pub ns_per_kib: f64,
}

/// How much the iterations differ.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Spread {
    pub mean_ns: [f64; 2],
    pub p99_ns: [u64; 2],
    pub ops_per_s: [f64; 2],
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Document {
    pub schema: String,
    /// "rr", "ping" or "stream".
    pub workload: String,
    /// Every option of the run, echoed.
    pub params: serde_json::Value,
    pub targets: Vec<String>,
    pub started_unix_ns: u64,
    pub environment: Environment,
    pub iterations: Vec<Iteration>,
    /// Index of the reported iteration: the median by mean round trip
    /// (latency workloads) or by rate (streams).
    pub chosen: usize,
    pub spread: Spread,
    pub interrupted: bool,
    pub errors: Vec<String>,
    /// A run with `--ci`: whether the percentile's interval came within
    /// the width asked for, over all rounds (its iterations) merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_goal: Option<crate::goal::GoalOutcome>,
    /// Whether the reported iteration's samples are independent and
    /// stationary ([`crate::checks`]); a failed one carries a warning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<crate::checks::SampleCheck>,
}

impl Document {
    pub fn new(
        workload: &str,
        params: serde_json::Value,
        targets: Vec<String>,
        environment: Environment,
    ) -> Document {
        Document {
            schema: SCHEMA.into(),
            workload: workload.into(),
            params,
            targets,
            started_unix_ns: crate::clock::realtime_ns(),
            environment,
            ..Default::default()
        }
    }

    /// Chooses the median iteration and computes the spread.
    pub fn conclude(&mut self) {
        let keys: Vec<f64> = self
            .iterations
            .iter()
            .map(|it| {
                it.merged
                    .latency
                    .as_ref()
                    .map_or(it.merged.ops_per_s, |l| l.mean_ns)
            })
            .collect();
        self.chosen = median_by_mean(&keys).unwrap_or(0);
        self.checks = crate::checks::of_document(self);
        let its = &self.iterations;
        if its.is_empty() {
            return;
        }
        let lat = |f: fn(&Summary) -> f64| {
            let v: Vec<f64> = its
                .iter()
                .filter_map(|i| i.merged.latency.as_ref().map(f))
                .collect();
            [
                v.iter().cloned().fold(f64::INFINITY, f64::min),
                v.iter().cloned().fold(0.0, f64::max),
            ]
        };
        let mean = lat(|s| s.mean_ns);
        let p99 = lat(|s| s.p99_ns as f64);
        let ops: Vec<f64> = its.iter().map(|i| i.merged.ops_per_s).collect();
        self.spread = Spread {
            mean_ns: if mean[0].is_finite() {
                mean
            } else {
                [0.0, 0.0]
            },
            p99_ns: if p99[0].is_finite() {
                [p99[0] as u64, p99[1] as u64]
            } else {
                [0, 0]
            },
            ops_per_s: [
                ops.iter().cloned().fold(f64::INFINITY, f64::min),
                ops.iter().cloned().fold(0.0, f64::max),
            ],
        };
    }

    pub fn chosen(&self) -> Option<&Iteration> {
        self.iterations.get(self.chosen)
    }

    /// All iterations' histograms merged (for merging runs and agents).
    pub fn merged_latency(&self) -> Option<Latency> {
        let mut all = Latency::new();
        for it in &self.iterations {
            all.merge(&Latency::decode(it.merged.histogram.as_ref()?).ok()?);
        }
        Some(all)
    }
}

impl Measured {
    /// Adds another target's counts (for the merge over all targets).
    pub fn add_counts(&mut self, o: &Measured) {
        self.ops += o.ops;
        self.sent += o.sent;
        self.lost += o.lost;
        self.late += o.late;
        self.bytes += o.bytes;
    }

    /// Fills the derived fields from counts over `seconds`.
    pub fn finish(&mut self, latency: Option<&Latency>, seconds: f64) {
        if let Some(l) = latency {
            self.latency = Some(l.summary());
            self.histogram = Some(l.encode());
        }
        if seconds > 0.0 {
            self.ops_per_s = self.ops as f64 / seconds;
            self.gbps = self.bytes as f64 * 8.0 / seconds / 1e9;
        }
        self.loss_pct = if self.sent > 0 {
            100.0 * self.lost as f64 / self.sent as f64
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(mean: f64, ops: f64) -> Iteration {
        Iteration {
            merged: Measured {
                latency: Some(Summary {
                    mean_ns: mean,
                    p99_ns: mean as u64 * 2,
                    ..Default::default()
                }),
                ops_per_s: ops,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn median_iteration_and_spread() {
        let mut d = Document::new(
            "rr",
            serde_json::Value::Null,
            vec![],
            Environment::default(),
        );
        d.iterations = vec![it(30.0, 10.0), it(10.0, 30.0), it(20.0, 20.0)];
        d.conclude();
        assert_eq!(d.chosen, 2);
        assert_eq!(d.spread.mean_ns, [10.0, 30.0]);
        assert_eq!(d.spread.p99_ns, [20, 60]);
        assert_eq!(d.spread.ops_per_s, [10.0, 30.0]);
        let json = serde_json::to_string(&d).unwrap();
        let back: Document = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
    }
}
