//! VLAN port groups: what VLAN a frame belongs to on ingress, and whether
//! and how (tagged or untagged) it leaves on a port.

use serde::{Deserialize, Serialize};

/// A set of VLAN ids (1..=4094).
#[derive(Clone, PartialEq, Eq)]
pub struct VlanSet(Box<[u64; 64]>);

impl VlanSet {
    /// No VLANs.
    pub fn empty() -> Self {
        Self(Box::new([0; 64]))
    }

    /// The given VLANs (ids outside 1..=4094 are ignored).
    pub fn from_ids(ids: &[u16]) -> Self {
        let mut s = Self::empty();
        for &v in ids {
            s.insert(v);
        }
        s
    }

    /// Adds `vid` when it is a valid id.
    pub fn insert(&mut self, vid: u16) {
        if (1..=4094).contains(&vid) {
            self.0[usize::from(vid / 64)] |= 1 << (vid % 64);
        }
    }

    /// True when `vid` is in the set.
    pub fn contains(&self, vid: u16) -> bool {
        vid < 4096 && self.0[usize::from(vid / 64)] & (1 << (vid % 64)) != 0
    }

    /// The ids in ascending order.
    pub fn ids(&self) -> Vec<u16> {
        (1..=4094).filter(|v| self.contains(*v)).collect()
    }
}

impl std::fmt::Debug for VlanSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.ids()).finish()
    }
}

/// The VLAN a port without configuration belongs to.
pub const DEFAULT_VID: u16 = 1;

/// How a port takes part in VLANs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanMode {
    /// Untagged member of one VLAN (a guest's vNIC): tags are stripped on
    /// egress; tagged frames from the port are dropped (except priority tags, VID 0).
    Access {
        /// The port's VLAN.
        vid: u16,
    },
    /// Tagged member of several VLANs (an uplink): frames of `native` travel
    /// untagged, others carry their tag; frames of other VLANs are dropped.
    Trunk {
        /// VLANs carried.
        allowed: VlanSet,
        /// The VLAN of untagged frames, if any.
        native: Option<u16>,
    },
}

impl Default for VlanMode {
    fn default() -> Self {
        Self::Access { vid: DEFAULT_VID }
    }
}

/// How a frame leaves a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tagging {
    /// Without an 802.1Q tag.
    Untagged,
    /// With a tag carrying this VLAN id.
    Tagged(u16),
}

impl VlanMode {
    /// The VLAN of a frame arriving on this port with tag `tag` (None when
    /// untagged), or None when the port does not accept it.
    pub fn ingress(&self, tag: Option<u16>) -> Option<u16> {
        match (self, tag) {
            (Self::Access { vid }, None | Some(0)) => Some(*vid),
            (Self::Access { .. }, Some(_)) => None,
            (Self::Trunk { native, .. }, None | Some(0)) => *native,
            (Self::Trunk { allowed, .. }, Some(t)) => allowed.contains(t).then_some(t),
        }
    }

    /// Whether and how a frame of VLAN `vid` leaves this port.
    pub fn egress(&self, vid: u16) -> Option<Tagging> {
        match self {
            Self::Access { vid: v } => (*v == vid).then_some(Tagging::Untagged),
            Self::Trunk { allowed, native } => {
                if *native == Some(vid) {
                    Some(Tagging::Untagged)
                } else if allowed.contains(vid) {
                    Some(Tagging::Tagged(vid))
                } else {
                    None
                }
            }
        }
    }
}

/// The configuration form of [`VlanMode`] (TOML and JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct VlanConfig {
    /// Access VLAN (default 1) when `trunk` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// VLANs carried tagged; a non-empty list makes the port a trunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trunk: Vec<u16>,
    /// The untagged VLAN of a trunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_vlan: Option<u16>,
}

/// A VLAN id outside 1..=4094.
#[derive(Debug, thiserror::Error)]
#[error("VLAN id {0} is outside 1..=4094")]
pub struct BadVid(pub u16);

impl VlanConfig {
    /// The mode this configuration describes.
    pub fn mode(&self) -> Result<VlanMode, BadVid> {
        let check = |v: u16| {
            if (1..=4094).contains(&v) {
                Ok(v)
            } else {
                Err(BadVid(v))
            }
        };
        if self.trunk.is_empty() {
            return Ok(VlanMode::Access {
                vid: check(self.vlan.unwrap_or(DEFAULT_VID))?,
            });
        }
        for v in &self.trunk {
            check(*v)?;
        }
        let native = self.native_vlan.map(check).transpose()?;
        Ok(VlanMode::Trunk {
            allowed: VlanSet::from_ids(&self.trunk),
            native,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_port() {
        let m = VlanMode::Access { vid: 10 };
        assert_eq!(m.ingress(None), Some(10));
        assert_eq!(
            m.ingress(Some(0)),
            Some(10),
            "priority-tagged frames belong to the access VLAN"
        );
        assert_eq!(
            m.ingress(Some(10)),
            None,
            "a guest may not send tagged frames"
        );
        assert_eq!(m.egress(10), Some(Tagging::Untagged));
        assert_eq!(m.egress(20), None);
    }

    #[test]
    fn trunk_port() {
        let m = VlanMode::Trunk {
            allowed: VlanSet::from_ids(&[10, 20]),
            native: Some(1),
        };
        assert_eq!(m.ingress(Some(10)), Some(10));
        assert_eq!(m.ingress(Some(30)), None);
        assert_eq!(m.ingress(None), Some(1));
        assert_eq!(m.egress(20), Some(Tagging::Tagged(20)));
        assert_eq!(m.egress(1), Some(Tagging::Untagged));
        assert_eq!(m.egress(30), None);
        let no_native = VlanMode::Trunk {
            allowed: VlanSet::from_ids(&[10]),
            native: None,
        };
        assert_eq!(no_native.ingress(None), None);
    }

    #[test]
    fn config_forms() {
        assert_eq!(
            VlanConfig::default().mode().unwrap(),
            VlanMode::Access { vid: 1 }
        );
        let t = VlanConfig {
            vlan: None,
            trunk: vec![5, 6],
            native_vlan: Some(5),
        };
        assert_eq!(
            t.mode().unwrap(),
            VlanMode::Trunk {
                allowed: VlanSet::from_ids(&[5, 6]),
                native: Some(5)
            }
        );
        assert!(VlanConfig {
            vlan: Some(4095),
            ..Default::default()
        }
        .mode()
        .is_err());
        assert_eq!(VlanSet::from_ids(&[0, 4095, 7]).ids(), vec![7]);
    }
}
