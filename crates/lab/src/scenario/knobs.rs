//! Knobs: the settings of a configuration's set-up (pinning, the vnio
//! switch's port policies, coalescing, LRO, egress shares, queues, shields,
//! the poll-mode endpoints' virtqueue layout),
//! how a configuration's knobs layer over the scenario's, and what each may
//! say.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{HostKind, Scenario, WireKind};

/// Port policy of the vnio switch (DESIGN: switch latency features).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PortPolicy {
    /// Adaptive coalescing, the switch's shared worker.
    #[default]
    Default,
    /// Latency-Sensitivity=High: a dedicated busy-polling worker on its own
    /// core, coalescing and LRO off (the switch port's `latency = "high"`).
    LatencyHigh,
    /// The port bound straight to an uplink queue, no switching.
    Direct,
}

impl PortPolicy {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PortPolicy::Default => "default",
            PortPolicy::LatencyHigh => "latency-high",
            PortPolicy::Direct => "direct",
        }
    }
}

/// What drives a pair of poll-mode hosts (knob `endpoints`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Endpoints {
    /// The lab's own Rust endpoints ([`crate::pair`]).
    #[default]
    Vnio,
    /// The lab's DPDK program (`crates/lab/dpdk/pair.c`): one lcore owning
    /// both ports as `net_virtio_user` devices, mbufs from a mempool, as
    /// the shared anchor harness drives the switches.
    Dpdk,
}

impl Endpoints {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoints::Vnio => "vnio",
            Endpoints::Dpdk => "dpdk",
        }
    }
}

/// The virtqueue layout the poll-mode endpoints offer (knob `virtqueue`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Virtqueue {
    /// Split rings: descriptor table, available and used rings.
    #[default]
    Split,
    /// Packed rings (VIRTIO_F_RING_PACKED) with VIRTIO_F_IN_ORDER, as the
    /// anchor harness offers them with `VU_EXTRA=",packed_vq=1,in_order=1"`:
    /// one descriptor ring both sides write, buffers used in order.
    Packed,
}

impl Virtqueue {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Virtqueue::Split => "split",
            Virtqueue::Packed => "packed",
        }
    }
}

/// How the hosts are attached to the wire (knob `attach`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Attach {
    /// The lab makes the interfaces itself (netlink, the switch's config).
    #[default]
    Lab,
    /// Through CNI plugins, as a container runtime does: `vnio cni` (a tap
    /// per namespace host, a vhost-user socket per poll-mode host) on
    /// `switch`, the reference `bridge` plugin on `bridge`; host-local IPAM.
    Cni,
}

impl Attach {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Attach::Lab => "lab",
            Attach::Cni => "cni",
        }
    }
}

