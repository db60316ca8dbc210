//! One port's specification (a config file `[[port]]`, or the control
//! socket's `port_add`): its keys, constructors with defaults, and the
//! checks that turn it into the data path's [`PortPolicy`]. Separate from
//! the file and switch-wide settings in `config.rs`: the control socket
//! takes a port spec on its own.

use super::{
    ConfigError, EgressSettings, Latency, Policies, SwitchConfig, MAX_QUEUE_PAIRS,
    MAX_UPLINK_QUEUES,
};
use crate::coalesce::Coalesce;
use crate::egress::EgressPolicy;
use crate::forward::PortPolicy;
use crate::netqueue::QueueRequest;
use crate::port::SocketMode;
use crate::vlan::VlanConfig;
use crate::wire::EthernetAddress;
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// Kinds of ports.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PortKind {
    /// vhost-user virtio-net.
    VhostUser,
    /// A tap interface (the host stack, or a namespace the interface is moved into).
    Tap,
    /// A host interface through an AF_PACKET socket (`ifname` required).
    Uplink,
    /// A VXLAN tunnel endpoint (`vni`, `local`, `remotes`; RFC 7348).
    Vxlan,
}

/// One port (config file `[[port]]`, or the control socket's `port_add`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: PortKind,
    /// vhost-user: socket path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// vhost-user: who listens.
    #[serde(default)]
    pub mode: SocketMode,
    /// vhost-user, server mode: the socket's owner, group and mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_access: Option<crate::socket_access::SocketAccess>,
    /// tap: interface name (default: the port name); uplink: the host interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// tap: the network namespace (a file such as /run/netns/NAME or
    /// /proc/PID/ns/net) the tap is created in, as `ifname` there, instead
    /// of the switch's own. Such a tap is persistent: it keeps its
    /// addresses and routes while the switch restarts (the restarted
    /// switch takes it over), and goes only with `port del` or its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
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
    /// uplink: hand transmitted frames straight to the driver, skipping the
    /// interface's queueing discipline (PACKET_QDISC_BYPASS).
    #[serde(default, skip_serializing_if = "is_false")]
    pub qdisc_bypass: bool,
    /// vhost-user and tap: offer checksum and TSO offloads (default true).
    /// Off, the front-end (or the kernel behind a tap) sends and takes
    /// MTU-sized, fully checksummed frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offloads: Option<bool>,
    /// Interrupt coalescing toward the port's guest ("off",
    /// "static:FRAMES:USEC", "adaptive\[:BOUND_USEC\]"; default adaptive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalesce>,
    /// Software LRO on delivery to the port (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lro: Option<bool>,
    /// Latency sensitivity: "high" gives the port a dedicated busy-polling
    /// worker on its own core, with coalescing and LRO off.
    #[serde(default, skip_serializing_if = "Latency::is_normal")]
    pub latency: Latency,
    /// The core a latency-high port's worker is pinned to (default: chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Empty polling rounds of the port's transmit queue before the guest is
    /// asked to kick again (default: the switch's `idle_polls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_poll_budget: Option<u32>,
    /// uplink: receive queues (default 1); queue 0 is shared, the others go
    /// one per vNIC while they last. vhost-user: queue pairs offered to the
    /// front-end (default 1; more than one is a multiqueue vNIC, at most 8).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "nonzero_queues"
    )]
    pub queues: Option<NonZeroUsize>,
    /// vhost-user or tap: the uplink receive queue this vNIC asks for
    /// ("auto", the default: its own while queues last; "shared"; or N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_queue: Option<QueueRequest>,
    /// vNIC: share, limit and reservation on the uplinks' egress (top-level keys).
    #[serde(flatten)]
    pub egress: EgressSettings,
    /// uplink or vxlan: the egress capacity shares divide, in Mbit/s
    /// (default: an uplink interface's link speed when the kernel knows
    /// it; for a vxlan port none, so only limits and reservations apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_mbps: Option<u64>,
    /// vhost-user: direct mode, bound 1:1 to a receive queue of this uplink
    /// port with no switching, VLAN or QoS (needs `mac`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<String>,
    /// vhost-user: cross-connected with this other vhost-user port (added
    /// before it): every frame either sends goes to the other as it is, with
    /// no learning, lookup, flooding, VLAN or QoS (OVS's port-to-port flows,
    /// VPP's L2 cross-connect); the pair lasts while both exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_connect: Option<String>,
    /// Addresses the port may have learned in the FDB (default: the
    /// switch's `fdb_port_limit`); a port to a LAN needs more than a vNIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdb_limit: Option<u32>,
    /// vxlan: the VXLAN network identifier (0-16777215).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    /// vxlan: the outer source address (the host's, on the underlay); the
    /// port receives on it at `dstport`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<std::net::Ipv4Addr>,
    /// vxlan: remote VTEPs that get broadcast, multicast and unknown
    /// unicast (head-end replication); learned VTEPs get unicast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<std::net::Ipv4Addr>,
    /// vxlan: UDP port (default 4789).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dstport: Option<u16>,
    /// vxlan: outer TTL (default: the kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// vxlan: the underlay's MTU (default 1500): inner frames longer than
    /// this less 36 bytes are dropped (`too_big`), never fragmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub underlay_mtu: Option<usize>,
    /// vxlan: further VTEPs (IPv4 prefixes) whose datagrams are accepted
    /// besides `remotes`; any other sender's are dropped (`unknown_vtep`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<crate::port::vxlan::Ipv4Net>,
    /// vxlan: addresses each remote VTEP may have learned (default: the
    /// port's `fdb_limit` shared among its `remotes`, at least 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep_fdb_limit: Option<u32>,
    /// vxlan: the flood list and the VTEPs heard come from BGP EVPN
    /// through FRR (then no `remotes` or `accept`), see docs/cluster.md.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evpn: bool,
}

