//! The learning forwarding database: (VLAN, MAC) -> port, with aging.
//!
//! Time is an input: every call that needs the clock takes `now`. The table
//! has a fixed capacity reserved up front, so learning never allocates on
//! the data path; when full, new addresses are not learned (their frames
//! are flooded) and `full_misses` counts it.
//!
//! # What a port cannot do to the others
//!
//! A tenant chooses the source addresses of its frames, so the table is
//! shared with rules no port can turn against another:
//!
//! - **A limit per port.** A port learns at most its limit of addresses
//!   (the switch's `fdb_port_limit`, or the port's `fdb_limit`). Past it, a
//!   new address of the port is not learned, nor is an address of another
//!   port moved to it: its frames are still forwarded (replies to them
//!   flood), and the caller counts the refusal ([`Learned::PortLimit`]).
//! - **No eviction.** Nothing is ever removed to make room: an entry goes
//!   only when it ages out, when its port goes away or is reset, or when its
//!   address is seen on another port under its limit. However many
//!   addresses a port sends, the other ports' entries stay.
//! - **A reserve for newcomers.** The last eighth of the capacity is kept
//!   for ports' first [`FIRST_ADDRESSES`]: once the table holds the rest, a
//!   port learns a new address only while it holds fewer than that. With
//!   the table otherwise full (many ports at their limits), a new tenant
//!   still gets its first addresses learned, as long as fewer than
//!   `capacity / 8 / FIRST_ADDRESSES` ports (256 with the default 8192
//!   entries) took theirs from the reserve.
//! - **A keyed hash.** The table hashes with foldhash under a random seed
//!   ([`RandomState`]): without the seed, a tenant cannot craft addresses
//!   that fall in one bucket and make every lookup walk a long probe chain.
//!   foldhash's quality hasher, not its fast one: the fast hasher folds a
//!   key in one multiply, and under about one process seed in eight its low
//!   bits (the bucket) collapse for addresses that differ in two bytes
//!   (4,096 such addresses in as few as 712 of 16,384 buckets, over 300
//!   processes); the second fold mixes them back (3,555 or more over the
//!   same 300). Not SipHash: a key is one word,
//!   which foldhash folds in two multiplies while SipHash takes about a
//!   hundred instructions. A steady flow hashes only when its remembered
//!   decision lapses (`datapath/classify.rs`); a frame whose source moves
//!   between ports (a loop, a migrated VM, the anchor harness's `lat` echo)
//!   hashes twice: learning, then its destination's lookup. The seed is
//!   the process's and the table's own, as Linux's bridge seeds its jhash;
//!   what bounds a tenant who would learn it by timing is the per-port
//!   limit above, not the hash.
//! - **A limit per VTEP.** Behind a VXLAN port, each remote VTEP learns
//!   at most its own limit (`vtep_fdb_limit`), so one peer cannot use up
//!   the port's limit for the others.
//!
//! # Moves: who may take an address another port holds
//!
//! A tenant (or a peer on the underlay) can send with a neighbour's
//! address. On a Linux bridge one such frame moves the address and the
//! neighbour's traffic goes to the sender until the neighbour speaks
//! again. Here an address held by a port that is still sending from it
//! (seen within the rule's `quiet` time, 1 s by default) moves only when:
//!
//! - the claimant is a local port (any kind but VXLAN) and the frame is an
//!   announce (ARP or RARP: what a VM sends when it arrives after a live
//!   migration), or the holder is a remote VTEP (a VM that migrated here);
//! - never to a VTEP: an address held by a local port moves behind a VTEP
//!   only once the local port has been quiet on it for `quiet` (a VM that
//!   migrated away is paused there: its announces and traffic from the new
//!   host take the address at most `quiet` after its last frame here).
//!
//! A refused move forwards the frame but leaves the address where it is
//! ([`Learned::Kept`]). A move the old holder contests (it claims the
//! address back while the new holder is sending, within `hold` of the
//! move) is a flap: the address goes back to the old holder and stays
//! there for `hold` (60 s by default) whatever anyone else sends
//! ([`Learned::Flapped`]: the caller counts it and names both ports). A
//! quiet holder gives the address up to anyone. `quiet` zero is the
//! plain learning bridge: every frame moves its source.

use crate::wire::EthernetAddress;
use crate::PortId;
use foldhash::quality::RandomState;
use std::collections::hash_map::Entry::{Occupied, Vacant};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Default aging time, as in most bridges (Linux, OVS): 300 s.
pub const DEFAULT_AGING: Duration = Duration::from_secs(300);