/// Settings of the set-up. Every field is optional so scenario-wide knobs
/// and a configuration's knobs can be layered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
    /// SO_BUSY_POLL on the workload's data sockets, in microseconds.
    pub busy_poll_us: Option<u32>,
    /// CPUs for the client's session threads (round-robin).
    pub client_cpus: Option<Vec<usize>>,
    /// CPUs for the agents' session threads.
    pub agent_cpus: Option<Vec<usize>>,
    /// CPUs for every thread of the vnio switch process.
    pub switch_cpus: Option<Vec<usize>>,
    /// Egress rate limit (htb) on every host interface, in Mbit/s.
    pub rate_limit_mbit: Option<u64>,
    /// Egress delay (netem) on every host interface, in microseconds.
    /// This kernel has no netem: a run with it says so and stops.
    pub netem_delay_us: Option<u64>,
    /// vnio switch port policy for the ports of the workloads' clients
    /// (the measured VMs of the studies), or of `port_policy_hosts`.
    pub port_policy: Option<PortPolicy>,
    /// The hosts whose switch ports take `port_policy` (default: the
    /// workloads' clients), e.g. a poll-mode target that a kernel client
    /// measures.
    pub port_policy_hosts: Option<Vec<String>>,
    /// vnio switch interrupt coalescing toward every vhost-user port:
    /// "off", "static:FRAMES:USEC", "adaptive\[:BOUND_USEC\]" (the switch's
    /// default is adaptive with the studies' 4 ms bound). Taps take no
    /// interrupts: it matters for poll-mode endpoints that sleep and VMs.
    pub coalesce: Option<String>,
    /// Software LRO on delivery to every vhost-user port of the vnio
    /// switch (the switch's default: on). It merges a TCP stream's segments
    /// for a receiver that negotiated TSO (guests).
    pub lro: Option<bool>,
    /// Checksum and TSO offloads offered on hosts' switch ports, by host
    /// name (the switch's default: offered). Off, the front-end sends and
    /// takes MTU-sized, fully checksummed frames (a sender LRO is for).
    pub port_offloads: Option<BTreeMap<String, bool>>,
    /// Kernel timestamps for receive instants (SO_TIMESTAMPING).
    pub rx_timestamp: Option<bool>,
    /// Receive queues of the vnio switch's uplink (queue 0 shared, the
    /// others one per vNIC while they last: the studies' NetQueue).
    pub uplink_queues: Option<usize>,
    /// The egress capacity of the vnio switch's uplink that shares divide,
    /// in Mbit/s (the studies' Network I/O Control on a physical NIC).
    pub uplink_capacity_mbit: Option<u64>,
    /// Weights of hosts' switch ports on the uplink's egress while it is
    /// contended, by host name (1-10000; the switch's default 100).
    pub egress_share: Option<BTreeMap<String, u32>>,
    /// Caps on hosts' switch ports toward the uplink, by host name, Mbit/s.
    pub egress_limit_mbit: Option<BTreeMap<String, u64>>,
    /// Poll-mode endpoints sleep on the switch's notifications when idle
    /// (an interrupt-driven guest) instead of busy-polling (default).
    pub poll_mode_wait: Option<bool>,
    /// The runner's poll-mode endpoints (the stream workloads between two
    /// of them) keep their rings and buffers on 2 MiB hugepages, as DPDK's
    /// drivers do, instead of 4 KiB pages; the testbed raises the kernel's
    /// pool for them.
    pub endpoint_hugepages: Option<bool>,
    /// The vnio switch's workers never sleep (`idle_polls` at its maximum),
    /// as the DPDK switches' poll-mode threads do.
    pub switch_busy_poll: Option<bool>,
    /// false: the vnio switch does not record how long frames stay in it
    /// (its `time_in_switch` setting), to measure what recording costs.
    pub time_in_switch: Option<bool>,
    /// Frames the vnio switch takes from one queue per polling round (its
    /// `budget`, default 64): how long a round a frame may wait behind others.
    pub switch_budget: Option<usize>,
    /// The vnio switch's dedicated (latency-high) workers run under
    /// SCHED_FIFO at this priority (1-99), not ordinary scheduling.
    pub switch_rt_priority: Option<u8>,
    /// CPUs shielded for what the run starts (the switch, above all):
    /// every other task of the machine moves to the remaining CPUs for the
    /// configuration's life (a cpuset, as `isolcpus` would), and back
    /// afterwards.
    pub shield: Option<Vec<usize>>,
    /// Another build of `vnio` to run the switch (wire = "switch"), e.g.
    /// the build before a change: two configurations then compare two
    /// builds of the switch with the same endpoints.
    pub switch_binary: Option<std::path::PathBuf>,
    /// The instrument that measures: vnio's own (default), or sockperf,
    /// iperf3 or a raw echo loop in its place, to compare them point by
    /// point ([`crate::tools`]).
    pub instrument: Option<super::Instrument>,
    /// Account the CPU of the testbed's own processes (the vnio switch,
    /// poll-mode endpoints, guests' QEMU) per iteration, so findings can
    /// read `switch-busy` and `testbed-cpu-per-op`; the iterations of a
    /// point then run one after the other, each its own measurement.
    pub testbed_cpu: Option<bool>,
    /// Run the line probe (`vnio_measure::placement`) between the first of
    /// `switch_cpus` and the first of `client_cpus` beside every iteration
    /// of a poll-mode pair's rate, and store its round trips second by
    /// second with the iteration: which placement the host gave the two
    /// CPUs, so ratios can be read per placement. Not beside round trips:
    /// its threads would preempt the endpoints they time.
    pub placement_probe: Option<bool>,
    /// What drives the pair of poll-mode hosts: the lab's own endpoints
    /// ("vnio", the default) or its DPDK program ("dpdk"), whose memory
    /// pattern (thousands of mbufs on hugepages with `endpoint_hugepages`)
    /// is the anchor harness's. UDP stream and UDP rr between the two
    /// poll-mode hosts of a vhost-user switch only.
    pub endpoints: Option<Endpoints>,
    /// The virtqueue layout the poll-mode endpoints offer: "split" (the
    /// default) or "packed" (with IN_ORDER). The DPDK endpoints only
    /// (`endpoints = "dpdk"`): the lab's own drive split rings.
    pub virtqueue: Option<Virtqueue>,
    /// How the hosts are attached: "lab" (the default) or "cni" (the
    /// plugins a container runtime runs, on `switch` and `bridge` wires).
    pub attach: Option<Attach>,
}

