//! The `[[port]]` keys of a VXLAN port: construction, the options the
//! port opens with, and their checks.

use super::{PortKind, PortSpec};
use crate::port::SocketMode;

/// The least default share of a VXLAN port's FDB limit per remote VTEP.
pub const MIN_VTEP_LIMIT: u32 = 64;

impl PortSpec {
    /// A VXLAN port for `vni` sending from `local` and flooding to `remotes`, with defaults.
    pub fn vxlan(
        name: &str,
        vni: u32,
        local: std::net::Ipv4Addr,
        remotes: &[std::net::Ipv4Addr],
    ) -> Self {
        Self {
            kind: PortKind::Vxlan,
            socket: None,
            vni: Some(vni),
            local: Some(local),
            remotes: remotes.to_vec(),
            ..Self::vhost_user(name, "", SocketMode::Server)
        }
    }

    /// A VXLAN port's options (after [`PortSpec::policy`] accepted it).
    pub fn vxlan_options(&self) -> Option<crate::port::vxlan::VxlanOptions> {
        Some(crate::port::vxlan::VxlanOptions {
            vni: self.vni?,
            local: self.local?,
            remotes: self.remotes.clone(),
            accept: self.accept.clone(),
            dstport: self.dstport.unwrap_or(crate::wire::vxlan::DEFAULT_PORT),
            evpn: self.evpn,
            ttl: self.ttl,
            underlay_mtu: self
                .underlay_mtu
                .unwrap_or(crate::port::vxlan::DEFAULT_UNDERLAY_MTU),
            capacity_bps: self.capacity_mbps.map(|m| m.saturating_mul(1_000_000)),
        })
    }

    /// Addresses each remote VTEP of a VXLAN port may have learned (none
    /// for other ports): `vtep_fdb_limit`, or the port's limit shared
    /// among its remotes, at least [`MIN_VTEP_LIMIT`].
    pub(super) fn vtep_limit(&self) -> Option<u32> {
        if self.kind != PortKind::Vxlan {
            return None;
        }
        let port = self.fdb_limit.unwrap_or(crate::fdb::DEFAULT_PORT_LIMIT);
        let share = port / (self.remotes.len() as u32).max(1);
        Some(self.vtep_fdb_limit.unwrap_or(share.max(MIN_VTEP_LIMIT)))
    }

    pub(super) fn check_vxlan(&self) -> Result<(), String> {
        let any = self.vni.is_some()
            || self.local.is_some()
            || !self.remotes.is_empty()
            || !self.accept.is_empty()
            || self.vtep_fdb_limit.is_some()
            || self.dstport.is_some()
            || self.ttl.is_some()
            || self.underlay_mtu.is_some()
            || self.evpn;
        if self.kind != PortKind::Vxlan {
            return match any {
                true => Err("`vni`, `local`, `remotes`, `accept`, `vtep_fdb_limit`, `dstport`, `ttl`, `underlay_mtu` and `evpn` apply to vxlan ports only".into()),
                false => Ok(()),
            };
        }
        if self.socket.is_some() || self.ifname.is_some() {
            return Err(
                "a vxlan port takes `vni`, `local` and `remotes`, not `socket` or `ifname`".into(),
            );
        }
        match self.vni {
            None => return Err("a vxlan port needs `vni`".into()),
            Some(v) if v > crate::wire::vxlan::MAX_VNI => {
                return Err("`vni` must be between 0 and 16777215".into())
            }
            Some(_) => {}
        }
        let Some(local) = self.local else {
            return Err("a vxlan port needs `local` (the outer source IPv4 address)".into());
        };
        if local.is_unspecified() || local.is_multicast() {
            return Err("`local` must be a unicast address of this host".into());
        }
        if self.remotes.len() > crate::port::vxlan::MAX_REMOTES {
            return Err(format!(
                "at most {} `remotes`",
                crate::port::vxlan::MAX_REMOTES
            ));
        }
        if self
            .remotes
            .iter()
            .any(|r| r.is_unspecified() || r.is_multicast() || *r == local)
        {
            return Err("`remotes` must be unicast addresses other than `local`".into());
        }
        if self.accept.len() > crate::port::vxlan::MAX_REMOTES {
            return Err(format!(
                "at most {} `accept` prefixes",
                crate::port::vxlan::MAX_REMOTES
            ));
        }
        if self.evpn && (!self.remotes.is_empty() || !self.accept.is_empty()) {
            return Err(
                "an `evpn` vxlan port takes its flood list and peers from EVPN: no `remotes` or `accept`".into(),
            );
        }
        if self.dstport == Some(0) {
            return Err("`dstport` cannot be 0".into());
        }
        if self
            .underlay_mtu
            .is_some_and(|m| !(576..=65535).contains(&m))
        {
            return Err("`underlay_mtu` must be between 576 and 65535".into());
        }
        let vnic_only =
            self.egress.is_set() || self.uplink_queue.is_some() || self.direct.is_some();
        if vnic_only || self.offloads.is_some() {
            return Err(
                "a vxlan port has no uplink queue, egress policy, direct mode or offloads".into(),
            );
        }
        Ok(())
    }
}
