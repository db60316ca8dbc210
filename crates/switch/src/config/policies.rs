//! A port's latency policies: its latency sensitivity, coalescing, LRO,
//! dedicated core and transmit busy-poll budget as configured, what is in
//! force, and the updates `port_set` makes at run time. Separate from the
//! port's specification: these are what change while the port runs.

use super::EgressSettings;
use crate::coalesce::Coalesce;
use serde::{Deserialize, Serialize};

/// A port's latency sensitivity.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Latency {
    /// Shares the switch's worker; coalescing and LRO as configured.
    #[default]
    Normal,
    /// A dedicated busy-polling worker on its own core; coalescing and LRO off.
    High,
}

impl Latency {
    pub(super) fn is_normal(&self) -> bool {
        *self == Latency::Normal
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Latency::Normal => "normal",
            Latency::High => "high",
        })
    }
}

impl std::str::FromStr for Latency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "normal" => Ok(Latency::Normal),
            "high" => Ok(Latency::High),
            _ => Err(format!("latency {s:?}: expected normal or high")),
        }
    }
}

/// A change to a running port's latency policies (`port_set`); absent
/// fields keep their value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyUpdate {
    /// New coalescing policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesce: Option<Coalesce>,
    /// LRO on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lro: Option<bool>,
    /// Latency sensitivity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
    /// Core for a latency-high port's worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    /// Transmit busy-poll budget in empty rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_poll_budget: Option<u32>,
    /// Egress share, limit and reservation (top-level keys; 0 Mbit/s: none).
    #[serde(flatten)]
    pub egress: EgressSettings,
    /// Addresses the port may have learned in the FDB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdb_limit: Option<u32>,
}

/// A port's latency policies as configured (what `port_set` changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policies {
    /// Coalescing policy as configured.
    pub coalesce: Coalesce,
    /// LRO as configured.
    pub lro: bool,
    /// Latency sensitivity.
    pub latency: Latency,
    /// Requested core for a latency-high worker.
    pub core: Option<usize>,
    /// Transmit busy-poll budget (empty rounds).
    pub tx_poll_budget: u32,
}

impl Policies {
    /// Applies an update.
    pub fn apply(&mut self, u: &PolicyUpdate) {
        if let Some(c) = u.coalesce {
            self.coalesce = c;
        }
        if let Some(l) = u.lro {
            self.lro = l;
        }
        if let Some(l) = u.latency {
            self.latency = l;
        }
        if u.core.is_some() {
            self.core = u.core;
        }
        if let Some(b) = u.tx_poll_budget {
            self.tx_poll_budget = b;
        }
    }

    /// The coalescing in force: off for a latency-high port.
    pub fn effective_coalesce(&self) -> Coalesce {
        match self.latency {
            Latency::High => Coalesce::Off,
            Latency::Normal => self.coalesce,
        }
    }

    /// LRO in force: off for a latency-high port.
    pub fn effective_lro(&self) -> bool {
        self.lro && self.latency == Latency::Normal
    }

    /// The transmit busy-poll budget in force: a latency-high port's
    /// dedicated worker polls without end (its guest never needs to kick).
    pub fn effective_tx_poll_budget(&self) -> u32 {
        match self.latency {
            Latency::High => u32::MAX,
            Latency::Normal => self.tx_poll_budget,
        }
    }
}