/// Default number of addresses one port may have learned (per worker): a
/// host behind a vNIC has one or a few; a port to a LAN (an uplink, a
/// guest that bridges) needs a larger `fdb_limit`.
pub const DEFAULT_PORT_LIMIT: u32 = 1024;

/// Addresses of a port that may be learned into the reserve (see the module).
pub const FIRST_ADDRESSES: u32 = 4;

/// Ports whose counts are reserved up front (more grow the count table).
const PORTS_RESERVED: usize = 256;

/// The rule for moves between ports (see the module's "Moves").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mobility {
    /// A holder that has not sent from an address for this long gives it
    /// up to any claimant; zero: every frame moves its source.
    pub quiet: Duration,
    /// How long a flapping address stays with its holder (and how long
    /// after a move the old holder may contest it).
    pub hold: Duration,
}

impl Default for Mobility {
    fn default() -> Self {
        Self {
            quiet: Duration::from_secs(1),
            hold: Duration::from_secs(60),
        }
    }
}

/// Where an address is: a port, and behind a VXLAN port the VTEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The port.
    pub port: PortId,
    /// The remote VTEP, for a VXLAN port.
    pub remote: Option<Ipv4Addr>,
}

impl Place {
    /// A local port (or a VXLAN port when the VTEP does not matter).
    pub fn port(port: PortId) -> Self {
        Self { port, remote: None }
    }
}

/// The limits a claimant learns under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The port's limit (`None`: the table's default).
    pub port: Option<u32>,
    /// Behind a VXLAN port: the limit of each VTEP (`None`: none).
    pub vtep: Option<u32>,
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
    /// Where the address was before its last move, and when it moved.
    before: Option<Place>,
    moved: Instant,
    /// Held where it is until `moved + hold` (a flap was caught).
    held: bool,
}

impl Entry {
    fn new(at: Place, now: Instant) -> Self {
        Self {
            port: at.port,
            seen: now,
            remote: at.remote,
            before: None,
            moved: now,
            held: false,
        }
    }

    fn place(&self) -> Place {
        Place {
            port: self.port,
            remote: self.remote,
        }
    }
}

/// What the rule says of a claim on a live address held elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Move,
    Keep,
    Flap,
}

impl Mobility {
    fn verdict(&self, e: &Entry, at: Place, announce: bool, now: Instant) -> Verdict {
        let since_move = now.saturating_duration_since(e.moved);
        if e.held && since_move < self.hold {
            return Verdict::Keep;
        }
        let quiet = now.saturating_duration_since(e.seen) >= self.quiet;
        let to_local = at.remote.is_none();
        let from_remote = e.remote.is_some();
        if quiet || (to_local && (announce || from_remote)) {
            Verdict::Move
        } else if e.before == Some(at) && since_move < self.hold {
            Verdict::Flap
        } else {
            Verdict::Keep
        }
    }
}

/// What [`Fdb::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Known on this port already: its age was reset.
    Refreshed,
    /// Added, or moved from another port: lookups may answer differently.
    Changed,
    /// Not learned: the port holds as many addresses as its limit allows.
    PortLimit,
    /// Not learned: the table is full (or only the reserve is left and the
    /// port has its first addresses).
    Full,
    /// A group address: never learned.
    Group,
    /// Not moved: another port holds the address and is still sending
    /// from it (see the module's "Moves"). The frame is forwarded.
    Kept,
    /// Moved back to this port, which held it before a move it contested:
    /// the address stays here for the rule's `hold`.
    Flapped {
        /// The port that had taken it.
        from: PortId,
    },
}

impl Learned {
    /// True when the address is in the table, on the given port, now.
    pub fn is_learned(self) -> bool {
        matches!(
            self,
            Learned::Refreshed | Learned::Changed | Learned::Flapped { .. }
        )
    }
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
    map: HashMap<u64, Entry, RandomState>,
    /// Entries per port. A port's count stays, at zero too, until the port
    /// is flushed: an address that moves back and forth between two ports
    /// (a loop, or an echo) only counts.
    per_port: HashMap<PortId, u32, RandomState>,
    /// Entries per remote VTEP (every VXLAN port's together: a VTEP is
    /// one host whichever VNI it speaks).
    per_vtep: HashMap<Ipv4Addr, u32, RandomState>,
    mobility: Mobility,
    capacity: usize,
    /// Entries beyond which only a port's first addresses are learned.
    open: usize,
    port_limit: u32,
    aging: Duration,
    full_misses: u64,
    /// Counts changes that can alter a lookup's answer (an address added,
    /// moved or removed): a decision remembered at one generation holds
    /// while the generation (and the time) stay the same.
    generation: u64,
}

