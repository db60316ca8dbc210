//! A port as the control plane shows it (`port list`, `stats`): identity,
//! state, the virtqueue layout it serves, policies in force and counters.

use crate::coalesce::Coalesce;
use crate::config::{EgressSettings, Latency};
use crate::port::SocketMode;
use crate::stats::PortStatsSnapshot;
use serde::{Deserialize, Serialize};

/// A port as listed by `port list` and `stats`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortInfo {
    /// Name.
    pub name: String,
    /// Identity.
    pub id: u32,
    /// Kind.
    pub kind: String,
    /// Socket path (vhost-user).
    pub socket: Option<String>,
    /// Socket mode (vhost-user).
    pub mode: Option<SocketMode>,
    /// A front-end is connected.
    pub connected: bool,
    /// Both queues are running (of the first pair).
    pub running: bool,
    /// A multiqueue vNIC: its queue pairs, and how many of them run
    /// (both queues started and enabled by the front-end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<QueuePairsInfo>,
    /// A vhost-user port whose queues run: the ring layout its front-end
    /// negotiated (a front-end may fall back to split rings silently when
    /// asked for packed ones, so this is what was served, not asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtqueue: Option<VirtqueueInfo>,
    /// VLAN membership.
    pub vlan: String,
    /// Latency policies in force.
    #[serde(default)]
    pub policy: PolicyInfo,
    /// Egress policy (vNICs) or egress scheduler state (uplinks).
    #[serde(default)]
    pub egress: EgressInfo,
    /// Counters.
    pub stats: PortStatsSnapshot,
}

/// A multiqueue vNIC's queue pairs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueuePairsInfo {
    /// Pairs offered.
    pub pairs: usize,
    /// Pairs running.
    pub running: usize,
    /// The worker serving each pair, pair 0 first (empty: all on the
    /// port's worker; see `[switch] workers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<u32>,
    /// Times a pair was lent to another worker (once more after each
    /// recall for the front-end's messages).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lends: u64,
}

/// The virtqueue layout a vhost-user port's running queues use.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct VirtqueueInfo {
    /// VIRTIO_F_RING_PACKED: packed rings (else split).
    pub packed: bool,
    /// VIRTIO_F_IN_ORDER: buffers used in the order they were made available.
    pub in_order: bool,
}

impl std::fmt::Display for VirtqueueInfo {
    /// `packed`, `packed in-order`, `split`, `split in-order`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.packed { "packed" } else { "split" })?;
        if self.in_order {
            f.write_str(" in-order")?;
        }
        Ok(())
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A port's latency policies as in force (latency-high forces coalescing and LRO off).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct PolicyInfo {
    /// Coalescing in force.
    pub coalesce: Coalesce,
    /// LRO in force.
    pub lro: bool,
    /// Latency sensitivity.
    pub latency: Latency,
    /// The core a latency-high port's worker runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Transmit busy-poll budget (empty rounds).
    pub tx_poll_budget: u32,
}

/// A vNIC's share, limit and reservation on the uplinks' egress, or an
/// uplink's capacity and whether it is contended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct EgressInfo {
    /// vNIC: share, limit and reservation in force (top-level keys).
    #[serde(flatten)]
    pub settings: EgressSettings,
    /// Uplink: capacity the shares divide, Mbit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_mbps: Option<u64>,
    /// Uplink: shares are in force (a port waited for the link last round).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contended: Option<bool>,
}
