//! The statistics a finding can read from a point, their units, and the
//! workload kinds that yield them (how they are read: [`super::samples`]).

use serde::{Deserialize, Serialize};

use super::model::WorkloadKind;

/// What a finding reads from a point.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum Statistic {
    /// Mean round trip, µs.
    #[serde(rename = "mean")]
    Mean,
    /// Median round trip, µs.
    #[serde(rename = "p50")]
    P50,
    /// 90th percentile, µs.
    #[serde(rename = "p90")]
    P90,
    /// 99th percentile, µs.
    #[serde(rename = "p99")]
    P99,
    /// 99.9th percentile, µs.
    #[serde(rename = "p99.9")]
    P999,
    /// 99.99th percentile, µs.
    #[serde(rename = "p99.99")]
    P9999,
    /// Longest round trip, µs.
    #[serde(rename = "max")]
    Max,
    /// p99 over the mean (the studies' "p99 within 2x the mean").
    #[serde(rename = "tail-ratio")]
    TailRatio,
    /// % of round trips above 1 ms.
    #[serde(rename = "over-1ms")]
    Over1ms,
    /// % of round trips above 5 ms.
    #[serde(rename = "over-5ms")]
    Over5ms,
    /// Transactions (rr, ping) or packets (stream) per second.
    #[serde(rename = "rate")]
    Rate,
    /// Throughput, Gbit/s.
    #[serde(rename = "gbps")]
    Gbps,
    /// CPU of the client and the agent per transaction or packet, µs.
    #[serde(rename = "cpu-per-op")]
    CpuPerOp,
    /// Share of the whole machine's CPU busy during the iteration, %.
    #[serde(rename = "machine-busy")]
    MachineBusy,
    /// The vnio switch process's CPU over the iteration, % of one core
    /// (knob `testbed_cpu`).
    #[serde(rename = "switch-busy")]
    SwitchBusy,
    /// CPU of the testbed's own processes (switch, poll-mode endpoints,
    /// guests' QEMU) per transaction or packet, µs (knob `testbed_cpu`).
    #[serde(rename = "testbed-cpu-per-op")]
    TestbedCpuPerOp,
}

impl Statistic {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Statistic::Mean => "mean",
            Statistic::P50 => "p50",
            Statistic::P90 => "p90",
            Statistic::P99 => "p99",
            Statistic::P999 => "p99.9",
            Statistic::P9999 => "p99.99",
            Statistic::Max => "max",
            Statistic::TailRatio => "tail-ratio",
            Statistic::Over1ms => "over-1ms",
            Statistic::Over5ms => "over-5ms",
            Statistic::Rate => "rate",
            Statistic::Gbps => "gbps",
            Statistic::CpuPerOp => "cpu-per-op",
            Statistic::MachineBusy => "machine-busy",
            Statistic::SwitchBusy => "switch-busy",
            Statistic::TestbedCpuPerOp => "testbed-cpu-per-op",
        }
    }

    /// Unit of the statistic's values.
    pub fn unit(self) -> &'static str {
        match self {
            Statistic::Mean
            | Statistic::P50
            | Statistic::P90
            | Statistic::P99
            | Statistic::P999
            | Statistic::P9999
            | Statistic::Max
            | Statistic::CpuPerOp
            | Statistic::TestbedCpuPerOp => "µs",
            Statistic::TailRatio => "x",
            Statistic::Over1ms
            | Statistic::Over5ms
            | Statistic::MachineBusy
            | Statistic::SwitchBusy => "%",
            Statistic::Rate => "/s",
            Statistic::Gbps => "Gbit/s",
        }
    }

    /// True for round-trip statistics (drawn on the latency figures).
    pub fn is_latency(self) -> bool {
        self.unit() == "µs" && !self.is_cpu()
    }

    /// True for CPU costs (never drawn on the latency figures).
    pub fn is_cpu(self) -> bool {
        matches!(
            self,
            Statistic::CpuPerOp
                | Statistic::MachineBusy
                | Statistic::SwitchBusy
                | Statistic::TestbedCpuPerOp
        )
    }

    /// True for the testbed's own CPU (needs knob `testbed_cpu`).
    pub fn needs_testbed_cpu(self) -> bool {
        matches!(self, Statistic::SwitchBusy | Statistic::TestbedCpuPerOp)
    }

    /// Whether a workload of `kind` yields the statistic.
    pub fn applies_to(self, kind: WorkloadKind) -> bool {
        match self {
            Statistic::Gbps => kind == WorkloadKind::Stream,
            Statistic::Rate
            | Statistic::CpuPerOp
            | Statistic::MachineBusy
            | Statistic::SwitchBusy
            | Statistic::TestbedCpuPerOp => true,
            _ => kind != WorkloadKind::Stream,
        }
    }
}