impl Fdb {
    /// A table of at most `capacity` entries that forgets an address
    /// `aging` after it was last seen; each port may learn
    /// [`DEFAULT_PORT_LIMIT`] addresses unless told otherwise.
    pub fn new(capacity: usize, aging: Duration) -> Self {
        let mut map = HashMap::with_hasher(RandomState::default());
        map.reserve(capacity);
        let mut per_port = HashMap::with_hasher(RandomState::default());
        per_port.reserve(PORTS_RESERVED);
        let mut per_vtep = HashMap::with_hasher(RandomState::default());
        per_vtep.reserve(crate::port::vxlan::MAX_REMOTES);
        Self {
            map,
            per_port,
            per_vtep,
            mobility: Mobility::default(),
            capacity,
            open: capacity - capacity / 8,
            port_limit: DEFAULT_PORT_LIMIT,
            aging,
            full_misses: 0,
            generation: 0,
        }
    }

    /// Sets the number of addresses a port may learn when its policy sets none.
    pub fn with_port_limit(mut self, limit: u32) -> Self {
        self.port_limit = limit;
        self
    }

    /// The number of addresses a port may learn when its policy sets none.
    pub fn port_limit(&self) -> u32 {
        self.port_limit
    }

    /// Sets the rule for moves between ports.
    pub fn with_mobility(mut self, mobility: Mobility) -> Self {
        self.mobility = mobility;
        self
    }

    /// Records that `mac` on `vid` was seen on local `port` at `now` in a
    /// frame that is not an announce; a known address that moved is
    /// re-pointed under the rule (see [`Fdb::learn_at`]). `limit` is the
    /// port's own limit (`None`: the table's default).
    pub fn learn(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        limit: Option<u32>,
        now: Instant,
    ) -> Learned {
        let limits = Limits {
            port: limit,
            vtep: None,
        };
        self.learn_at(vid, mac, Place::port(port), false, limits, now)
    }

    /// Records what another worker learned of a frame it forwarded here
    /// (`datapath/peers.rs`): the limits and the rule for moves were
    /// applied there, so the address goes where it says.
    pub fn learn_told(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        now: Instant,
    ) -> Learned {
        let plain = Mobility {
            quiet: Duration::ZERO,
            hold: Duration::ZERO,
        };
        let rule = std::mem::replace(&mut self.mobility, plain);
        let learned = self.learn(vid, mac, port, Some(u32::MAX), now);
        self.mobility = rule;
        learned
    }

    /// Like [`Fdb::learn`], for an address seen behind remote VTEP
    /// `remote` on (VXLAN) port `port`: a new VTEP is a move too.
    pub fn learn_remote(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        port: PortId,
        limits: Limits,
        remote: Ipv4Addr,
        now: Instant,
    ) -> Learned {
        let at = Place {
            port,
            remote: Some(remote),
        };
        self.learn_at(vid, mac, at, false, limits, now)
    }

