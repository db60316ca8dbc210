//! The scenario file's shape: what a user writes, field by field.
//!
//! Every struct denies unknown fields, so a typo is an error that names the
//! field and its line instead of a silently ignored setting.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(super) use super::knobs::Knobs;

/// One scenario: hosts, the configurations compared side by side, knobs,
/// contention, workloads, an optional sweep, and how long to measure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// One line shown in lists and as the report's heading.
    pub title: String,
    /// The study experiment this scenario reproduces.
    pub maps_to: String,
    /// What this machine cannot reproduce of that experiment.
    #[serde(default)]
    pub cannot: Option<String>,
    /// Measurement length and repetitions.
    #[serde(default)]
    pub run: RunSpec,
    /// The endpoints.
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// Other machines hosts may be placed on (reached over SSH).
    #[serde(default, rename = "machine", skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<super::machines::MachineSpec>,
    /// The set-ups compared (at least one).
    #[serde(rename = "configuration")]
    pub configurations: Vec<Configuration>,
    /// Knobs for every configuration (a configuration's own knobs win).
    #[serde(default)]
    pub knobs: Knobs,
    /// Background load and neighbour traffic.
    #[serde(default)]
    pub contention: Contention,
    /// What is measured (at least one).
    #[serde(rename = "workload")]
    pub workloads: Vec<WorkloadSpec>,
    /// One parameter varied over a list of values.
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// The studies' findings this scenario tests over its own results.
    #[serde(default, rename = "finding", skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<super::finding::FindingSpec>,
}

/// Measurement length: the studies ran 5 minutes, 3 iterations, and reported
/// the median iteration by mean round trip.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunSpec {
    /// Measured time per iteration.
    #[serde(with = "humantime")]
    pub duration: Duration,
    /// Time run but not recorded before each iteration.
    #[serde(with = "humantime")]
    pub warmup: Duration,
    /// Iterations per point; the median one (by mean) is reported.
    pub iterations: u32,
    /// Run the whole plan once per iteration, every configuration in turn,
    /// instead of each configuration's iterations back to back (see
    /// [`crate::runner::interleave`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interleave: bool,
    /// With `interleave` and the line probe: after `iterations`, repeat
    /// until every probed point has this many whole seconds at each
    /// placement any of them reached (0: never repeat), at most
    /// [`RunSpec::repetition_cap`] repetitions in all. A ratio taken per
    /// placement from a few seconds moves with the host's state within
    /// that placement; this gives every side of it the same footing.
    #[serde(skip_serializing_if = "is_zero")]
    pub placement_seconds: u32,
    /// The most repetitions `placement_seconds` may run (default three
    /// times `iterations`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl RunSpec {
    /// The most repetitions a run makes: `iterations`, or with
    /// `placement_seconds` the cap (never below `iterations`).
    pub fn repetition_cap(&self) -> u32 {
        if self.placement_seconds == 0 {
            return self.iterations;
        }
        self.max_iterations
            .unwrap_or(3 * self.iterations)
            .max(self.iterations)
    }
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(1),
            iterations: 3,
            interleave: false,
            placement_seconds: 0,
            max_iterations: None,
        }
    }
}

/// What kind of endpoint a host is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum HostKind {
    /// A network namespace: the kernel's stack, a `vnio agent` inside.
    Namespace,
    /// A poll-mode endpoint (user-space virtio driver) on a vhost-user port
    /// of the vnio switch: answers ARP, ping and UDP echo without a kernel.
    PollMode,
    /// A virtual machine (not built by the lab yet).
    Vm,
}

impl HostKind {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Namespace => "namespace",
            HostKind::PollMode => "poll-mode",
            HostKind::Vm => "vm",
        }
    }
}