impl Knobs {
    /// `self` with every field `over` sets replaced by `over`'s.
    pub fn layered(&self, over: &Knobs) -> Knobs {
        fn pick<T: Clone>(over: &Option<T>, base: &Option<T>) -> Option<T> {
            over.clone().or_else(|| base.clone())
        }
        Knobs {
            busy_poll_us: pick(&over.busy_poll_us, &self.busy_poll_us),
            client_cpus: pick(&over.client_cpus, &self.client_cpus),
            agent_cpus: pick(&over.agent_cpus, &self.agent_cpus),
            switch_cpus: pick(&over.switch_cpus, &self.switch_cpus),
            rate_limit_mbit: pick(&over.rate_limit_mbit, &self.rate_limit_mbit),
            netem_delay_us: pick(&over.netem_delay_us, &self.netem_delay_us),
            port_policy: pick(&over.port_policy, &self.port_policy),
            port_policy_hosts: pick(&over.port_policy_hosts, &self.port_policy_hosts),
            coalesce: pick(&over.coalesce, &self.coalesce),
            lro: pick(&over.lro, &self.lro),
            port_offloads: pick(&over.port_offloads, &self.port_offloads),
            rx_timestamp: pick(&over.rx_timestamp, &self.rx_timestamp),
            poll_mode_wait: pick(&over.poll_mode_wait, &self.poll_mode_wait),
            endpoint_hugepages: pick(&over.endpoint_hugepages, &self.endpoint_hugepages),
            uplink_queues: pick(&over.uplink_queues, &self.uplink_queues),
            uplink_capacity_mbit: pick(&over.uplink_capacity_mbit, &self.uplink_capacity_mbit),
            egress_share: pick(&over.egress_share, &self.egress_share),
            egress_limit_mbit: pick(&over.egress_limit_mbit, &self.egress_limit_mbit),
            switch_busy_poll: pick(&over.switch_busy_poll, &self.switch_busy_poll),
            time_in_switch: pick(&over.time_in_switch, &self.time_in_switch),
            switch_budget: pick(&over.switch_budget, &self.switch_budget),
            switch_rt_priority: pick(&over.switch_rt_priority, &self.switch_rt_priority),
            shield: pick(&over.shield, &self.shield),
            switch_binary: pick(&over.switch_binary, &self.switch_binary),
            testbed_cpu: pick(&over.testbed_cpu, &self.testbed_cpu),
            instrument: pick(&over.instrument, &self.instrument),
            placement_probe: pick(&over.placement_probe, &self.placement_probe),
            endpoints: pick(&over.endpoints, &self.endpoints),
            virtqueue: pick(&over.virtqueue, &self.virtqueue),
            attach: pick(&over.attach, &self.attach),
        }
    }

