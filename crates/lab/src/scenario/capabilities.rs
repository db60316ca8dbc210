//! What this build of vnio can run, and why a configuration or a workload
//! of a scenario cannot run here. Separate from validation: a scenario can
//! be valid and still need what this build or host lacks; those points are
//! refused or skipped at run time, with the reason.

use super::instrument::{plan_skip, Instrument};
use super::knobs::PortPolicy;
use super::model::{
    Configuration, HostKind, Protocol, Scenario, WireKind, WorkloadKind, WorkloadSpec,
};
use super::validate::kind_in;

/// testpmd's binary (package dpdk-dev).
pub const TESTPMD: &str = "dpdk-testpmd";
/// OVS's DPDK build of the switch daemon (package openvswitch-switch-dpdk).
pub const OVS_VSWITCHD_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// What to install for the DPDK endpoints, when the probe cannot say more.
pub const DPDK_ENDPOINTS_NOT_INSTALLED: &str =
    "the DPDK endpoints need libdpdk's development files, a C compiler and hugepages (apt install dpdk-dev gcc pkg-config)";

/// What to install for an anchor switch, as one line.
pub fn not_installed(kind: WireKind) -> String {
    match kind {
        WireKind::Testpmd => format!("{TESTPMD} is not installed (apt install dpdk-dev)"),
        WireKind::OvsDpdk => {
            format!("{OVS_VSWITCHD_DPDK} is not installed (apt install openvswitch-switch-dpdk)")
        }
        other => format!("{} needs nothing installed", other.as_str()),
    }
}

/// What this build of vnio can run on this machine, as probed by
/// [`crate::probe`] (`Capabilities::current`). A scenario asking for more
/// is refused by `run` with the list of what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The lab launches guests for VM hosts (through the vm crate).
    pub vm: bool,
    /// The measurement engine can drive a vhost-user port as a client
    /// (`vnio rr --via vhost-user:SOCK`).
    pub poll_mode_client: bool,
    /// The switch has latency-high ports (a dedicated busy-polling worker).
    pub latency_high: bool,
    /// The switch has direct ports (bound to an uplink queue, no switching).
    pub direct: bool,
    /// OVS-DPDK is installed (wire = "ovs-dpdk").
    pub ovs_dpdk: bool,
    /// DPDK's testpmd is installed (wire = "testpmd").
    pub testpmd: bool,
    /// The lab can build and run its DPDK endpoint program (knob
    /// `endpoints = "dpdk"`): libdpdk's development files, a C compiler
    /// and hugepages.
    pub dpdk_endpoints: bool,
    /// Why not, when the probe could say ([`DPDK_ENDPOINTS_NOT_INSTALLED`]
    /// when it could not).
    pub why_no_dpdk_endpoints: Option<&'static str>,
    /// sockperf is installed (instrument = "sockperf").
    pub sockperf: bool,
    /// iperf3 is installed (instrument = "iperf3").
    pub iperf3: bool,
}

impl Capabilities {
    /// Why configuration `cfg` of `s` cannot run here (empty: it can).
    pub fn missing(&self, s: &Scenario, cfg: &Configuration) -> Vec<String> {
        let mut out = Vec::new();
        for h in &s.hosts {
            if kind_in(s, cfg, &h.name) == HostKind::Vm && !self.vm {
                out.push(format!(
                    "host `{}` is a VM: this build does not launch guests",
                    h.name
                ));
            }
        }
        let knobs = s.knobs.layered(&cfg.knobs);
        match knobs.port_policy {
            Some(PortPolicy::LatencyHigh) if !self.latency_high => out.push(
                "port_policy = \"latency-high\": this build's vnio switch has no dedicated busy-polling port workers yet".into(),
            ),
            Some(PortPolicy::Direct) if !self.direct => out.push(
                "port_policy = \"direct\": this build's vnio switch has no direct (uplink-bound) ports yet".into(),
            ),
            _ => {}
        }
        out
    }

