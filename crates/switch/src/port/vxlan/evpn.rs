//! A VXLAN port in EVPN mode: its flood list and the VTEPs it hears are
//! what BGP EVPN says (type-3 routes, and the VTEPs of type-2 routes),
//! replaced by the control plane as routes come and go (see
//! [`crate::evpn`]), never taken from configuration.

use super::{Count, VxlanPort, MAX_REMOTES};
use crate::port::vxlan::Ipv4Net;
use std::net::Ipv4Addr;

impl VxlanPort {
    /// Replaces the flood list with `flood` and the further VTEPs heard
    /// with `known`; each VTEP's counters stay with it. A flood list
    /// longer than [`MAX_REMOTES`] is cut there (said once per change).
    pub fn set_vteps(&mut self, flood: &[Ipv4Addr], known: &[Ipv4Addr]) {
        let mut flood = flood.to_vec();
        if flood.len() > MAX_REMOTES {
            log::warn!(
                "vxlan {}: EVPN names {} VTEPs to flood to, the port floods to the first {MAX_REMOTES}",
                self.describe(),
                flood.len()
            );
            flood.truncate(MAX_REMOTES);
        }
        let accept: Vec<Ipv4Net> = known
            .iter()
            .filter(|k| !flood.contains(k))
            .filter_map(|&k| Ipv4Net::new(k, 32))
            .collect();
        let carry = |old: &[Ipv4Addr], counts: &[Count]| -> Box<[Count]> {
            let mut n = vec![Count::default(); flood.len() + 1];
            for (v, ip) in flood.iter().enumerate() {
                if let Some(o) = old.iter().position(|r| r == ip) {
                    n[v] = counts[o];
                }
            }
            n[flood.len()] = counts[old.len()];
            n.into_boxed_slice()
        };
        let old = std::mem::take(&mut self.opts.remotes);
        self.counts_out = carry(&old, &self.counts_out);
        if let Some(rx) = self.rx.as_deref_mut() {
            rx.counts = carry(&old, &rx.counts);
            rx.peers.remotes = flood.clone().into_boxed_slice();
            rx.peers.accept = accept.clone().into_boxed_slice();
        }
        self.opts.remotes = flood;
        self.opts.accept = accept;
    }
}
