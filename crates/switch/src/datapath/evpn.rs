//! What BGP EVPN says about a VXLAN port in EVPN mode, applied between
//! polling rounds: remote addresses pinned in the FDB behind their VTEP,
//! the port's flood list and the VTEPs it hears (see [`crate::evpn`]).

use super::{Datapath, Port};
use crate::evpn::Change;
use std::time::Instant;

impl Datapath {
    /// Applies `changes` to the EVPN port `name`; false when this worker
    /// has no such port (it moved, or left).
    pub fn evpn(&mut self, name: &str, changes: &[Change], now: Instant) -> bool {
        let Some(i) = self.find(name) else {
            return false;
        };
        let Some(s) = self.slots[i].as_mut() else {
            return false;
        };
        let Port::Vxlan(vx) = &mut s.port else {
            return false;
        };
        // Remote frames arrive untagged: the port's own VLAN holds them.
        let Some(vid) = s.policy.vlan.ingress(None) else {
            return false;
        };
        let id = s.id;
        for c in changes {
            match c {
                Change::Pin { mac, vtep } => {
                    if !self.fdb.pin_remote(vid, *mac, id, *vtep, now) {
                        log::warn!(
                            "evpn {name}: the FDB is full, {mac} behind {vtep} is not installed"
                        );
                    }
                }
                Change::Unpin { mac, vtep } => {
                    self.fdb.unpin_remote(vid, *mac, id, *vtep);
                }
                Change::Vteps { flood, known } => {
                    vx.set_vteps(flood, known);
                    // Remembered flood decisions counted the old list.
                    self.topo_gen += 1;
                }
            }
        }
        true
    }
}
