//! Addresses a control plane installs (EVPN's type-2 routes): pinned
//! behind a remote VTEP, never aged and never moved by frames from the
//! overlay, removed only when withdrawn (or taken over by a local port
//! that sends from them, see [`Fdb::learn_at`]).

use super::{add, key, remove, Entry, Fdb, Place};
use crate::wire::EthernetAddress;
use crate::PortId;
use std::collections::hash_map::Entry::{Occupied, Vacant};
use std::net::Ipv4Addr;
use std::time::Instant;

impl Fdb {
    /// Pins `mac` on `vid` behind `remote` on (VXLAN) port `port`,
    /// replacing whatever was known of it. False when the table is full.
    pub fn pin_remote(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        remote: Ipv4Addr,
        now: Instant,
    ) -> bool {
        if mac.is_multicast() {
            return false;
        }
        let at = Place {
            port,
            remote: Some(remote),
        };
        let pinned = Entry {
            pinned: true,
            ..Entry::new(at, now)
        };
        let len = self.map.len();
        match self.map.entry(key(vid, mac)) {
            Occupied(mut o) => {
                let old = *o.get();
                if old.pinned && old.place() == at {
                    return true;
                }
                *o.get_mut() = pinned;
                remove(&mut self.per_port, &mut self.per_vtep, old.place());
            }
            Vacant(v) => {
                if len >= self.capacity {
                    self.full_misses += 1;
                    return false;
                }
                v.insert(pinned);
            }
        }
        add(&mut self.per_port, &mut self.per_vtep, at);
        self.generation += 1;
        true
    }

    /// Removes `mac` on `vid` when it is pinned behind `remote` on `port`
    /// (a withdrawal of an older route leaves a newer one alone); true
    /// when it was.
    pub fn unpin_remote(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        remote: Ipv4Addr,
    ) -> bool {
        let at = Place {
            port,
            remote: Some(remote),
        };
        match self.map.entry(key(vid, mac)) {
            Occupied(o) if o.get().pinned && o.get().place() == at => {
                o.remove();
                remove(&mut self.per_port, &mut self.per_vtep, at);
                self.generation += 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn pinned_entries_do_not_age_and_leave_when_withdrawn() {
        let t0 = Instant::now();
        let mut f = Fdb::new(64, Duration::from_secs(1));
        let (vx, vtep) = (PortId(7), Ipv4Addr::new(10, 0, 0, 2));
        assert!(f.pin_remote(1, mac(1), vx, vtep, t0));
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(f.age(later), 0);
        assert_eq!(f.lookup(1, mac(1), later), Some(vx));
        assert_eq!(f.remote(1, mac(1), later), Some(vtep));
        // A withdrawal from another VTEP does not remove the newer route.
        assert!(!f.unpin_remote(1, mac(1), vx, Ipv4Addr::new(10, 0, 0, 3)));
        assert!(f.unpin_remote(1, mac(1), vx, vtep));
        assert_eq!(f.lookup(1, mac(1), later), None);
        assert_eq!(f.vtep_len(vtep), 0);
    }

    #[test]
    fn frames_do_not_move_a_pinned_entry_but_a_local_port_takes_it() {
        let t0 = Instant::now();
        let mut f = Fdb::new(64, Duration::from_secs(300));
        let (vx, vtep) = (PortId(7), Ipv4Addr::new(10, 0, 0, 2));
        assert!(f.pin_remote(1, mac(1), vx, vtep, t0));
        let other = Ipv4Addr::new(10, 0, 0, 3);
        let got = f.learn_remote(1, mac(1), vx, super::super::Limits::default(), other, t0);
        assert_eq!(got, super::super::Learned::Kept);
        assert_eq!(f.remote(1, mac(1), t0), Some(vtep));
        let got = f.learn(1, mac(1), PortId(1), None, t0);
        assert_eq!(got, super::super::Learned::Changed);
        assert_eq!(f.lookup(1, mac(1), t0), Some(PortId(1)));
        assert_eq!(f.vtep_len(vtep), 0);
        // Pinned again (the host moved back behind the VTEP): replaced.
        assert!(f.pin_remote(1, mac(1), vx, other, t0));
        assert_eq!(f.remote(1, mac(1), t0), Some(other));
        assert_eq!(f.port_len(PortId(1)), 0);
    }
}
