//! An uplink port's keys (`kind = "uplink"`): the host interface, its
//! receive queues, its egress capacity, the qdisc bypass; their checks; the
//! opening of the port.

use super::{UplinkOptions, UplinkPort};
use crate::config::{PortSpec, SwitchConfig, MAX_UPLINK_QUEUES};
use crate::port::spec::{is_no, queues, KindKeys};
use crate::port::Port;
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;

/// The keys of an uplink port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UplinkSpec {
    /// The host interface.
    pub ifname: String,
    /// Hand transmitted frames straight to the driver, skipping the
    /// interface's queueing discipline (PACKET_QDISC_BYPASS).
    #[serde(default, skip_serializing_if = "is_no")]
    pub qdisc_bypass: bool,
    /// Receive queues (1-64): queue 0 is shared, the others go one per
    /// vNIC while they last.
    #[serde(
        default = "queues::one",
        skip_serializing_if = "queues::is_one",
        deserialize_with = "queues::nonzero"
    )]
    pub queues: NonZeroUsize,
    /// The egress capacity shares divide, in Mbit/s (default: the
    /// interface's link speed when the kernel knows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_mbps: Option<u64>,
}

impl UplinkSpec {
    /// An uplink on host interface `ifname`, the other keys at their defaults.
    pub fn new(ifname: &str) -> Self {
        Self {
            ifname: ifname.to_string(),
            qdisc_bypass: false,
            queues: queues::one(),
            capacity_mbps: None,
        }
    }
}

impl KindKeys for UplinkSpec {
    const NAME: &'static str = "uplink";

    fn check(&self, _port: &PortSpec) -> Result<(), String> {
        if self.queues.get() > MAX_UPLINK_QUEUES {
            return Err(format!(
                "`queues` must be between 1 and {MAX_UPLINK_QUEUES}"
            ));
        }
        Ok(())
    }

    fn open(&self, _port: &PortSpec, _sw: &SwitchConfig) -> Result<Port, String> {
        let opts = UplinkOptions {
            qdisc_bypass: self.qdisc_bypass,
            queues: self.queues.get(),
            capacity_bps: self.capacity_mbps.map(|m| m.saturating_mul(1_000_000)),
            ..UplinkOptions::default()
        };
        UplinkPort::open(&self.ifname, &opts)
            .map(Port::Uplink)
            .map_err(|e| crate::error_chain(&e))
    }

    fn queues(&self) -> NonZeroUsize {
        self.queues
    }
}
