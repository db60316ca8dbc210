//! The learning forwarding database: (VLAN, MAC) -> port, with aging.
//!
//! Time is an input: every call that needs the clock takes `now`. The table
//! has a fixed capacity reserved up front, so learning never allocates on
//! the data path; when full, new addresses are not learned (their frames
//! are flooded) and `full_misses` counts it.

use crate::wire::EthernetAddress;
use crate::PortId;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Default aging time, as in most bridges (Linux, OVS): 300 s.
pub const DEFAULT_AGING: Duration = Duration::from_secs(300);

/// A small multiplicative hasher for the 8-byte FDB key (the key is not
/// attacker-chosen in a way that matters: the table is bounded).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

fn key(vid: u16, mac: EthernetAddress) -> u64 {
    (u64::from(vid) << 48) | mac.to_u64()
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    port: PortId,
    seen: Instant,
    /// Behind a VXLAN port: the VTEP the address was last seen behind.
    remote: Option<Ipv4Addr>,
}

/// One learned address, as listed by `vnio switch fdb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FdbEntry {
    /// VLAN the address was learned on.
    pub vid: u16,
    /// The address.
    pub mac: EthernetAddress,
    /// The port it was last seen on.
    pub port: PortId,
    /// Seconds since it was last seen.
    pub age_secs: u64,
    /// The remote VTEP it is behind (addresses learned on a VXLAN port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<Ipv4Addr>,
}

impl serde::Serialize for EthernetAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The table.
pub struct Fdb {
    map: HashMap<u64, Entry, BuildHasherDefault<KeyHasher>>,
    capacity: usize,
    aging: Duration,
    full_misses: u64,
    /// Counts changes that can alter a lookup's answer (an address added,
    /// moved or removed): a decision remembered at one generation holds
    /// while the generation (and the time) stay the same.
    generation: u64,
}

impl Fdb {
    /// A table of at most `capacity` entries that forgets an address `aging` after it was last seen.
    pub fn new(capacity: usize, aging: Duration) -> Self {
        let mut map = HashMap::default();
        map.reserve(capacity);
        Self {
            map,
            capacity,
            aging,
            full_misses: 0,
            generation: 0,
        }
    }

    /// Records that `mac` on `vid` was seen on `port` at `now`; a known
    /// address that moved is re-pointed. Returns true when something changed.
    pub fn learn(&mut self, vid: u16, mac: EthernetAddress, port: PortId, now: Instant) -> bool {
        if mac.is_multicast() {
            return false;
        }
        let k = key(vid, mac);
        if let Some(e) = self.map.get_mut(&k) {
            let moved = e.port != port;
            e.port = port;
            e.seen = now;
            if moved {
                // A VTEP is a place behind one port only.
                e.remote = None;
            }
            self.generation += u64::from(moved);
            return moved;
        }
        if self.map.len() >= self.capacity {
            self.full_misses += 1;
            return false;
        }
        self.map.insert(
            k,
            Entry {
                port,
                seen: now,
                remote: None,
            },
        );
        self.generation += 1;
        true
    }

    /// Like [`Fdb::learn`], for an address seen behind remote VTEP
    /// `remote` on (VXLAN) port `port`: a new VTEP is a move too.
    pub fn learn_remote(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        remote: Ipv4Addr,
        now: Instant,
    ) -> bool {
        let changed = self.learn(vid, mac, port, now);
        match self.map.get_mut(&key(vid, mac)) {
            Some(e) if e.remote != Some(remote) => {
                e.remote = Some(remote);
                self.generation += u64::from(!changed);
                true
            }
            _ => changed,
        }
    }

    /// The VTEP `mac` on `vid` is behind, when it was learned on a VXLAN
    /// port and has not aged out at `now`.
    pub fn remote(&self, vid: u16, mac: EthernetAddress, now: Instant) -> Option<Ipv4Addr> {
        let e = self.map.get(&key(vid, mac))?;
        if now.saturating_duration_since(e.seen) > self.aging {
            return None;
        }
        e.remote
    }

    /// The port `mac` on `vid` lives on, unless unknown or aged out at `now`.
    pub fn lookup(&self, vid: u16, mac: EthernetAddress, now: Instant) -> Option<PortId> {
        let e = self.map.get(&key(vid, mac))?;
        if now.saturating_duration_since(e.seen) > self.aging {
            return None;
        }
        Some(e.port)
    }

    /// Removes entries not seen within the aging time; returns how many.
    pub fn age(&mut self, now: Instant) -> usize {
        let before = self.map.len();
        let aging = self.aging;
        self.map
            .retain(|_, e| now.saturating_duration_since(e.seen) <= aging);
        self.changed(before)
    }

    /// Forgets every address learned on `port` (the port went away or was reset).
    pub fn flush_port(&mut self, port: PortId) -> usize {
        let before = self.map.len();
        self.map.retain(|_, e| e.port != port);
        self.changed(before)
    }

    /// Entries removed since there were `before`; a removal is a change.
    fn changed(&mut self, before: usize) -> usize {
        let removed = before - self.map.len();
        self.generation += u64::from(removed > 0);
        removed
    }

