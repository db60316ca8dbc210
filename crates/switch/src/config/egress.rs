//! A vNIC's egress settings toward the uplinks (share, limit, reservation)
//! as the config file, the control socket's `port_add` and `port_set`, and
//! `port list` write them: one type, flattened into each, so the keys stay
//! top-level. [`EgressPolicy`] is the checked form the data path uses.

use crate::egress::{EgressPolicy, DEFAULT_SHARE, MAX_SHARE};
use serde::{Deserialize, Deserializer, Serialize};

/// A vNIC's share, limit and reservation on the uplinks' egress, in Mbit/s;
/// absent keys take the defaults (share 100, no limit, no reservation) or,
/// in an update, keep their value.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EgressSettings {
    /// Weight on the uplinks' egress while they are contended (1-10000, default 100).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "share"
    )]
    pub share: Option<u32>,
    /// Cap on the rate toward the uplinks, in Mbit/s (0: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "limit_mbps"
    )]
    pub limit_mbps: Option<u64>,
    /// Rate guaranteed toward the uplinks, in Mbit/s (0: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "reserve_mbps"
    )]
    pub reserve_mbps: Option<u64>,
}

impl EgressSettings {
    /// Whether any of share, limit or reservation is given.
    pub fn is_set(&self) -> bool {
        self.share.is_some() || self.limit_mbps.is_some() || self.reserve_mbps.is_some()
    }

    /// These settings with `update`'s given keys in place of theirs.
    pub fn updated(self, update: &EgressSettings) -> Self {
        Self {
            share: update.share.or(self.share),
            limit_mbps: update.limit_mbps.or(self.limit_mbps),
            reserve_mbps: update.reserve_mbps.or(self.reserve_mbps),
        }
    }

    /// Validates into a policy (bit/s); 0 Mbit/s means no limit or reservation.
    pub fn policy(&self) -> Result<EgressPolicy, &'static str> {
        let share = self.share.unwrap_or(DEFAULT_SHARE);
        if !(1..=MAX_SHARE).contains(&share) {
            return Err("`share` must be between 1 and 10000");
        }
        let bps = |m: Option<u64>| m.filter(|&m| m > 0).map(|m| m.saturating_mul(1_000_000));
        let (limit_bps, reserve_bps) = (bps(self.limit_mbps), bps(self.reserve_mbps));
        if let (Some(l), Some(r)) = (limit_bps, reserve_bps) {
            if r > l {
                return Err("`reserve_mbps` cannot exceed `limit_mbps`");
            }
        }
        Ok(EgressPolicy {
            share,
            limit_bps,
            reserve_bps,
        })
    }
}

impl From<EgressPolicy> for EgressSettings {
    /// A policy in force as settings (whole Mbit/s), every key given.
    fn from(p: EgressPolicy) -> Self {
        let mbps = |b: Option<u64>| b.map(|b| b / 1_000_000);
        Self {
            share: Some(p.share),
            limit_mbps: mbps(p.limit_bps),
            reserve_mbps: mbps(p.reserve_bps),
        }
    }
}

// Flattened, these keys are read from a buffered table, where a type error
// would lose its position: each names its key instead.
fn share<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    named(d, "share")
}

fn limit_mbps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    named(d, "limit_mbps")
}

fn reserve_mbps<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    named(d, "reserve_mbps")
}

fn named<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    key: &str,
) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d).map_err(|e| serde::de::Error::custom(format_args!("`{key}`: {e}")))
}
