//! What a testbed was built as: the configuration, its hosts, guests and
//! machines, as stored with the results and shown in the report. Separate
//! from the live testbed (`crate::testbed`) because it is plain data that
//! outlives it.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::machine::ClockOffset;
use crate::scenario::{HostKind, Knobs, WireKind};

/// What was built, for the store and the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BedDescription {
    /// Configuration name.
    pub configuration: String,
    /// Wire kind.
    pub wire: WireKind,
    /// Knobs in force.
    pub knobs: Knobs,
    /// The hosts.
    pub hosts: Vec<HostDescription>,
    /// Notes on what was applied.
    pub notes: Vec<String>,
    /// The other machines hosts were placed on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineDescription>,
}

/// One host as built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostDescription {
    /// Scenario name.
    pub name: String,
    /// Kind in this configuration.
    pub kind: HostKind,
    /// Namespace name (namespace hosts).
    pub netns: Option<String>,
    /// The machine it is on (absent: this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Address.
    pub addr: Ipv4Addr,
    /// Interface in the namespace.
    pub ifname: Option<String>,
    /// VM hosts: the guest as launched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<GuestDescription>,
}

/// A VM host as launched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestDescription {
    /// `kvm` or `tcg`.
    pub accel: String,
    /// Its NIC on the host side (`vhost-user port hN`, `tap NAME on br0`).
    pub nic: String,
    /// Seconds from QEMU's start to the guest's agent listening.
    pub ready_s: f64,
}

/// One machine as used, for the store and the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineDescription {
    /// The scenario's name.
    pub name: String,
    /// SSH destination.
    pub ssh: String,
    /// Its address on the network joining the machines.
    pub address: String,
    /// Its interface there.
    pub interface: String,
    /// The controller's address toward it.
    pub local_address: String,
    /// The `vnio` copied there.
    pub binary: String,
    /// Its clock against the controller's.
    pub clock: Option<ClockOffset>,
}
