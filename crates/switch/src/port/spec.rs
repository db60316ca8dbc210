//! What a port of each kind is made from: [`KindSpec`] (made by the list
//! of kinds in `port/mod.rs`), the keys of a `[[port]]` (or of the control
//! socket's `port_add`) that belong to its kind, tagged by `kind`. Each
//! kind's keys are its own type, in its own module (`vhost_user/spec.rs`,
//! `tap/spec.rs`, `uplink/spec.rs`, `vxlan/spec.rs`), with their defaults,
//! their checks and the opening of the port (`KindKeys`); the keys every
//! kind shares (VLANs, MAC, latency, ...) are
//! [`crate::config::PortSpec`]'s.
//!
//! The spec is parsed flattened into the port's table: the port's own keys
//! are taken first, the rest must all be keys of its kind (each kind's type
//! refuses unknown keys), so a key of another kind is refused at parse,
//! named.

use super::tap::TapSpec;
use super::uplink::UplinkSpec;
use super::vhost_user::VhostUserSpec;
use super::vxlan::VxlanSpec;
use super::{KindSpec, Port};
use crate::config::{PortSpec, SwitchConfig};
use std::num::NonZeroUsize;

/// What every kind's keys answer.
pub(crate) trait KindKeys {
    /// The kind's name, as `kind` says it.
    const NAME: &'static str;
    /// Checks the kind's keys, with the port's other keys where they meet.
    /// The fault, without the port's name.
    fn check(&self, port: &PortSpec) -> Result<(), String>;
    /// Opens the port (after [`KindKeys::check`] passed).
    fn open(&self, port: &PortSpec, sw: &SwitchConfig) -> Result<Port, String>;
    /// The port's queues: a vNIC's queue pairs, an uplink's receive queues.
    fn queues(&self) -> NonZeroUsize {
        NonZeroUsize::MIN
    }
    /// A virtual NIC: its frames go out through the uplinks, so a share,
    /// limit, reservation and uplink queue apply to it.
    fn is_vnic(&self) -> bool {
        false
    }
}

impl KindSpec {
    /// The kind's name (`vhost-user`, `tap`, `uplink`, `vxlan`).
    pub fn name(&self) -> &'static str {
        fn name<K: KindKeys>(_: &K) -> &'static str {
            K::NAME
        }
        each_spec!(self, k => name(k))
    }

    /// See [`KindKeys::check`].
    pub(crate) fn check(&self, port: &PortSpec) -> Result<(), String> {
        each_spec!(self, k => k.check(port))
    }

    /// See [`KindKeys::open`].
    pub(crate) fn open(&self, port: &PortSpec, sw: &SwitchConfig) -> Result<Port, String> {
        each_spec!(self, k => k.open(port, sw))
    }

    /// The port's queue count, its default applied: a vhost-user port's
    /// queue pairs, an uplink's receive queues, 1 for the other kinds.
    pub fn queues(&self) -> NonZeroUsize {
        each_spec!(self, k => k.queues())
    }

    /// A virtual NIC (vhost-user, tap): its frames go out through the
    /// uplinks, so a share, limit, reservation and uplink queue apply.
    pub fn is_vnic(&self) -> bool {
        each_spec!(self, k => k.is_vnic())
    }

    /// A vhost-user port's keys.
    pub fn vhost_user(&self) -> Option<&VhostUserSpec> {
        match self {
            KindSpec::VhostUser(v) => Some(v),
            _ => None,
        }
    }

    /// A vhost-user port's keys, mutable.
    pub fn vhost_user_mut(&mut self) -> Option<&mut VhostUserSpec> {
        match self {
            KindSpec::VhostUser(v) => Some(v),
            _ => None,
        }
    }

    /// A tap port's keys, mutable.
    pub fn tap_mut(&mut self) -> Option<&mut TapSpec> {
        match self {
            KindSpec::Tap(t) => Some(t),
            _ => None,
        }
    }

    /// An uplink port's keys, mutable.
    pub fn uplink_mut(&mut self) -> Option<&mut UplinkSpec> {
        match self {
            KindSpec::Uplink(u) => Some(u),
            _ => None,
        }
    }

    /// A VXLAN port's keys.
    pub fn vxlan(&self) -> Option<&VxlanSpec> {
        match self {
            KindSpec::Vxlan(v) => Some(v),
            _ => None,
        }
    }

    /// A VXLAN port's keys, mutable.
    pub fn vxlan_mut(&mut self) -> Option<&mut VxlanSpec> {
        match self {
            KindSpec::Vxlan(v) => Some(v),
            _ => None,
        }
    }
}

/// A count of queues, `queues` in a kind's keys: 1 when absent, 0 refused
/// at parse with the key named (a port carries frames on at least one).
pub(crate) mod queues {
    use serde::Deserialize;
    use std::num::NonZeroUsize;

    /// The default: one queue.
    pub fn one() -> NonZeroUsize {
        NonZeroUsize::MIN
    }

    /// Whether `n` is the default (then it is not written).
    pub fn is_one(n: &NonZeroUsize) -> bool {
        n.get() == 1
    }

    /// Parses `queues`, refusing 0.
    pub fn nonzero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<NonZeroUsize, D::Error> {
        NonZeroUsize::new(usize::deserialize(d)?)
            .ok_or_else(|| serde::de::Error::custom("`queues` = 0: a port has at least 1 queue"))
    }
}

/// `true`, a flag's default.
pub(crate) fn yes() -> bool {
    true
}

/// Whether a flag is at its default `true` (then it is not written).
pub(crate) fn is_yes(b: &bool) -> bool {
    *b
}

/// Whether a flag is at its default `false`.
pub(crate) fn is_no(b: &bool) -> bool {
    !*b
}
