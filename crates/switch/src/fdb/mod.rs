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
//!   key in one multiply, and under some process seeds its low bits (the
//!   bucket) collapse for addresses that differ in two bytes, packing them
//!   into a small fraction of the buckets; the second fold mixes them back.
//!   Not SipHash: a key is one word, which foldhash folds in two
//!   multiplies while SipHash runs its full rounds. A steady flow hashes
//!   only when its remembered decision lapses (`datapath/classify.rs`); a
//!   frame whose source moves between ports (a loop, a migrated VM, the
//!   anchor harness's `lat` echo) hashes twice: learning, then its
//!   destination's lookup. The seed is
//!   the process's and the table's own, as Linux's bridge seeds its jhash;
//!   what bounds a tenant who would learn it by timing is the per-port
//!   limit above, not the hash.
//! - **A limit per VTEP.** Behind a VXLAN port, each remote VTEP learns
//!   at most its own limit (`vtep_fdb_limit`), so one peer cannot use up
//!   the port's limit for the others.
//!
//! # Moves
//!
//! Who may take an address another port holds: [`moves`].

use crate::wire::EthernetAddress;
use crate::PortId;
use foldhash::quality::RandomState;
use std::collections::hash_map::Entry::{Occupied, Vacant};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

pub mod moves;
mod pinned;
use moves::Verdict;
pub use moves::{Mobility, Place};

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
    /// Installed by a control plane (EVPN): never ages, stays until
    /// withdrawn or claimed by a local port.
    pinned: bool,
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
            pinned: false,
        }
    }

    /// Whether the entry has aged out at `now`.
    fn expired(&self, now: Instant, aging: Duration) -> bool {
        !self.pinned && now.saturating_duration_since(self.seen) > aging
    }

    fn place(&self) -> Place {
        Place {
            port: self.port,
            remote: self.remote,
        }
    }
}

/// What [`Fdb::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// Known on this port already: its age was reset.
    Refreshed,
    /// Added (or taken over from an entry that had aged): lookups may
    /// answer differently.
    Changed,
    /// Moved from another port, or from behind another VTEP of this one,
    /// where it was still live: lookups answer differently.
    Moved {
        /// The port that held it.
        from: PortId,
    },
    /// Not learned: the port holds as many addresses as its limit allows.
    PortLimit,
    /// Not learned: the table is full (or only the reserve is left and the
    /// port has its first addresses).
    Full,
    /// A group address: never learned.
    Group,
    /// The port does not learn (EVPN: the control plane places addresses).
    Off,
    /// Not moved: another port holds the address and is still sending
    /// from it (see [`moves`]). The frame is forwarded.
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
            Learned::Refreshed | Learned::Changed | Learned::Moved { .. } | Learned::Flapped { .. }
        )
    }

    /// What learning the same source again, right after, would say: a
    /// change is done once (a remembered decision must not count a move
    /// or a flap for every frame of the flow).
    pub fn settled(self) -> Self {
        match self {
            Learned::Changed | Learned::Moved { .. } | Learned::Flapped { .. } => {
                Learned::Refreshed
            }
            other => other,
        }
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
        // An EVPN address is the control plane's: no frame behind a VTEP
        // moves it; a local port that sends from it takes it at once.
        if e.pinned && at.remote.is_some() {
            return Learned::Kept;
        }
        let live = !e.pinned && !e.expired(now, aging);
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
            _ if live => Learned::Moved { from: old.port },
            _ => Learned::Changed,
        }
    }

    /// The VTEP `mac` on `vid` is behind, when it was learned on a VXLAN
    /// port and has not aged out at `now`.
    pub fn remote(&self, vid: u16, mac: EthernetAddress, now: Instant) -> Option<Ipv4Addr> {
        let e = self.map.get(&key(vid, mac))?;
        if e.expired(now, self.aging) {
            return None;
        }
        e.remote
    }

    /// The port `mac` on `vid` lives on, unless unknown or aged out at `now`.
    pub fn lookup(&self, vid: u16, mac: EthernetAddress, now: Instant) -> Option<PortId> {
        let e = self.map.get(&key(vid, mac))?;
        if e.expired(now, self.aging) {
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
            let keep = !e.expired(now, aging);
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
mod tests;