/// One endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Lower-case letters and digits, at most 12 characters.
    pub name: String,
    /// Endpoint kind (default: namespace); configurations may override it.
    #[serde(default = "default_host_kind")]
    pub kind: HostKind,
    /// Behind the uplink: on an outside segment (a Linux bridge standing for
    /// the physical network) joined to the wire by one veth, which the vnio
    /// switch drives as its uplink port. Default: on the wire itself.
    #[serde(default)]
    pub remote: bool,
    /// On another machine (a `[[machine]]` name): built there over SSH and
    /// joined to the wire over the network between the machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

fn default_host_kind() -> HostKind {
    HostKind::Namespace
}

/// What joins the hosts: one L2 segment.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum WireKind {
    /// A veth pair straight between two namespaces (the studies' native path).
    Veth,
    /// A Linux bridge in its own namespace, a veth to each host.
    Bridge,
    /// The vnio switch: a tap port per namespace host, a vhost-user port per
    /// poll-mode host.
    Switch,
    /// OVS-DPDK (a netdev bridge, a `dpdkvhostuserclient` port per
    /// poll-mode host, port-to-port flows): an anchor switch to compare
    /// vnio's with. Two poll-mode hosts only.
    OvsDpdk,
    /// DPDK's testpmd forwarding between two `net_vhost` ports (io mode,
    /// no switching at all): the other anchor. Two poll-mode hosts only.
    Testpmd,
}

impl WireKind {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            WireKind::Veth => "veth",
            WireKind::Bridge => "bridge",
            WireKind::Switch => "switch",
            WireKind::OvsDpdk => "ovs-dpdk",
            WireKind::Testpmd => "testpmd",
        }
    }

    /// True for the wires made of a vhost-user switch (poll-mode hosts
    /// plug into them).
    pub fn has_vhost_user(self) -> bool {
        matches!(
            self,
            WireKind::Switch | WireKind::OvsDpdk | WireKind::Testpmd
        )
    }

    /// True for the anchor switches (OVS-DPDK, testpmd).
    pub fn is_anchor(self) -> bool {
        matches!(self, WireKind::OvsDpdk | WireKind::Testpmd)
    }
}

/// One set-up compared with the others.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// Lower-case letters, digits and '-', at most 24 characters.
    pub name: String,
    /// One line for the report.
    #[serde(default)]
    pub description: Option<String>,
    /// The wire joining every host.
    pub wire: WireKind,
    /// Host kinds that differ from the hosts' own, by host name.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostKind>,
    /// Knobs for this configuration only (over the scenario's).
    #[serde(default)]
    pub knobs: Knobs,
}

/// Contention added around the measured workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Contention {
    /// CPU background loads: servers that answer TCP requests at a set rate
    /// with a set CPU cost each (the studies' background VMs).
    #[serde(default)]
    pub loads: Option<Loads>,
    /// A UDP flood toward a neighbour (the studies' bandwidth contention).
    #[serde(default)]
    pub flood: Option<Flood>,
}

/// CPU background loads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Loads {
    /// Number of load servers, each its own process (a "1-vCPU VM").
    pub count: u32,
    /// Host the servers run in.
    pub on: String,
    /// Host their request generator runs in.
    pub from: String,
    /// Requests per second per server.
    pub rate: u64,
    /// CPU time spent per request, in microseconds (5K req/s x 40 us = 20 %
    /// of a core).
    pub work_us: u64,
    /// CPUs the servers are pinned to (round-robin); none: unpinned.
    #[serde(default)]
    pub cpus: Vec<usize>,
}

/// A paced UDP flood toward a neighbour.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Flood {
    /// Host the flood leaves from.
    pub from: String,
    /// Host it is sent to (a sink counts it there).
    pub to: String,
    /// Packets per second (0: no flood).
    pub rate: u64,
    /// UDP payload bytes per packet.
    #[serde(default = "default_flood_size")]
    pub size: u32,
    /// Packets sent back to back at each scheduled instant.
    #[serde(default = "one")]
    pub burst: u32,
    /// CPUs for the sender and the sink (round-robin); none: unpinned.
    #[serde(default)]
    pub cpus: Vec<usize>,
}

