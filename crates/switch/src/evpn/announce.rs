//! The local half: the addresses vnio learned on its local ports, in the
//! port's VLAN, kept as static entries on the shadow bridge's access port,
//! where FRR's zebra finds them and advertises them as type-2 routes (and
//! withdraws them when vnio takes them away: aged, flushed, moved away).

use super::shadow::Shadow;
use crate::fdb::FdbEntry;
use crate::PortId;
use std::collections::BTreeSet;

/// What is on the access port.
#[derive(Debug, Default)]
pub struct Announced {
    macs: BTreeSet<String>,
    /// The last failure said, not repeated while it lasts.
    failing: Option<String>,
}

impl Announced {
    /// Brings the access port in line with `fdb` (the switch's learned
    /// addresses): local ones on VLAN `vid`, not behind a VTEP and not on
    /// the EVPN port `evpn` itself.
    pub fn sync(&mut self, shadow: &Shadow, fdb: &[FdbEntry], vid: u16, evpn: PortId) {
        let now: BTreeSet<String> = fdb
            .iter()
            .filter(|e| e.vid == vid && e.remote.is_none() && e.port != evpn)
            .map(|e| e.mac.to_string())
            .collect();
        let add: Vec<String> = now.difference(&self.macs).cloned().collect();
        let del: Vec<String> = self.macs.difference(&now).cloned().collect();
        match shadow.announce(&add, &del) {
            Ok(()) => self.failing = None,
            Err(e) => {
                if self.failing.as_deref() != Some(e.as_str()) {
                    log::warn!("evpn {}: local addresses not announced: {e}", shadow.bridge);
                }
                self.failing = Some(e);
            }
        }
        self.macs = now;
    }
}
