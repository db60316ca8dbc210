//! vnio's virtual switch: wire formats, L2 forwarding (learning FDB, VLAN
//! port groups, MAC-spoof guard), vhost-user virtio-net ports, and a
//! poll-mode endpoint (a user-space virtio-net driver).
//!
//! The data path is a library; the `vnio switch` CLI only parses and renders.

#![deny(unsafe_code)]

pub mod dwell;
pub mod egress;
pub mod fdb;
pub mod forward;
#[doc(hidden)]
pub mod fuzzing;
pub mod lro;
pub mod mesh;
pub mod netqueue;
pub mod offload;
pub mod perf;
pub mod stats;
mod sys;

/// Where a thread runs, for tools and benchmarks built on the switch (the
/// switch's own workers use the same calls).
pub mod cpu {
    pub use crate::sys::affinity::{allowed, pin_current_thread, realtime_current_thread};
}
pub mod vhost_user;
pub mod vlan;
pub mod wire;

/// A port's identity inside one switch (stable while the port exists).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PortId(pub u32);

impl std::fmt::Display for PortId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

pub mod datapath;
pub mod port;
pub mod port_info;

/// Renders an error with its causes: "outer: inner: root".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
pub mod access;
pub mod coalesce;
pub mod config;
pub mod control;
pub mod daemon;
pub mod endpoint;
pub mod events;
pub mod events_hub;
pub mod evpn;
pub mod logging;
pub mod pool;
pub mod reaper;
pub mod serve;
pub mod socket_access;
pub mod sockpath;
pub mod state;
pub mod worker;