fn default_flood_size() -> u32 {
    256
}

fn one() -> u32 {
    1
}

/// Workload kinds, with the measurement engine's parameters.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Request-response (netperf TCP_RR/UDP_RR).
    Rr,
    /// ICMP echo answered by the target's kernel (or endpoint).
    Ping,
    /// Bulk transfer (netperf TCP_STREAM/UDP_STREAM).
    Stream,
    /// Pods attached through the configuration's CNI plugin (knob
    /// `attach = "cni"`), each ADD timed.
    Attach,
    /// The same pods, each DEL timed.
    Detach,
}

impl WorkloadKind {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Rr => "rr",
            WorkloadKind::Ping => "ping",
            WorkloadKind::Stream => "stream",
            WorkloadKind::Attach => "attach",
            WorkloadKind::Detach => "detach",
        }
    }

    /// True for the kinds that time a CNI plugin's ADD or DEL rather than
    /// traffic.
    pub fn is_pod_op(self) -> bool {
        matches!(self, WorkloadKind::Attach | WorkloadKind::Detach)
    }
}

/// Transport of rr and stream.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

/// One measured workload. Fields that do not apply to the kind are refused
/// by validation (e.g. `burst` on ping).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Lower-case letters, digits and '-'.
    pub name: String,
    /// rr, ping, stream, attach or detach.
    pub kind: WorkloadKind,
    /// The host the client runs in; attach, detach: the host whose
    /// attachment every pod gets (a tap for a namespace host, a
    /// vhost-user socket for a poll-mode one).
    pub from: String,
    /// The hosts served (agents, or ping targets); sessions to all of them
    /// start together. None for attach and detach.
    #[serde(default, deserialize_with = "one_or_many")]
    pub to: Vec<String>,
    /// attach, detach: pods added (all of them), then deleted, per
    /// iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// rr, stream: tcp or udp.
    pub protocol: Option<Protocol>,
    /// Message bytes (rr request, stream write/datagram, ping payload).
    pub size: Option<u32>,
    /// rr: response bytes (default: `size`).
    pub response_size: Option<u32>,
    /// rr: requests in flight per session; stream: packets per paced instant.
    pub burst: Option<u32>,
    /// Sessions per target, run in parallel.
    pub sessions: Option<u32>,
    /// rr: TCP_NODELAY (default true, as in the studies).
    pub nodelay: Option<bool>,
    /// rr: touch the data before sending and after receiving (default true).
    pub dirty: Option<bool>,
    /// rr: open loop, transactions per second per target; stream (UDP):
    /// packets per second per target.
    pub rate: Option<u64>,
    /// ping: time between echo requests of one session.
    #[serde(
        default,
        with = "humantime_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub interval: Option<Duration>,
    /// stream: the agent sends, the client receives.
    pub reverse: Option<bool>,
    /// rr, ping: measure in rounds of the run's duration until this
    /// percentile's 95% interval is within the width of it, e.g. "99:5%"
    /// (`vnio rr --ci`); the run's iterations are then the least number
    /// of rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<String>,
    /// With `ci`: measured time after which the point ends, goal met or
    /// not (default 60 s).
    #[serde(
        default,
        with = "humantime_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_duration: Option<Duration>,
    /// rr open loop: how sends are spaced, "fixed" (the default) or
    /// "poisson" (`vnio rr --arrivals`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<vnio_measure::arrivals::Arrival>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// A parameter a sweep can vary.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum SweepParam {
    /// Message size in bytes (rr, stream, ping).
    Size,
    /// Requests in flight per session (rr) or packets per instant (stream).
    Burst,
    /// Sessions per target.
    Sessions,
    /// Open-loop or paced rate of the workload.
    Rate,
    /// Packets per second of the neighbour flood.
    FloodRate,
    /// Number of CPU background loads.
    Loads,
}