    /// Records that `mac` on `vid` was seen at `at` (`announce`: in an ARP
    /// or RARP frame) at `now`, under the limits and the rule for moves
    /// (see the module). A claim without a VTEP on the port that holds the
    /// address refreshes it, whatever VTEP it is behind.
    pub fn learn_at(
        &mut self,
        vid: u16,
        mac: EthernetAddress,
        at: Place,
        announce: bool,
        limits: Limits,
        now: Instant,
    ) -> Learned {
        if mac.is_multicast() {
            return Learned::Group;
        }
        let len = self.map.len();
        let (aging, rule) = (self.aging, self.mobility);
        // One lookup of the address, whether it is known here, moves or is new.
        let e = match self.map.entry(key(vid, mac)) {
            // The common case, a known address on its own port, touches only its entry.
            Occupied(mut o)
                if o.get().port == at.port
                    && (at.remote.is_none() || o.get().remote == at.remote) =>
            {
                o.get_mut().seen = now;
                return Learned::Refreshed;
            }
            Occupied(o) => o.into_mut(),
            Vacant(v) => {
                if !room(&self.per_port, &self.per_vtep, at, limits, self.port_limit) {
                    return Learned::PortLimit;
                }
                if len >= self.capacity
                    || (len >= self.open && count(&self.per_port, at.port) >= FIRST_ADDRESSES)
                {
                    self.full_misses += 1;
                    return Learned::Full;
                }
                v.insert(Entry::new(at, now));
                add(&mut self.per_port, &mut self.per_vtep, at);
                self.generation += 1;
                return Learned::Changed;
            }
        };
        // A move: from another port, or from another VTEP of the same port.
        let live = now.saturating_duration_since(e.seen) <= aging;
        let verdict = match live {
            true => rule.verdict(e, at, announce, now),
            false => Verdict::Move,
        };
        if verdict == Verdict::Keep {
            return Learned::Kept;
        }
        if !room(&self.per_port, &self.per_vtep, at, limits, self.port_limit) {
            return Learned::PortLimit;
        }
        let old = e.place();
        *e = Entry {
            before: live.then_some(old),
            held: verdict == Verdict::Flap,
            ..Entry::new(at, now)
        };
        remove(&mut self.per_port, &mut self.per_vtep, old);
        add(&mut self.per_port, &mut self.per_vtep, at);
        self.generation += 1;
        match verdict {
            Verdict::Flap => Learned::Flapped { from: old.port },
            _ => Learned::Changed,
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
        let (per_port, per_vtep) = (&mut self.per_port, &mut self.per_vtep);
        self.map.retain(|_, e| {
            let keep = now.saturating_duration_since(e.seen) <= aging;
            if !keep {
                remove(per_port, per_vtep, e.place());
            }
            keep
        });
        self.changed(before)
    }

    /// Forgets every address learned on `port` (the port went away or was reset).
    pub fn flush_port(&mut self, port: PortId) -> usize {
        let before = self.map.len();
        let per_vtep = &mut self.per_vtep;
        self.map.retain(|_, e| {
            if e.port != port {
                return true;
            }
            if let Some(n) = e.remote.and_then(|r| per_vtep.get_mut(&r)) {
                *n -= 1;
            }
            false
        });
        self.per_port.remove(&port);
        // Nobody may contest a move from a port that is gone.
        for e in self.map.values_mut() {
            if e.before.is_some_and(|b| b.port == port) {
                e.before = None;
            }
        }
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

    /// Entries learned on `port`.
    pub fn port_len(&self, port: PortId) -> u32 {
        count(&self.per_port, port)
    }

    /// Entries learned behind remote VTEP `vtep`.
    pub fn vtep_len(&self, vtep: Ipv4Addr) -> u32 {
        count(&self.per_vtep, vtep)
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

/// A count of entries by port or by VTEP.
type Counts<K> = HashMap<K, u32, RandomState>;

fn count<K: std::hash::Hash + Eq>(counts: &Counts<K>, k: K) -> u32 {
    counts.get(&k).copied().unwrap_or(0)
}

/// Whether `at` may hold one more address under `limits`.
fn room(
    per_port: &Counts<PortId>,
    per_vtep: &Counts<Ipv4Addr>,
    at: Place,
    limits: Limits,
    default: u32,
) -> bool {
    count(per_port, at.port) < limits.port.unwrap_or(default)
        && match (at.remote, limits.vtep) {
            (Some(r), Some(limit)) => count(per_vtep, r) < limit,
            _ => true,
        }
}

/// Counts one more entry at `at`.
fn add(per_port: &mut Counts<PortId>, per_vtep: &mut Counts<Ipv4Addr>, at: Place) {
    *per_port.entry(at.port).or_insert(0) += 1;
    if let Some(r) = at.remote {
        *per_vtep.entry(r).or_insert(0) += 1;
    }
}

/// Takes one entry off `at`'s counts.
fn remove(per_port: &mut Counts<PortId>, per_vtep: &mut Counts<Ipv4Addr>, at: Place) {
    if let Some(n) = per_port.get_mut(&at.port) {
        *n -= 1;
    }
    if let Some(n) = at.remote.and_then(|r| per_vtep.get_mut(&r)) {
        *n -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    /// The `i`-th of many distinct unicast addresses an attacker might send.
    fn many(i: u32) -> EthernetAddress {
        let b = i.to_be_bytes();
        EthernetAddress([2, 0xaa, b[0], b[1], b[2], b[3]])
    }

    #[test]
    fn learns_moves_and_ages() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, Duration::from_secs(10));
        assert_eq!(f.learn(1, mac(1), PortId(1), None, t0), Learned::Changed);
        assert_eq!(f.learn(1, mac(1), PortId(1), None, t0), Learned::Refreshed);
        assert_eq!(f.lookup(1, mac(1), t0), Some(PortId(1)));
        assert_eq!(f.lookup(2, mac(1), t0), None, "VLANs are separate tables");
        assert_eq!(
            f.learn(1, mac(1), PortId(2), None, t0 + Duration::from_secs(1)),
            Learned::Changed,
            "a move is a change"
        );
        assert_eq!((f.port_len(PortId(1)), f.port_len(PortId(2))), (0, 1));
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
        assert_eq!(
            f.learn(1, mac(1), PortId(2), None, t0 + Duration::from_secs(2)),
            Learned::Refreshed
        );
        assert_eq!(f.generation(), g, "a refresh is not a change");
        assert_eq!(f.age(t0 + Duration::from_secs(13)), 1);
        assert!(f.generation() > g, "a removal is a change");
        assert!(f.is_empty());
        assert_eq!(f.port_len(PortId(2)), 0, "aging uncounts");
    }

    /// A table whose every frame moves its source (`quiet` zero): the
    /// plain learning bridge the counting rules are shown on.
    fn plain(capacity: usize, aging: Duration) -> Fdb {
        Fdb::new(capacity, aging).with_mobility(Mobility {
            quiet: Duration::ZERO,
            hold: Duration::ZERO,
        })
    }

    #[test]
    fn an_address_moving_back_and_forth_counts_once_where_it_is() {
        let now = Instant::now();
        let mut f = plain(16, DEFAULT_AGING);
        for k in 0..10 {
            let (to, from) = if k % 2 == 0 { (1, 2) } else { (2, 1) };
            let g = f.generation();
            assert_eq!(f.learn(1, mac(1), PortId(to), None, now), Learned::Changed);
            assert!(f.generation() > g, "move {k} is a change");
            assert_eq!((f.port_len(PortId(to)), f.port_len(PortId(from))), (1, 0));
        }
        assert_eq!(f.len(), 1);
        // A port that may learn nothing takes no move, counted or not.
        assert_eq!(
            f.learn(1, mac(1), PortId(1), Some(0), now),
            Learned::PortLimit
        );
        assert_eq!(
            f.learn(1, mac(1), PortId(7), Some(0), now),
            Learned::PortLimit
        );
        assert_eq!(f.lookup(1, mac(1), now), Some(PortId(2)));
        // A flushed port's count is gone with its addresses.
        assert_eq!(f.flush_port(PortId(2)), 1);
        assert_eq!((f.port_len(PortId(1)), f.port_len(PortId(2))), (0, 0));
    }

    #[test]
    fn never_learns_group_addresses() {
        let mut f = Fdb::new(16, DEFAULT_AGING);
        let now = Instant::now();
        let group = EthernetAddress([1, 0, 0x5e, 0, 0, 1]);
        for m in [EthernetAddress::BROADCAST, group] {
            assert_eq!(f.learn(1, m, PortId(1), None, now), Learned::Group);
        }
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn bounded_and_flushable() {
        let now = Instant::now();
        let mut f = Fdb::new(2, DEFAULT_AGING);
        f.learn(1, mac(1), PortId(1), None, now);
        f.learn(1, mac(2), PortId(2), None, now);
        assert_eq!(f.learn(1, mac(3), PortId(1), None, now), Learned::Full);
        assert_eq!(f.full_misses(), 1);
        assert_eq!(f.flush_port(PortId(1)), 1);
        assert_eq!(f.port_len(PortId(1)), 0);
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

    /// A port at its limit learns nothing new and takes no address from
    /// another port; the others learn on; a flush makes room again.
    #[test]
    fn a_port_learns_at_most_its_limit() {
        let now = Instant::now();
        let mut f = plain(8192, DEFAULT_AGING).with_port_limit(100);
        let attacker = PortId(1);
        let mut refused = 0;
        for i in 0..10_000 {
            if f.learn(1, many(i), attacker, None, now) == Learned::PortLimit {
                refused += 1;
            }
        }
        assert_eq!(f.port_len(attacker), 100);
        assert_eq!(refused, 10_000 - 100, "every refusal is reported");
        assert_eq!(f.full_misses(), 0, "the table never filled");
        // Known addresses still refresh at the limit.
        assert_eq!(f.learn(1, many(0), attacker, None, now), Learned::Refreshed);
        // Others learn; a victim's address does not move to the full port.
        assert_eq!(f.learn(1, mac(2), PortId(2), None, now), Learned::Changed);
        assert_eq!(f.learn(1, mac(2), attacker, None, now), Learned::PortLimit);
        assert_eq!(f.lookup(1, mac(2), now), Some(PortId(2)));
        // A port's own limit overrides the default.
        for i in 0..300 {
            f.learn(1, many(100_000 + i), PortId(3), Some(200), now);
        }
        assert_eq!(f.port_len(PortId(3)), 200);
        assert_eq!(f.flush_port(attacker), 100);
        assert_eq!(
            f.learn(1, many(20_000), attacker, None, now),
            Learned::Changed
        );
    }

    /// Ports at their limits fill the table: they evict nobody, and a new
    /// port still gets its first addresses learned from the reserve.
    #[test]
    fn a_full_table_keeps_others_and_takes_newcomers() {
        let now = Instant::now();
        let mut f = Fdb::new(1024, DEFAULT_AGING).with_port_limit(200);
        // A victim learned early.
        assert_eq!(f.learn(1, mac(1), PortId(100), None, now), Learned::Changed);
        // Eight attacking ports send thousands of addresses each.
        let mut n = 0;
        for p in 1..=8 {
            for _ in 0..2000 {
                f.learn(1, many(n), PortId(p), None, now);
                n += 1;
            }
        }
        // Ports 1-4 took their 200, port 5 the rest up to the reserve, and
        // ports 6-8, new when only the reserve was left, their first addresses.
        assert_eq!(f.len(), 1024 - 1024 / 8 + 3 * FIRST_ADDRESSES as usize);
        assert_eq!(f.port_len(PortId(5)), 896 - 801);
        assert_eq!(f.port_len(PortId(8)), FIRST_ADDRESSES);
        assert_eq!(f.lookup(1, mac(1), now), Some(PortId(100)), "not evicted");
        // Newcomers: their first addresses go into the reserve, no more.
        for p in 200..210 {
            for i in 0..FIRST_ADDRESSES {
                assert_eq!(
                    f.learn(1, many(1_000_000 + p * 10 + i), PortId(p), None, now),
                    Learned::Changed,
                    "port {p}, address {i}"
                );
            }
            assert_eq!(
                f.learn(1, many(2_000_000 + p), PortId(p), None, now),
                Learned::Full
            );
        }
        // The attackers' ports cannot take more of the reserve.
        assert_eq!(
            f.learn(1, many(n), PortId(1), None, now),
            Learned::PortLimit
        );
        assert_eq!(f.learn(1, many(n), PortId(5), None, now), Learned::Full);
        assert_eq!(f.learn(1, many(n), PortId(8), None, now), Learned::Full);
        assert_eq!(f.lookup(1, mac(1), now), Some(PortId(100)));
    }

    /// Addresses that differ only in their high bytes all fell in one bucket
    /// under the former unkeyed multiplicative hash (the low bits of a
    /// product depend only on the low bits of its factors), making lookups
    /// walk one probe chain. Under the keyed hash they spread.
    #[test]
    fn crafted_addresses_spread_over_buckets() {
        let f = Fdb::new(8192, DEFAULT_AGING);
        let mut buckets = std::collections::HashSet::new();
        for i in 0..4096u32 {
            let b = i.to_be_bytes();
            let k = key(1, EthernetAddress([2, b[2], b[3], 0, 0, 7]));
            buckets.insert(f.map.hasher().hash_one(k) & 0x3fff);
        }
        assert!(
            buckets.len() > 3000,
            "{} buckets for 4096 keys",
            buckets.len()
        );
        // And the key is the table's own: another table hashes differently.
        let g = Fdb::new(8192, DEFAULT_AGING);
        let k = key(1, mac(1));
        assert_ne!(f.map.hasher().hash_one(k), g.map.hasher().hash_one(k));
    }

    #[test]
    fn remote_vteps_are_learned_moved_and_aged_with_the_address() {
        let t0 = Instant::now();
        let mut f = plain(16, Duration::from_secs(10));
        let (a, b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(
            f.learn_remote(1, mac(1), PortId(3), Limits::default(), a, t0),
            Learned::Changed
        );
        assert_eq!(f.lookup(1, mac(1), t0), Some(PortId(3)));
        assert_eq!(f.remote(1, mac(1), t0), Some(a));
        let g = f.generation();
        assert_eq!(
            f.learn_remote(1, mac(1), PortId(3), Limits::default(), a, t0),
            Learned::Refreshed,
            "a refresh"
        );
        assert_eq!(
            f.learn(1, mac(1), PortId(3), None, t0),
            Learned::Refreshed,
            "the decision's own learning keeps the VTEP"
        );
        assert_eq!((f.generation(), f.remote(1, mac(1), t0)), (g, Some(a)));
        assert_eq!(
            f.learn_remote(1, mac(1), PortId(3), Limits::default(), b, t0),
            Learned::Changed,
            "moved to another VTEP"
        );
        assert!(f.generation() > g);
        assert_eq!(f.remote(1, mac(1), t0), Some(b));
        assert_eq!(f.entries(t0)[0].remote, Some(b));
        assert_eq!(
            f.learn(1, mac(1), PortId(4), None, t0),
            Learned::Changed,
            "moved off the VXLAN port"
        );
        assert_eq!(f.remote(1, mac(1), t0), None);
        f.learn_remote(1, mac(2), PortId(3), Limits::default(), a, t0);
        assert_eq!(
            f.remote(1, mac(2), t0 + Duration::from_secs(11)),
            None,
            "aged"
        );
        assert_eq!(f.age(t0 + Duration::from_secs(11)), 2);
    }

    const V: PortId = PortId(1);
    const X: PortId = PortId(2);
    const VX: PortId = PortId(9);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn vtep(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, n)
    }

    fn claim(f: &mut Fdb, at: Place, announce: bool, now: Instant) -> Learned {
        f.learn_at(1, mac(1), at, announce, Limits::default(), now)
    }

    fn behind(r: u8) -> Place {
        Place {
            port: VX,
            remote: Some(vtep(r)),
        }
    }

    /// A port still sending from its address keeps it against another
    /// port's ordinary frames; once it has been quiet, anyone takes it.
    #[test]
    fn a_sending_holder_keeps_its_address() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, DEFAULT_AGING);
        assert_eq!(claim(&mut f, Place::port(V), false, t0), Learned::Changed);
        let g = f.generation();
        assert_eq!(
            claim(&mut f, Place::port(X), false, t0 + ms(10)),
            Learned::Kept
        );
        assert_eq!(f.generation(), g, "nothing changed");
        assert_eq!(
            claim(&mut f, Place::port(V), false, t0 + ms(500)),
            Learned::Refreshed
        );
        assert_eq!(
            claim(&mut f, Place::port(X), false, t0 + ms(1400)),
            Learned::Kept
        );
        assert_eq!(f.lookup(1, mac(1), t0 + ms(1400)), Some(V));
        // Quiet for the rule's second: the address moves.
        assert_eq!(
            claim(&mut f, Place::port(X), false, t0 + ms(1500)),
            Learned::Changed
        );
        assert_eq!(f.lookup(1, mac(1), t0 + ms(1500)), Some(X));
        assert_eq!((f.port_len(V), f.port_len(X)), (0, 1));
    }

    /// An announce (a VM arriving after a live migration) moves the
    /// address at once; the old holder claiming it back while the new one
    /// sends is a flap: the address goes back and is held for `hold`.
    #[test]
    fn an_announce_moves_at_once_and_a_contested_move_is_held_back() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, DEFAULT_AGING);
        claim(&mut f, Place::port(V), false, t0);
        assert_eq!(
            claim(&mut f, Place::port(X), true, t0 + ms(1)),
            Learned::Changed
        );
        assert_eq!(f.lookup(1, mac(1), t0 + ms(1)), Some(X));
        // A migrated VM's old place is paused: nothing contests. Here V
        // speaks again while X holds it: the move was a theft.
        assert_eq!(
            claim(&mut f, Place::port(V), false, t0 + ms(2)),
            Learned::Flapped { from: X }
        );
        assert_eq!(f.lookup(1, mac(1), t0 + ms(2)), Some(V));
        // Held: X's announces no longer move it, nor does V's silence.
        for k in [3, 5_000, 59_000] {
            assert_eq!(
                claim(&mut f, Place::port(X), true, t0 + ms(k)),
                Learned::Kept,
                "{k} ms"
            );
        }
        assert_eq!(f.lookup(1, mac(1), t0 + ms(59_000)), Some(V));
        // After the hold, the ordinary rule again.
        assert_eq!(
            claim(&mut f, Place::port(X), true, t0 + ms(62_003)),
            Learned::Changed
        );
        assert_eq!((f.port_len(V), f.port_len(X)), (0, 1));
    }

    /// A VTEP never takes an address a local port is sending from, not
    /// even with an announce; it takes it once the port has been quiet
    /// (a VM that migrated away is paused here).
    #[test]
    fn a_vtep_takes_a_local_address_only_once_it_is_quiet() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, DEFAULT_AGING);
        claim(&mut f, Place::port(V), false, t0);
        for announce in [false, true] {
            assert_eq!(
                claim(&mut f, behind(7), announce, t0 + ms(5)),
                Learned::Kept
            );
        }
        assert_eq!(f.lookup(1, mac(1), t0 + ms(5)), Some(V));
        assert_eq!(f.remote(1, mac(1), t0 + ms(5)), None);
        assert_eq!(
            claim(&mut f, behind(7), true, t0 + ms(1000)),
            Learned::Changed
        );
        assert_eq!(f.remote(1, mac(1), t0 + ms(1000)), Some(vtep(7)));
    }

    /// A local port takes an address from a VTEP at once (a VM that
    /// migrated here); the VTEP claiming it back while the port sends is
    /// a flap. Between two VTEPs, only a quiet one gives an address up.
    #[test]
    fn local_wins_over_remote_and_vteps_over_each_other_only_when_quiet() {
        let t0 = Instant::now();
        let mut f = Fdb::new(16, DEFAULT_AGING);
        claim(&mut f, behind(7), false, t0);
        assert_eq!(claim(&mut f, behind(8), true, t0 + ms(1)), Learned::Kept);
        assert_eq!(f.remote(1, mac(1), t0 + ms(1)), Some(vtep(7)));
        assert_eq!(
            claim(&mut f, Place::port(V), false, t0 + ms(2)),
            Learned::Changed
        );
        assert_eq!(
            claim(&mut f, behind(7), false, t0 + ms(3)),
            Learned::Flapped { from: V }
        );
        assert_eq!(f.remote(1, mac(1), t0 + ms(3)), Some(vtep(7)));
        assert_eq!(f.vtep_len(vtep(7)), 1);
        // The VXLAN port's own learning (no VTEP named) only refreshes.
        assert_eq!(
            claim(&mut f, Place::port(VX), false, t0 + ms(4)),
            Learned::Refreshed
        );
        // After the hold and a quiet second, another VTEP may take it.
        assert_eq!(
            claim(&mut f, behind(8), false, t0 + ms(61_000)),
            Learned::Changed
        );
        assert_eq!((f.vtep_len(vtep(7)), f.vtep_len(vtep(8))), (0, 1));
    }

    /// Each VTEP learns at most its own limit; the others still learn; a
    /// flushed VXLAN port gives its VTEPs' counts back.
    #[test]
    fn each_vtep_learns_at_most_its_limit() {
        let now = Instant::now();
        let mut f = Fdb::new(1024, DEFAULT_AGING);
        let limits = Limits {
            port: Some(300),
            vtep: Some(100),
        };
        let learn =
            |f: &mut Fdb, i: u32, r: u8| f.learn_at(1, many(i), behind(r), false, limits, now);
        let refused = (0..10_000).filter(|&i| learn(&mut f, i, 7) == Learned::PortLimit);
        assert_eq!(refused.count(), 10_000 - 100);
        assert_eq!(f.vtep_len(vtep(7)), 100);
        assert_eq!(
            learn(&mut f, 20_000, 8),
            Learned::Changed,
            "another VTEP learns"
        );
        assert_eq!(f.port_len(VX), 101);
        assert_eq!(f.flush_port(VX), 101);
        assert_eq!((f.vtep_len(vtep(7)), f.vtep_len(vtep(8))), (0, 0));
    }

    /// Another worker's word moves an address whatever the rule says.
    #[test]
    fn what_another_worker_learned_is_taken_as_told() {
        let now = Instant::now();
        let mut f = Fdb::new(16, DEFAULT_AGING);
        claim(&mut f, Place::port(V), false, now);
        assert_eq!(f.learn_told(1, mac(1), X, now), Learned::Changed);
        assert_eq!(f.lookup(1, mac(1), now), Some(X));
    }
}
