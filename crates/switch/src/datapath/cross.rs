//! Cross-connects: two vhost-user ports joined as by a cable. Every frame
//! one sends goes to the other as it is; neither is switched (no learning,
//! lookup, flood, VLAN or QoS), as direct mode is not. The port added second
//! names the first (`cross_connect`); the pair lasts while both exist.
//!
//! A cross-connected port carries its peer in `direct_to`, as a direct-mode
//! port carries its uplink, so the full path's direct delivery and every
//! "not switched" exclusion apply to it unchanged; the fast case knows the
//! peer's slot (`PortRuntime::cross`) and skips the forwarding decision.

use super::Table;

impl Table {
    /// Whether a port with policy `cross_connect` can be added here: its
    /// peer is a vhost-user port of this worker, not yet bound to another.
    pub fn check_cross(&self, cross_connect: Option<&str>) -> Result<(), String> {
        let Some(name) = cross_connect else {
            return Ok(());
        };
        let peer = self.find(name).and_then(|j| self.slot(j));
        match peer.filter(|s| s.port.vhost_user().is_some()) {
            Some(s) if s.direct_to.is_none() => Ok(()),
            Some(_) => Err(format!(
                "cross_connect: port {name} is already direct or cross-connected"
            )),
            None => Err(format!(
                "cross_connect: no vhost-user port named {name} on the shared worker"
            )),
        }
    }

    /// Binds slot `idx` and its peer when one of them names the other.
    pub(super) fn bind_cross(&mut self, idx: usize) {
        let Some(s) = self.slots[idx].as_ref() else {
            return;
        };
        // It names its peer, or a port here names it (the peer came back).
        let peer = match &s.policy.cross_connect {
            Some(name) => self.find(name),
            None => self.slots.iter().position(|o| {
                o.as_ref()
                    .is_some_and(|o| o.policy.cross_connect.as_deref() == Some(s.name.as_str()))
            }),
        };
        let Some(j) = peer.filter(|&j| j != idx) else {
            return;
        };
        let (Some(a), Some(b)) = (self.slot(idx).map(|s| s.id), self.slot(j).map(|s| s.id)) else {
            return;
        };
        for (k, to, peer) in [(idx, b, j), (j, a, idx)] {
            if let Some(s) = self.slots[k].as_mut() {
                s.direct_to = Some(to);
                s.rt.cross = Some(peer);
            }
        }
        // Both leave the switched ports: remembered decisions go.
        self.gen += 1;
        log::info!("port id {a}: cross-connected with port id {b}");
    }

    /// Slot `idx` is going: its peer keeps its own `cross_connect` (its
    /// frames are dropped as without a route until the port comes back), or
    /// returns to the switched ports when only the leaving port named it.
    pub(super) fn unbind_cross(&mut self, idx: usize) {
        let Some(gone) = self.slots[idx].as_ref().map(|s| s.id) else {
            return;
        };
        for s in self.slots.iter_mut().flatten() {
            if s.rt.cross == Some(idx) && s.direct_to == Some(gone) {
                s.rt.cross = None;
                if s.policy.cross_connect.is_none() {
                    s.direct_to = None;
                }
            }
        }
    }
}
