//! One port's specification (a config file `[[port]]`, or the control
//! socket's `port_add`): the keys every kind shares, constructors with
//! defaults, and the checks that turn it into the data path's
//! [`PortPolicy`]. Its kind's own keys are the kind's ([`KindSpec`],
//! `port/spec.rs`). Separate from the file and switch-wide settings in
//! `config/mod.rs`: the control socket takes a port spec on its own.

use super::{ConfigError, EgressSettings, Latency, Policies, SwitchConfig};
use crate::coalesce::Coalesce;
use crate::egress::EgressPolicy;
use crate::forward::PortPolicy;
use crate::netqueue::QueueRequest;
use crate::port::tap::TapSpec;
use crate::port::uplink::UplinkSpec;
use crate::port::vhost_user::VhostUserSpec;
use crate::port::vxlan::VxlanSpec;
use crate::port::{KindSpec, SocketMode};
use crate::vlan::VlanConfig;
use crate::wire::EthernetAddress;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// One port (config file `[[port]]`, or the control socket's `port_add`):
/// its name, its kind with the keys that belong to it, and the keys every
/// kind shares.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortSpec {
    /// Unique name.
    pub name: String,
    /// Access VLAN (default 1) when `trunk` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// VLANs carried tagged; a non-empty list makes the port a trunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trunk: Vec<u16>,
    /// The untagged VLAN of a trunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_vlan: Option<u16>,
    /// The port's MAC (for the spoof guard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Drop frames whose source MAC is not `mac`.
    #[serde(default)]
    pub spoof_guard: bool,
    /// Interrupt coalescing toward the port's guest ("off",
    /// "static:FRAMES:USEC", "adaptive\[:BOUND_USEC\]"; default adaptive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalesce>,
    /// Software LRO on delivery to the port (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lro: Option<bool>,
    /// Latency sensitivity: "high" gives the port a dedicated busy-polling
    /// worker on its own core, with coalescing and LRO off (vhost-user).
    #[serde(default, skip_serializing_if = "Latency::is_normal")]
    pub latency: Latency,
    /// The core a latency-high port's worker is pinned to (default: chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Empty polling rounds of the port's transmit queue before the guest is
    /// asked to kick again (default: the switch's `idle_polls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_poll_budget: Option<u32>,
    /// vNIC: the uplink receive queue it asks for ("auto", the default: its
    /// own while queues last; "shared"; or N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_queue: Option<QueueRequest>,
    /// Addresses the port may have learned in the FDB (default: the
    /// switch's `fdb_port_limit`); a port to a LAN needs more than a vNIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdb_limit: Option<u32>,
    /// vNIC: share, limit and reservation on the uplinks' egress (top-level
    /// keys). Before `kind`: a flattened struct takes its keys, the kind's
    /// keys are what is left.
    #[serde(flatten)]
    pub egress: EgressSettings,
    /// The kind (`kind = "..."`) and its own keys (top-level too).
    #[serde(flatten)]
    pub kind: KindSpec,
}

impl PortSpec {
    /// A port `name` of `kind`, the shared keys at their defaults.
    pub fn new(name: &str, kind: KindSpec) -> Self {
        Self {
            name: name.to_string(),
            vlan: None,
            trunk: Vec::new(),
            native_vlan: None,
            mac: None,
            spoof_guard: false,
            coalesce: None,
            lro: None,
            latency: Latency::Normal,
            core: None,
            tx_poll_budget: None,
            uplink_queue: None,
            fdb_limit: None,
            egress: EgressSettings::default(),
            kind,
        }
    }

    /// A vhost-user port on `socket` with defaults.
    pub fn vhost_user(name: &str, socket: impl Into<PathBuf>, mode: SocketMode) -> Self {
        Self::new(name, KindSpec::VhostUser(VhostUserSpec::new(socket, mode)))
    }

    /// A tap port on interface `ifname` with defaults.
    pub fn tap(name: &str, ifname: &str) -> Self {
        Self::new(name, KindSpec::Tap(TapSpec::new(ifname)))
    }

    /// An uplink port on host interface `ifname` with defaults.
    pub fn uplink(name: &str, ifname: &str) -> Self {
        Self::new(name, KindSpec::Uplink(UplinkSpec::new(ifname)))
    }