impl SweepParam {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            SweepParam::Size => "size",
            SweepParam::Burst => "burst",
            SweepParam::Sessions => "sessions",
            SweepParam::Rate => "rate",
            SweepParam::FloodRate => "flood-rate",
            SweepParam::Loads => "loads",
        }
    }

    /// Axis label with the unit, for figures and tables.
    pub fn label(self) -> &'static str {
        match self {
            SweepParam::Size => "message size (bytes)",
            SweepParam::Burst => "requests in flight per session",
            SweepParam::Sessions => "sessions",
            SweepParam::Rate => "workload rate (per second)",
            SweepParam::FloodRate => "neighbour flood (packets/s)",
            SweepParam::Loads => "background loads",
        }
    }

    /// True when the parameter is contention (same for every workload).
    pub fn is_contention(self) -> bool {
        matches!(self, SweepParam::FloodRate | SweepParam::Loads)
    }
}

/// One parameter over a list of values; every point of the scenario runs at
/// each value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// What varies.
    pub parameter: SweepParam,
    /// The values, in the order they run.
    pub values: Vec<u64>,
}

/// A file naming several scenarios to run in one go (e.g. `quick`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetFile {
    /// The set.
    pub set: SetSpec,
}

/// Scenarios run together, with length overrides.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    /// One line for lists and the report.
    pub title: String,
    /// Shipped scenario names, in order.
    pub scenarios: Vec<String>,
    /// Measured time per iteration for every scenario of the set.
    #[serde(
        default,
        with = "humantime_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub duration: Option<Duration>,
    /// Warm-up per iteration.
    #[serde(
        default,
        with = "humantime_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub warmup: Option<Duration>,
    /// Iterations per point.
    #[serde(default)]
    pub iterations: Option<u32>,
}

/// Durations written as "10s", "500ms", "100us", "2m".
pub mod humantime {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialize as a string the parser reads back.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    /// Deserialize from "10s"-style strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }

    /// Parses "10s", "500ms", "100us", "2m" or a bare number of seconds.
    pub fn parse(s: &str) -> Result<Duration, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let v: f64 = num
            .parse()
            .map_err(|_| format!("not a duration: {s:?} (try 10s, 500ms, 100us)"))?;
        let secs = match unit.trim() {
            "" | "s" => v,
            "ms" => v / 1e3,
            "us" | "µs" => v / 1e6,
            "m" | "min" => v * 60.0,
            other => {
                return Err(format!(
                    "unknown unit {other:?} in {s:?} (use us, ms, s, m)"
                ))
            }
        };
        if !secs.is_finite() || !(0.0..=86_400.0).contains(&secs) {
            return Err(format!("not a duration: {s:?}"));
        }
        Ok(Duration::from_secs_f64(secs))
    }

    /// The shortest exact form among us, ms and s.
    pub fn format(d: Duration) -> String {
        let us = d.as_micros();
        if us.is_multiple_of(1_000_000) {
            format!("{}s", us / 1_000_000)
        } else if us.is_multiple_of(1000) {
            format!("{}ms", us / 1000)
        } else {
            format!("{us}us")
        }
    }
}

/// Optional durations.
pub mod humantime_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Serialize as a string (None is skipped by the caller's default).
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::humantime::format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserialize from "10s"-style strings.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = String::deserialize(d)?;
        super::humantime::parse(&s)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// A sweep value with its unit, short.
pub fn sweep_value(p: SweepParam, v: u64) -> String {
    match p {
        SweepParam::Size => format!("{v} B"),
        SweepParam::Burst => format!("burst {v}"),
        SweepParam::Sessions => format!("{v} sessions"),
        SweepParam::Rate => format!("{v}/s"),
        SweepParam::FloodRate => format!("{} Kpps", v as f64 / 1e3),
        SweepParam::Loads => format!("{v} loads"),
    }
}