    /// Changes so far (see the field): equal generations and equal times
    /// give equal answers to [`Fdb::lookup`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing is learned.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Addresses not learned because the table was full.
    pub fn full_misses(&self) -> u64 {
        self.full_misses
    }

    /// All entries, sorted by VLAN then MAC.
    pub fn entries(&self, now: Instant) -> Vec<FdbEntry> {
        let mut v: Vec<FdbEntry> = self
            .map
            .iter()
            .map(|(k, e)| {
                let b = k.to_be_bytes();
                FdbEntry {
                    vid: (k >> 48) as u16,
                    mac: EthernetAddress::from_bytes(&b[2..8]),
                    port: e.port,
                    age_secs: now.saturating_duration_since(e.seen).as_secs(),
                    remote: e.remote,
                }
            })
            .collect();
        v.sort_by_key(|e| (e.vid, e.mac));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn learns_moves_and_ages() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, Duration::from_secs(10));
        assert!(f.learn(1, mac(1), PortId(1), t0));
        assert!(!f.learn(1, mac(1), PortId(1), t0));
        assert_eq!(f.lookup(1, mac(1), t0), Some(PortId(1)));
        assert_eq!(f.lookup(2, mac(1), t0), None, "VLANs are separate tables");
        assert!(
            f.learn(1, mac(1), PortId(2), t0 + Duration::from_secs(1)),
            "a move is a change"
        );
        assert_eq!(
            f.lookup(1, mac(1), t0 + Duration::from_secs(1)),
            Some(PortId(2))
        );
        // Aged out at 11 s + epsilon after the last sighting, not before.
        assert_eq!(
            f.lookup(1, mac(1), t0 + Duration::from_secs(11)),
            Some(PortId(2))
        );
        assert_eq!(
            f.lookup(1, mac(1), t0 + Duration::from_millis(11_001)),
            None
        );
        let g = f.generation();
        assert_eq!(f.age(t0 + Duration::from_secs(5)), 0);
        assert_eq!(f.generation(), g, "nothing removed, nothing changed");
        assert!(!f.learn(1, mac(1), PortId(2), t0 + Duration::from_secs(2)));
        assert_eq!(f.generation(), g, "a refresh is not a change");
        assert_eq!(f.age(t0 + Duration::from_secs(13)), 1);
        assert!(f.generation() > g, "a removal is a change");
        assert!(f.is_empty());
    }

    #[test]
    fn never_learns_group_addresses() {
        let mut f = Fdb::new(16, DEFAULT_AGING);
        assert!(!f.learn(1, EthernetAddress::BROADCAST, PortId(1), Instant::now()));
        assert!(!f.learn(
            1,
            EthernetAddress([1, 0, 0x5e, 0, 0, 1]),
            PortId(1),
            Instant::now()
        ));
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn bounded_and_flushable() {
        let now = Instant::now();
        let mut f = Fdb::new(2, DEFAULT_AGING);
        f.learn(1, mac(1), PortId(1), now);
        f.learn(1, mac(2), PortId(2), now);
        assert!(!f.learn(1, mac(3), PortId(1), now));
        assert_eq!(f.full_misses(), 1);
        assert_eq!(f.flush_port(PortId(1)), 1);
        assert_eq!(f.lookup(1, mac(1), now), None);
        let e = f.entries(now);
        assert_eq!(
            e,
            vec![FdbEntry {
                vid: 1,
                mac: mac(2),
                port: PortId(2),
                age_secs: 0,
                remote: None,
            }]
        );
    }

    #[test]
    fn remote_vteps_are_learned_moved_and_aged_with_the_address() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, Duration::from_secs(10));
        let (a, b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
        assert!(f.learn_remote(1, mac(1), PortId(3), a, t0));
        assert_eq!(f.lookup(1, mac(1), t0), Some(PortId(3)));
        assert_eq!(f.remote(1, mac(1), t0), Some(a));
        let g = f.generation();
        assert!(!f.learn_remote(1, mac(1), PortId(3), a, t0), "a refresh");
        assert!(
            !f.learn(1, mac(1), PortId(3), t0),
            "the decision's own learning keeps the VTEP"
        );
        assert_eq!((f.generation(), f.remote(1, mac(1), t0)), (g, Some(a)));
        assert!(
            f.learn_remote(1, mac(1), PortId(3), b, t0),
            "moved to another VTEP"
        );
        assert!(f.generation() > g);
        assert_eq!(f.remote(1, mac(1), t0), Some(b));
        assert_eq!(f.entries(t0)[0].remote, Some(b));
        assert!(
            f.learn(1, mac(1), PortId(4), t0),
            "moved off the VXLAN port"
        );
        assert_eq!(f.remote(1, mac(1), t0), None);
        f.learn_remote(1, mac(2), PortId(3), a, t0);
        assert_eq!(
            f.remote(1, mac(2), t0 + Duration::from_secs(11)),
            None,
            "aged"
        );
        assert_eq!(f.age(t0 + Duration::from_secs(11)), 2);
    }
}