/// `queues`, rejecting 0 at parse with the key named (a port carries
/// frames on at least one queue).
fn nonzero_queues<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<NonZeroUsize>, D::Error> {
    match Option::<usize>::deserialize(d)? {
        None => Ok(None),
        Some(n) => NonZeroUsize::new(n)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("`queues` = 0: a port has at least 1 queue")),
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PortSpec {
    /// A vhost-user port on `socket` with defaults.
    pub fn vhost_user(name: &str, socket: impl Into<PathBuf>, mode: SocketMode) -> Self {
        Self {
            name: name.to_string(),
            kind: PortKind::VhostUser,
            socket: Some(socket.into()),
            mode,
            socket_access: None,
            ifname: None,
            netns: None,
            vlan: None,
            trunk: Vec::new(),
            native_vlan: None,
            mac: None,
            spoof_guard: false,
            qdisc_bypass: false,
            offloads: None,
            coalesce: None,
            lro: None,
            latency: Latency::Normal,
            core: None,
            tx_poll_budget: None,
            queues: None,
            uplink_queue: None,
            egress: EgressSettings::default(),
            capacity_mbps: None,
            direct: None,
            cross_connect: None,
            fdb_limit: None,
            vni: None,
            local: None,
            remotes: Vec::new(),
            dstport: None,
            ttl: None,
            underlay_mtu: None,
            accept: Vec::new(),
            vtep_fdb_limit: None,
            evpn: false,
        }
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

    /// The port's queue count, its default applied (the one place it is):
    /// a vhost-user port's queue pairs, an uplink's receive queues, 1 for
    /// the other kinds.
    pub fn queue_count(&self) -> NonZeroUsize {
        match self.kind {
            PortKind::VhostUser | PortKind::Uplink => self.queues.unwrap_or(NonZeroUsize::MIN),
            PortKind::Tap | PortKind::Vxlan => NonZeroUsize::MIN,
        }
    }

    /// A tap port on interface `ifname` with defaults.
    pub fn tap(name: &str, ifname: &str) -> Self {
        Self {
            kind: PortKind::Tap,
            socket: None,
            ifname: Some(ifname.to_string()),
            ..Self::vhost_user(name, "", SocketMode::Server)
        }
    }

    /// An uplink port on host interface `ifname` with defaults.
    pub fn uplink(name: &str, ifname: &str) -> Self {
        Self {
            kind: PortKind::Uplink,
            ..Self::tap(name, ifname)
        }
    }

    /// Validates and turns the forwarding part into a policy: the name,
    /// the keys each kind takes, the VLANs, the MAC, the egress, the
    /// unswitched modes (`direct`, `cross_connect`) and the latency, in
    /// this order (the first fault is the one said).
    pub fn policy(&self) -> Result<PortPolicy, ConfigError> {
        self.check_name().map_err(|w| self.fault(w))?;
        self.check_kind_keys().map_err(|w| self.fault(w))?;
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
        self.check_direct(mac.is_some())
            .and_then(|()| self.check_cross_connect())
            .and_then(|()| self.check_guard_and_latency(mac.is_some()))
            .map_err(|w| self.fault(w))?;
        Ok(PortPolicy {
            vlan,
            spoof_guard: if self.spoof_guard { mac } else { None },
            mac,
            uplink_queue: self.uplink_queue.unwrap_or_default(),
            egress,
            direct: self.direct.clone(),
            cross_connect: self.cross_connect.clone(),
            fdb_limit: self.fdb_limit,
            vtep_fdb_limit: self.vtep_limit(),
            evpn: self.evpn,
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

    /// The keys that belong to some kinds only.
    fn check_kind_keys(&self) -> Result<(), String> {
        if self.kind == PortKind::VhostUser && self.socket.is_none() {
            return Err("a vhost-user port needs `socket`".into());
        }
        self.check_vxlan()?;
        if self.kind == PortKind::Tap
            && (self.socket.is_some() || self.ifname.as_ref().unwrap_or(&self.name).len() >= 16)
        {
            return Err("a tap port takes `ifname` (at most 15 characters), not `socket`".into());
        }
        if let Some(a) = &self.socket_access {
            if self.kind != PortKind::VhostUser || self.mode != SocketMode::Server {
                return Err("`socket_access` applies to server-mode vhost-user ports (in client mode the front-end makes the socket)".into());
            }
            a.resolve().map_err(|e| format!("socket_access: {e}"))?;
        }
        if self.netns.is_some() && self.kind != PortKind::Tap {
            return Err("`netns` applies to tap ports only".into());
        }
        Ok(())
    }

    fn parsed_mac(&self) -> Result<Option<EthernetAddress>, &'static str> {
        match &self.mac {
            Some(m) => Ok(Some(m.parse().map_err(|_| "`mac` is not a MAC address")?)),
            None => Ok(None),
        }
    }

    /// The uplink-only keys, the queues, and the egress policy.
    fn checked_egress(&self) -> Result<EgressPolicy, &'static str> {
        if self.qdisc_bypass && self.kind != PortKind::Uplink {
            return Err("`qdisc_bypass` applies to uplink ports only");
        }
        self.check_queues()?;
        if self.uplink_queue.is_some() && self.kind == PortKind::Uplink {
            return Err("`uplink_queue` applies to vhost-user and tap ports");
        }
        if self.egress.is_set() && self.kind == PortKind::Uplink {
            return Err(
                "`share`, `limit_mbps` and `reserve_mbps` apply to vhost-user and tap ports",
            );
        }
        if self.capacity_mbps.is_some() && !matches!(self.kind, PortKind::Uplink | PortKind::Vxlan)
        {
            return Err("`capacity_mbps` applies to uplink and vxlan ports only");
        }
        self.egress.policy()
    }

    fn check_queues(&self) -> Result<(), &'static str> {
        match (self.kind, self.queues.map(NonZeroUsize::get)) {
            (_, None) => Ok(()),
            (PortKind::Uplink, Some(k)) if !(1..=MAX_UPLINK_QUEUES).contains(&k) => {
                Err("`queues` must be between 1 and 64")
            }
            (PortKind::VhostUser, Some(k)) if !(1..=MAX_QUEUE_PAIRS).contains(&k) => {
                Err("`queues` (queue pairs) must be between 1 and 8")
            }
            (PortKind::Uplink | PortKind::VhostUser, Some(_)) => Ok(()),
            (_, Some(_)) => Err("`queues` applies to uplink and vhost-user ports"),
        }
    }

    fn check_direct(&self, has_mac: bool) -> Result<(), &'static str> {
        if self.direct.is_none() {
            return Ok(());
        }
        if self.kind != PortKind::VhostUser {
            return Err("`direct` applies to vhost-user ports only");
        }
        if !has_mac {
            return Err("`direct` needs `mac` (its uplink queue takes frames for it)");
        }
        if self.uplink_queue.is_some() || self.egress.is_set() {
            return Err(
                "a `direct` port takes its own uplink queue and has no share, limit or reservation",
            );
        }
        if self.latency == Latency::High {
            // The uplink it is bound to lives on the shared worker.
            return Err("a `direct` port cannot be latency = \"high\"");
        }
        Ok(())
    }

    fn check_cross_connect(&self) -> Result<(), &'static str> {
        let Some(peer) = &self.cross_connect else {
            return Ok(());
        };
        if self.kind != PortKind::VhostUser {
            return Err("`cross_connect` applies to vhost-user ports only");
        }
        if *peer == self.name {
            return Err("`cross_connect` names another port");
        }
        if self.direct.is_some()
            || self.vlan.is_some()
            || !self.trunk.is_empty()
            || self.native_vlan.is_some()
            || self.egress.is_set()
        {
            return Err(
                "a `cross_connect` port is not switched: no `direct`, VLAN, share, limit or reservation",
            );
        }
        if self.latency == Latency::High || self.queue_count().get() > 1 {
            // Both ends must stay on one worker: the shared one.
            return Err("a `cross_connect` port has one queue pair and ordinary latency");
        }
        Ok(())
    }

    fn check_guard_and_latency(&self, has_mac: bool) -> Result<(), &'static str> {
        if self.spoof_guard && !has_mac {
            return Err("`spoof_guard` needs `mac`");
        }
        if self.core.is_some() && self.latency != Latency::High {
            return Err("`core` is for a latency = \"high\" port");
        }
        if self.kind != PortKind::VhostUser && self.latency == Latency::High {
            return Err("latency = \"high\" is for vhost-user ports");
        }
        Ok(())
    }
}