    /// Why workload `w` cannot run in configuration `cfg` (None: it can).
    /// These points are skipped and marked in the report; the others run.
    ///
    /// A poll-mode endpoint speaks UDP and ICMP only: as a client it drives
    /// one UDP rr session to an agent (`vnio rr --via`); as a target it
    /// answers ping and UDP echo (rr with `--echo-server`).
    pub fn skip_reason(
        &self,
        s: &Scenario,
        cfg: &Configuration,
        w: &WorkloadSpec,
    ) -> Option<String> {
        if w.kind.is_pod_op() {
            let cni = s.knobs.layered(&cfg.knobs).attach == Some(super::knobs::Attach::Cni);
            return (!cni).then(|| {
                format!(
                    "{} times the CNI plugin that attaches the hosts: this configuration's hosts are attached by the lab (knob attach = \"cni\" to time one)",
                    w.kind.as_str()
                )
            });
        }
        let tool = s.knobs.layered(&cfg.knobs).instrument.unwrap_or_default();
        if tool != Instrument::Vnio {
            let installed = match tool {
                Instrument::Sockperf => self.sockperf,
                Instrument::Iperf3 => self.iperf3,
                _ => true,
            };
            return plan_skip(tool, w, |h| kind_in(s, cfg, h), installed);
        }
        let poll = |h: &str| kind_in(s, cfg, h) == HostKind::PollMode;
        let vm = |h: &str| kind_in(s, cfg, h) == HostKind::Vm;
        let installed = match cfg.wire {
            WireKind::OvsDpdk => self.ovs_dpdk,
            WireKind::Testpmd => self.testpmd,
            _ => true,
        };
        if !installed {
            return Some(not_installed(cfg.wire));
        }
        let knobs = s.knobs.layered(&cfg.knobs);
        if knobs.endpoints == Some(super::knobs::Endpoints::Dpdk) && !self.dpdk_endpoints {
            return Some(
                self.why_no_dpdk_endpoints
                    .unwrap_or(DPDK_ENDPOINTS_NOT_INSTALLED)
                    .to_owned(),
            );
        }
        if poll(&w.from) && w.to.iter().any(|t| vm(t)) {
            return Some(format!(
                "client `{}` is a poll-mode endpoint: its `vnio rr --via` runs in the target's namespace, and a VM target has none",
                w.from
            ));
        }
        if vm(&w.from) && w.to.iter().any(|t| poll(t)) {
            return Some(format!(
                "client `{}` is a VM: a poll-mode target answers UDP echo, not the agent protocol the guest's vnio speaks",
                w.from
            ));
        }
        let udp_rr = w.kind == WorkloadKind::Rr && w.protocol == Some(Protocol::Udp);
        if poll(&w.from) && w.to.iter().all(|t| poll(t)) {
            return super::pairs::skip_reason(w);
        }
        if poll(&w.from) {
            if !self.poll_mode_client {
                return Some(format!(
                    "client `{}` is a poll-mode endpoint: driving one needs `vnio rr --via vhost-user`, not in this build",
                    w.from
                ));
            }
            if s.workloads.iter().any(|o| o.to.contains(&w.from)) {
                return Some(format!(
                    "`{}` is a poll-mode endpoint that is both a client and a target here: one endpoint per port",
                    w.from
                ));
            }
            if !udp_rr {
                return Some(format!(
                    "client `{}` is a poll-mode endpoint: it drives UDP request-response only (protocol = \"udp\"), not {} {}",
                    w.from,
                    w.kind.as_str(),
                    if w.kind == WorkloadKind::Ping { "" } else { "over TCP" }
                ));
            }
            if w.to.len() != 1 || w.sessions.unwrap_or(1) != 1 {
                return Some(format!(
                    "client `{}` is a poll-mode endpoint: one session to one target per vhost-user port",
                    w.from
                ));
            }
            // A far poll-mode target answers UDP echo (`vnio rr --echo-server
            // --via`: no agent needed), as across machines.
            let far = |h: &str| s.hosts.iter().any(|x| x.name == h && x.machine.is_some());
            if poll(&w.to[0]) && !far(&w.to[0]) {
                return Some(format!(
                    "`{}` and `{}` are both poll-mode endpoints: the client needs an agent to talk to",
                    w.from, w.to[0]
                ));
            }
            return None;
        }
        let polled: Vec<&String> = w.to.iter().filter(|t| poll(t)).collect();
        if polled.is_empty() {
            return None;
        }
        match w.kind {
            WorkloadKind::Ping => None,
            WorkloadKind::Rr if udp_rr && polled.len() == w.to.len() => None,
            WorkloadKind::Rr if udp_rr => Some(
                "targets mix poll-mode endpoints (UDP echo) and agents: give them separate workloads".into(),
            ),
            _ => Some(format!(
                "`{}` is a poll-mode endpoint: it answers ping and UDP echo only, not {} over {}",
                polled[0],
                w.kind.as_str(),
                if w.protocol == Some(Protocol::Udp) { "UDP streams" } else { "TCP" }
            )),
        }
    }
}