    /// The hosts whose switch ports take `port_policy`: `port_policy_hosts`,
    /// else the workloads' clients.
    pub fn policy_hosts<'a>(&'a self, clients: &[&'a str]) -> Vec<&'a str> {
        match &self.port_policy_hosts {
            Some(hosts) => hosts.iter().map(String::as_str).collect(),
            None => clients.to_vec(),
        }
    }
}

/// A knob's field and what is wrong with it.
pub(super) type KnobError = (String, String);

fn fail<T>(at: &str, field: &str, message: impl Into<String>) -> Result<T, KnobError> {
    Err((format!("{at}.{field}"), message.into()))
}

/// CPU numbers the kernel can have.
pub(super) fn cpus_ok(cpus: &[usize]) -> Result<(), String> {
    if cpus.iter().any(|&cpu| cpu >= 4096) {
        return Err("CPU numbers must be below 4096".into());
    }
    Ok(())
}

/// Ranges and the wires knobs need, for knobs `k` at `at` ("knobs" or a
/// configuration's) on `wire`.
pub(super) fn check(at: &str, k: &Knobs, wire: WireKind) -> Result<(), KnobError> {
    check_values(at, k)?;
    check_for_wire(at, k, wire)
}

/// The knobs' own ranges: CPU lists, numbers, per-host maps.
fn check_values(at: &str, k: &Knobs) -> Result<(), KnobError> {
    for (name, cpus) in [
        ("client_cpus", &k.client_cpus),
        ("agent_cpus", &k.agent_cpus),
        ("switch_cpus", &k.switch_cpus),
    ] {
        if let Some(cpus) = cpus {
            cpus_ok(cpus).or_else(|m| fail(at, name, m))?;
        }
    }
    if let Some(text) = &k.coalesce {
        if let Err(e) = text.parse::<vnio_switch::coalesce::Coalesce>() {
            return fail(at, "coalesce", e.to_string());
        }
    }
    if k.uplink_queues.is_some_and(|q| q == 0 || q > 64) {
        return fail(at, "uplink_queues", "must be 1 to 64");
    }
    if k.rate_limit_mbit == Some(0) {
        return fail(at, "rate_limit_mbit", "must be more than 0");
    }
    if k.uplink_capacity_mbit == Some(0) {
        return fail(at, "uplink_capacity_mbit", "must be more than 0");
    }
    if k.switch_budget.is_some_and(|b| b == 0 || b > 4096) {
        return fail(at, "switch_budget", "must be 1 to 4096 frames");
    }
    for (host, share) in k.egress_share.iter().flatten() {
        if !(1..=10_000).contains(share) {
            return fail(
                at,
                "egress_share",
                format!("{host}: a share is 1 to 10000, not {share}"),
            );
        }
    }
    for (host, limit) in k.egress_limit_mbit.iter().flatten() {
        if *limit == 0 {
            return fail(
                at,
                "egress_limit_mbit",
                format!("{host}: a limit is more than 0 Mbit/s"),
            );
        }
    }
    if let Some(cpus) = &k.shield {
        cpus_ok(cpus).or_else(|m| fail(at, "shield", m))?;
        if cpus.is_empty() {
            return fail(at, "shield", "names no CPU");
        }
    }
    Ok(())
}

/// The knobs that need a given wire (vnio's switch, a switch at all).
fn check_for_wire(at: &str, k: &Knobs, wire: WireKind) -> Result<(), KnobError> {
    if let Some(b) = &k.switch_binary {
        if wire != WireKind::Switch {
            return fail(at, "switch_binary", "needs wire = \"switch\"");
        }
        if !b.is_absolute() {
            return fail(
                at,
                "switch_binary",
                format!(
                    "{:?} must be an absolute path to a vnio binary",
                    b.display().to_string()
                ),
            );
        }
    }
    if let Some(p) = k.switch_rt_priority {
        if !(1..=99).contains(&p) {
            return fail(at, "switch_rt_priority", "must be 1 to 99");
        }
        if wire != WireKind::Switch {
            return fail(at, "switch_rt_priority", "needs wire = \"switch\"");
        }
    }
    if k.endpoints == Some(Endpoints::Dpdk) && !wire.has_vhost_user() {
        return fail(
            at,
            "endpoints",
            format!(
                "\"dpdk\" drives two vhost-user ports: needs wire = \"switch\", \"ovs-dpdk\" or \"testpmd\", not {:?}",
                wire.as_str()
            ),
        );
    }
    if k.attach == Some(Attach::Cni) && !matches!(wire, WireKind::Switch | WireKind::Bridge) {
        return fail(
            at,
            "attach",
            format!(
                "\"cni\" needs wire = \"switch\" (vnio cni) or \"bridge\" (the bridge plugin), not {:?}",
                wire.as_str()
            ),
        );
    }
    if wire != WireKind::Switch && k.switch_busy_poll.is_some() {
        return fail(
            at,
            "switch_busy_poll",
            "needs wire = \"switch\" (the anchor switches always busy-poll)",
        );
    }
    if wire != WireKind::Switch && k.time_in_switch.is_some() {
        return fail(at, "time_in_switch", "needs wire = \"switch\"");
    }
    if wire != WireKind::Switch {
        if k.port_policy.is_some_and(|p| p != PortPolicy::Default) {
            return fail(at, "port_policy", "a port policy needs wire = \"switch\"");
        }
        if k.switch_cpus.is_some() && !wire.is_anchor() {
            return fail(
                at,
                "switch_cpus",
                "needs a switch (wire = \"switch\", \"ovs-dpdk\" or \"testpmd\")",
            );
        }
        // Settings of vnio's switch and its ports.
        let vnio_only = [
            ("coalesce", k.coalesce.is_some()),
            ("lro", k.lro.is_some()),
            ("port_offloads", k.port_offloads.is_some()),
            ("uplink_queues", k.uplink_queues.is_some()),
            ("uplink_capacity_mbit", k.uplink_capacity_mbit.is_some()),
            ("egress_share", k.egress_share.is_some()),
            ("egress_limit_mbit", k.egress_limit_mbit.is_some()),
            ("switch_budget", k.switch_budget.is_some()),
            ("port_policy_hosts", k.port_policy_hosts.is_some()),
        ];
        if let Some((name, _)) = vnio_only.iter().find(|(_, set)| *set) {
            return fail(at, name, "needs wire = \"switch\"");
        }
    }
    Ok(())
}

/// The probe's two CPUs, for knobs `k` as layered in a configuration at
/// `at`: the switch's and the client's, which must differ (a line passed
/// within one CPU says nothing about placement).
pub(super) fn check_probe(at: &str, k: &Knobs) -> Result<(), KnobError> {
    if k.placement_probe != Some(true) {
        return Ok(());
    }
    match (k.probe_cpus(), &k.switch_cpus, &k.client_cpus) {
        (Some(_), _, _) => Ok(()),
        (None, Some(s), Some(c)) if !s.is_empty() && !c.is_empty() => fail(
            at,
            "placement_probe",
            format!(
                "the switch's CPU and the client's are both {}: the probe times a line between two CPUs",
                s[0]
            ),
        ),
        _ => fail(
            at,
            "placement_probe",
            "needs switch_cpus and client_cpus: the probe runs between the switch's CPU and the client's",
        ),
    }
}

impl Knobs {
    /// The CPUs the line probe runs between (knob `placement_probe`): the
    /// first of `switch_cpus` and the first of `client_cpus`, when it is
    /// on and they differ.
    pub fn probe_cpus(&self) -> Option<[usize; 2]> {
        if self.placement_probe != Some(true) {
            return None;
        }
        let s = *self.switch_cpus.as_ref()?.first()?;
        let c = *self.client_cpus.as_ref()?.first()?;
        (s != c).then_some([s, c])
    }
}

/// The knobs that name hosts, in a configuration of `s` (its knobs
/// layered as `k`, its host kinds by `kind_of`): the hosts exist and have a port of the vnio switch of
/// the right kind, and egress settings have an uplink to act on.
pub(super) fn check_hosts(
    s: &Scenario,
    at: &str,
    k: &Knobs,
    kind_of: impl Fn(&str) -> HostKind,
) -> Result<(), KnobError> {
    let host = |name: &str| s.hosts.iter().find(|h| h.name == name);
    let names = || {
        s.hosts
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let has_uplink = s.hosts.iter().any(|h| h.remote);
    let mut named: Vec<(&str, &str)> = Vec::new();
    for h in k.port_policy_hosts.iter().flatten() {
        named.push(("port_policy_hosts", h));
    }
    for h in k.egress_share.iter().flat_map(|m| m.keys()) {
        named.push(("egress_share", h));
    }
    for h in k.egress_limit_mbit.iter().flat_map(|m| m.keys()) {
        named.push(("egress_limit_mbit", h));
    }
    for h in k.port_offloads.iter().flat_map(|m| m.keys()) {
        named.push(("port_offloads", h));
    }
    for (field, name) in named {
        let Some(h) = host(name) else {
            return fail(
                at,
                field,
                format!("no host named {name:?} (hosts: {})", names()),
            );
        };
        if h.remote || h.machine.is_some() {
            return fail(
                at,
                field,
                format!("host `{name}` has no port on this switch (it is behind the uplink or on another machine)"),
            );
        }
        let on_uplink = field.starts_with("egress");
        if on_uplink && !has_uplink {
            return fail(
                at,
                field,
                "egress shares and limits act on the switch's uplink: the scenario needs a remote host (remote = true)",
            );
        }
    }
    if k.uplink_capacity_mbit.is_some() && !has_uplink {
        return fail(
            at,
            "uplink_capacity_mbit",
            "the scenario has no uplink: it needs a remote host (remote = true)",
        );
    }
    if k.port_policy_hosts.is_some() && k.port_policy.is_none() {
        return fail(
            at,
            "port_policy_hosts",
            "names hosts for port_policy, which is not set",
        );
    }
    if k.port_policy == Some(PortPolicy::Direct) {
        for name in k.port_policy_hosts.iter().flatten() {
            if kind_of(name) == HostKind::Namespace {
                return fail(
                    at,
                    "port_policy",
                    format!("\"direct\" applies to vhost-user ports: `{name}` is a namespace on a tap port (make it poll-mode or vm)"),
                );
            }
        }
    }
    Ok(())
}
