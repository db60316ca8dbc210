//! A VXLAN port's keys (`kind = "vxlan"`): the segment, the tunnel's
//! addresses, the VTEPs flooded to and heard, the underlay's limits; their
//! checks; the opening of the port.

use super::{Ipv4Net, VxlanOptions, VxlanPort, DEFAULT_UNDERLAY_MTU, MAX_REMOTES};
use crate::config::{PortSpec, SwitchConfig};
use crate::port::spec::{is_no, KindKeys};
use crate::port::Port;
use crate::wire::vxlan::{DEFAULT_PORT, MAX_VNI};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// The least default share of a VXLAN port's FDB limit per remote VTEP.
pub const MIN_VTEP_LIMIT: u32 = 64;

/// The keys of a VXLAN port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VxlanSpec {
    /// The VXLAN network identifier (0-16777215).
    pub vni: u32,
    /// The outer source address (the host's, on the underlay); the port
    /// receives on it at `dstport`.
    pub local: Ipv4Addr,
    /// Remote VTEPs that get broadcast, multicast and unknown unicast
    /// (head-end replication); learned VTEPs get unicast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<Ipv4Addr>,
    /// Further VTEPs (IPv4 prefixes) whose datagrams are accepted besides
    /// `remotes`; any other sender's are dropped (`unknown_vtep`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<Ipv4Net>,
    /// UDP port.
    #[serde(default = "dstport", skip_serializing_if = "is_dstport")]
    pub dstport: u16,
    /// Outer TTL (default: the kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// The underlay's MTU: inner frames longer than this less 36 bytes are
    /// dropped (`too_big`), never fragmented.
    #[serde(default = "underlay_mtu", skip_serializing_if = "is_underlay_mtu")]
    pub underlay_mtu: usize,
    /// Addresses each remote VTEP may have learned (default: the port's
    /// `fdb_limit` shared among its `remotes`, at least 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtep_fdb_limit: Option<u32>,
    /// The flood list and the VTEPs heard come from BGP EVPN through FRR
    /// (then no `remotes` or `accept`), see docs/cluster.md.
    #[serde(default, skip_serializing_if = "is_no")]
    pub evpn: bool,
    /// The egress capacity the vNICs' shares divide, in Mbit/s (default
    /// none: only their limits and reservations apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_mbps: Option<u64>,
}

fn dstport() -> u16 {
    DEFAULT_PORT
}

fn is_dstport(p: &u16) -> bool {
    *p == DEFAULT_PORT
}

fn underlay_mtu() -> usize {
    DEFAULT_UNDERLAY_MTU
}

fn is_underlay_mtu(m: &usize) -> bool {
    *m == DEFAULT_UNDERLAY_MTU
}

impl VxlanSpec {
    /// A port for `vni` sending from `local` and flooding to `remotes`,
    /// the other keys at their defaults.
    pub fn new(vni: u32, local: Ipv4Addr, remotes: &[Ipv4Addr]) -> Self {
        Self {
            vni,
            local,
            remotes: remotes.to_vec(),
            accept: Vec::new(),
            dstport: DEFAULT_PORT,
            ttl: None,
            underlay_mtu: DEFAULT_UNDERLAY_MTU,
            vtep_fdb_limit: None,
            evpn: false,
            capacity_mbps: None,
        }
    }

    /// What the port opens with.
    pub fn options(&self) -> VxlanOptions {
        VxlanOptions {
            vni: self.vni,
            local: self.local,
            remotes: self.remotes.clone(),
            accept: self.accept.clone(),
            dstport: self.dstport,
            evpn: self.evpn,
            ttl: self.ttl,
            underlay_mtu: self.underlay_mtu,
            capacity_bps: self.capacity_mbps.map(|m| m.saturating_mul(1_000_000)),
        }
    }

    /// Addresses each remote VTEP may have learned: `vtep_fdb_limit`, or
    /// the port's limit `fdb_limit` shared among the remotes, at least
    /// [`MIN_VTEP_LIMIT`].
    pub fn vtep_limit(&self, fdb_limit: Option<u32>) -> u32 {
        let port = fdb_limit.unwrap_or(crate::fdb::DEFAULT_PORT_LIMIT);
        let share = port / (self.remotes.len() as u32).max(1);
        self.vtep_fdb_limit.unwrap_or(share.max(MIN_VTEP_LIMIT))
    }

    fn check_remotes(&self) -> Result<(), String> {
        if self.remotes.len() > MAX_REMOTES {
            return Err(format!("at most {MAX_REMOTES} `remotes`"));
        }
        if self
            .remotes
            .iter()
            .any(|r| r.is_unspecified() || r.is_multicast() || *r == self.local)
        {
            return Err("`remotes` must be unicast addresses other than `local`".into());
        }
        if self.accept.len() > MAX_REMOTES {
            return Err(format!("at most {MAX_REMOTES} `accept` prefixes"));
        }
        if self.evpn && (!self.remotes.is_empty() || !self.accept.is_empty()) {
            return Err(
                "an `evpn` vxlan port takes its flood list and peers from EVPN: no `remotes` or `accept`".into(),
            );
        }
        Ok(())
    }
}

impl KindKeys for VxlanSpec {
    const NAME: &'static str = "vxlan";

    fn check(&self, _port: &PortSpec) -> Result<(), String> {
        if self.vni > MAX_VNI {
            return Err("`vni` must be between 0 and 16777215".into());
        }
        if self.local.is_unspecified() || self.local.is_multicast() {
            return Err("`local` must be a unicast address of this host".into());
        }
        self.check_remotes()?;
        if self.dstport == 0 {
            return Err("`dstport` cannot be 0".into());
        }
        if !(576..=65535).contains(&self.underlay_mtu) {
            return Err("`underlay_mtu` must be between 576 and 65535".into());
        }
        Ok(())
    }

    fn open(&self, _port: &PortSpec, _sw: &SwitchConfig) -> Result<Port, String> {
        VxlanPort::open(self.options())
            .map(Port::Vxlan)
            .map_err(|e| crate::error_chain(&e))
    }
}
