//! Unit tests of the FDB: learning, aging, limits, the keyed hash, VTEPs
//! and the rule for moves, with time passed in.

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
        Learned::Moved { from: PortId(1) },
        "a move of a live address names its holder"
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
        let said = f.learn(1, mac(1), PortId(to), None, now);
        let want = match k {
            0 => Learned::Changed,
            _ => Learned::Moved { from: PortId(from) },
        };
        assert_eq!(said, want, "move {k}");
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
        Learned::Moved { from: PortId(3) },
        "moved to another VTEP"
    );
    assert!(f.generation() > g);
    assert_eq!(f.remote(1, mac(1), t0), Some(b));
    assert_eq!(f.entries(t0)[0].remote, Some(b));
    assert_eq!(
        f.learn(1, mac(1), PortId(4), None, t0),
        Learned::Moved { from: PortId(3) },
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
        Learned::Moved { from: PortId(1) }
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
        Learned::Moved { from: PortId(1) }
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
        Learned::Moved { from: PortId(1) }
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
        Learned::Moved { from: PortId(1) }
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
        Learned::Moved { from: PortId(9) }
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
        Learned::Moved { from: PortId(9) }
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
    let learn = |f: &mut Fdb, i: u32, r: u8| f.learn_at(1, many(i), behind(r), false, limits, now);
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
    assert_eq!(
        f.learn_told(1, mac(1), X, now),
        Learned::Moved { from: PortId(1) }
    );
    assert_eq!(f.lookup(1, mac(1), now), Some(X));
}
