//! The FDB's own cost: nanoseconds per lookup (hit and miss) and per
//! refresh (learning a known address), on a table of N entries. The number
//! to watch when changing the FDB's hash or layout.
//!
//! `cargo run --release -p vnio-switch --example fdb_lookup [-- ENTRIES [LOOKUPS]]`

use std::hint::black_box;
use std::time::{Duration, Instant};
use vnio_switch::fdb::Fdb;
use vnio_switch::wire::EthernetAddress;
use vnio_switch::PortId;

/// A locally administered unicast MAC from a counter, spread like real ones.
fn mac(i: u64) -> EthernetAddress {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16;
    let b = x.to_be_bytes();
    EthernetAddress([0x02, b[3], b[4], b[5], b[6], b[7]])
}

/// The addresses a tenant would pick against an unkeyed multiplicative
/// hash: only the high bytes differ, so the low bits of the hash (the
/// bucket) are the same for all.
fn crafted(i: u64) -> EthernetAddress {
    let b = (i as u32).to_be_bytes();
    EthernetAddress([0x02, b[2], b[3], 0, 0, 7])
}

/// Median of 5 runs of `f` over `n` operations, in ns per operation.
fn per_op(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let mut v: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(i);
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let entries: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(4096);
    let lookups: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let now = Instant::now();
    let mut fdb = Fdb::new(8192, Duration::from_secs(300));
    // Spread over a few ports, each under any per-port limit.
    let ports = entries.div_ceil(512).max(1);
    for i in 0..entries {
        fdb.learn(1, mac(i), PortId((i % ports) as u32 + 1), None, now);
    }
    assert_eq!(fdb.len() as u64, entries, "every address learned");
    // A stride through the keys that is not the insertion order.
    let at = |i: u64| (i.wrapping_mul(7919)) % entries;
    let hit = per_op(lookups, |i| {
        black_box(fdb.lookup(1, black_box(mac(at(i))), now));
    });
    let miss = per_op(lookups, |i| {
        black_box(fdb.lookup(2, black_box(mac(at(i))), now));
    });
    let refresh = per_op(lookups, |i| {
        let k = at(i);
        black_box(fdb.learn(
            1,
            black_box(mac(k)),
            PortId((k % ports) as u32 + 1),
            None,
            now,
        ));
    });
    let base = per_op(lookups, |i| {
        black_box(mac(at(black_box(i))));
    });
    println!(
        "{entries} entries: lookup hit {hit:.1} ns, miss {miss:.1} ns, refresh {refresh:.1} ns (key making {base:.1} ns included)"
    );
    let mut bad = Fdb::new(8192, Duration::from_secs(300));
    for i in 0..entries {
        bad.learn(1, crafted(i), PortId((i % ports) as u32 + 1), None, now);
    }
    let crafted_hit = per_op(lookups / 100, |i| {
        black_box(bad.lookup(1, black_box(crafted(at(i))), now));
    });
    println!("{entries} crafted entries: lookup hit {crafted_hit:.1} ns");
    Ok(())
}