    /// A VXLAN port for `vni` sending from `local` and flooding to `remotes`, with defaults.
    pub fn vxlan(name: &str, vni: u32, local: Ipv4Addr, remotes: &[Ipv4Addr]) -> Self {
        Self::new(name, KindSpec::Vxlan(VxlanSpec::new(vni, local, remotes)))
    }

    /// The port's latency policies, with the switch's defaults for what is absent.
    pub fn policies(&self, sw: &SwitchConfig) -> Policies {
        Policies {
            coalesce: self.coalesce.unwrap_or_default(),
            lro: self.lro.unwrap_or(true),
            latency: self.latency,
            core: self.core,
            tx_poll_budget: self.tx_poll_budget.unwrap_or(sw.idle_polls),
        }
    }

    /// The port's queue count (see [`KindSpec::queues`]).
    pub fn queue_count(&self) -> NonZeroUsize {
        self.kind.queues()
    }

    /// Validates and turns the forwarding part into a policy: the name,
    /// the VLANs, the MAC, the keys only vNICs take, the kind's own keys
    /// and the latency, in this order (the first fault is the one said).
    pub fn policy(&self) -> Result<PortPolicy, ConfigError> {
        self.check_name().map_err(|w| self.fault(w))?;
        let vlan = VlanConfig {
            vlan: self.vlan,
            trunk: self.trunk.clone(),
            native_vlan: self.native_vlan,
        }
        .mode()
        .map_err(|source| ConfigError::Vlan {
            name: self.name.clone(),
            source,
        })?;
        let mac = self.parsed_mac().map_err(|w| self.fault(w))?;
        let egress = self.checked_egress().map_err(|w| self.fault(w))?;
        self.kind.check(self).map_err(|w| self.fault(w))?;
        self.check_guard_and_latency(mac.is_some())
            .map_err(|w| self.fault(w))?;
        let vhost_user = self.kind.vhost_user();
        let vxlan = self.kind.vxlan();
        Ok(PortPolicy {
            vlan,
            spoof_guard: if self.spoof_guard { mac } else { None },
            mac,
            uplink_queue: self.uplink_queue.unwrap_or_default(),
            egress,
            direct: vhost_user.and_then(|v| v.direct.clone()),
            cross_connect: vhost_user.and_then(|v| v.cross_connect.clone()),
            fdb_limit: self.fdb_limit,
            vtep_fdb_limit: vxlan.map(|v| v.vtep_limit(self.fdb_limit)),
            evpn: vxlan.is_some_and(|v| v.evpn),
        })
    }

    /// This port's configuration fault `what`.
    fn fault(&self, what: impl Into<String>) -> ConfigError {
        ConfigError::Port {
            name: self.name.clone(),
            what: what.into(),
        }
    }

    fn check_name(&self) -> Result<(), &'static str> {
        if self.name.is_empty()
            || self.name.len() > 64
            || self.name.contains(|c: char| c.is_whitespace() || c == '"')
        {
            return Err("name must be 1-64 characters without spaces or quotes");
        }
        Ok(())
    }

    fn parsed_mac(&self) -> Result<Option<EthernetAddress>, &'static str> {
        match &self.mac {
            Some(m) => Ok(Some(m.parse().map_err(|_| "`mac` is not a MAC address")?)),
            None => Ok(None),
        }
    }

    /// The keys only vNICs take, and the egress policy.
    fn checked_egress(&self) -> Result<EgressPolicy, String> {
        if !self.kind.is_vnic() {
            if self.uplink_queue.is_some() {
                return Err("`uplink_queue` applies to vhost-user and tap ports".into());
            }
            if self.egress.is_set() {
                return Err(
                    "`share`, `limit_mbps` and `reserve_mbps` apply to vhost-user and tap ports"
                        .into(),
                );
            }
        }
        self.egress.policy().map_err(String::from)
    }

    fn check_guard_and_latency(&self, has_mac: bool) -> Result<(), &'static str> {
        if self.spoof_guard && !has_mac {
            return Err("`spoof_guard` needs `mac`");
        }
        if self.core.is_some() && self.latency != Latency::High {
            return Err("`core` is for a latency = \"high\" port");
        }
        if self.latency == Latency::High && self.kind.vhost_user().is_none() {
            return Err("latency = \"high\" is for vhost-user ports");
        }
        Ok(())
    }
}
