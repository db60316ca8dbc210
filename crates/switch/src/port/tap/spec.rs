//! A tap port's keys (`kind = "tap"`): the interface, the namespace it is
//! created in, the offloads; their checks; the opening of the port.

use super::TapPort;
use crate::config::{PortSpec, SwitchConfig};
use crate::port::spec::{is_yes, yes, KindKeys};
use crate::port::Port;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The keys of a tap port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TapSpec {
    /// The interface's name (default: the port's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// The network namespace (a file such as /run/netns/NAME or
    /// /proc/PID/ns/net) the tap is created in, as `ifname` there, instead
    /// of the switch's own. Such a tap is persistent: it keeps its
    /// addresses and routes while the switch restarts (the restarted switch
    /// takes it over), and goes only with `port del` or its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
    /// Offer checksum and TSO offloads. Off, the kernel behind the tap
    /// sends and takes MTU-sized, fully checksummed frames.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub offloads: bool,
}

/// The keys' defaults, as parsing applies them: the port's name for the
/// interface, the switch's namespace, offloads on.
impl Default for TapSpec {
    fn default() -> Self {
        Self {
            ifname: None,
            netns: None,
            offloads: true,
        }
    }
}

impl TapSpec {
    /// A tap on interface `ifname` in the switch's namespace, with offloads.
    pub fn new(ifname: &str) -> Self {
        Self {
            ifname: Some(ifname.to_string()),
            ..Self::default()
        }
    }

    /// The interface's name: `ifname`, or the port's.
    pub fn ifname<'a>(&'a self, port: &'a PortSpec) -> &'a str {
        self.ifname.as_deref().unwrap_or(&port.name)
    }
}

impl KindKeys for TapSpec {
    const NAME: &'static str = "tap";

    fn check(&self, port: &PortSpec) -> Result<(), String> {
        if self.ifname(port).len() >= 16 {
            return Err("a tap's `ifname` (or its port's name) has at most 15 characters".into());
        }
        Ok(())
    }

    fn open(&self, port: &PortSpec, _sw: &SwitchConfig) -> Result<Port, String> {
        let ifname = self.ifname(port);
        match &self.netns {
            Some(ns) => TapPort::in_netns(ifname, ns, self.offloads),
            None => TapPort::with_offloads(ifname, self.offloads),
        }
        .map(Port::Tap)
        .map_err(|e| crate::error_chain(&e))
    }

    fn is_vnic(&self) -> bool {
        true
    }
}
