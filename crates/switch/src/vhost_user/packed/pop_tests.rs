//! Unit tests of popping a packed ring's chains (`pop.rs`): one by
//! one and in bursts (lines of four), indirect tables, hostile chains and
//! giving chains back; driven through `ActiveQueue` by the
//! driver of `tests.rs`.
use super::tests::{heads, pair, BUFS, F_WRITE, MEM, PLAIN};
use super::*;
use crate::vhost_user::chain::Chain;
use crate::vhost_user::queue::{Burst, BURST};
use vm_memory::Bytes;

#[test]
fn chains_by_next_across_the_end_of_the_ring() {
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    // Move both sides to slot 6.
    for id in 0..6 {
        d.offer_one(id, 64, 0);
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 0).unwrap();
    }
    q.flush();
    while d.reap().is_some() {}
    let bufs = [
        (BUFS, 12, 0),
        (BUFS + 0x1000, 100, 0),
        (BUFS + 0x2000, 200, 0),
    ];
    d.offer(&bufs, 5);
    let c = q.pop().unwrap().unwrap();
    assert_eq!(c.head(), 5, "the id is the last descriptor's");
    assert_eq!(
        c.segs().iter().map(|s| (s.addr, s.len)).collect::<Vec<_>>(),
        bufs.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>()
    );
    assert_eq!(c.len(), 312);
    assert_eq!(
        q.next_avail(),
        1,
        "slots 6, 7, 0: the wrap counter flipped to 0"
    );
    q.add_used(5, 0).unwrap();
    q.flush();
    assert_eq!(d.reap(), Some((5, 0)));
    assert_eq!(
        d.used, d.avail,
        "the used descriptor skipped the chain's three slots"
    );
    // Another chain is found right after it.
    d.offer_one(2, 64, 0);
    assert_eq!(q.pop().unwrap().unwrap().head(), 2);
}

#[test]
fn indirect_tables_are_walked_and_checked() {
    let features = PackedFeatures {
        indirect: true,
        ..PLAIN
    };
    let (mut q, mut d, _call) = pair(8, features, false);
    let table = BUFS + 0x8000;
    let entries = [(BUFS, 10u32), (BUFS + 0x1000, 20), (BUFS + 0x2000, 30)];
    for (k, &(addr, len)) in entries.iter().enumerate() {
        let e = GuestAddress(table + 16 * k as u64);
        d.mem.write_obj(addr, e).unwrap();
        d.mem.write_obj(len, GuestAddress(e.0 + 8)).unwrap();
        d.mem.write_obj(0u32, GuestAddress(e.0 + 12)).unwrap();
    }
    d.offer(&[(table, 48, F_INDIRECT)], 3);
    let c = q.pop().unwrap().unwrap();
    assert_eq!(c.head(), 3);
    assert_eq!(c.segs().len(), 3);
    assert_eq!(c.len(), 60);
    q.add_used(3, 0).unwrap();
    q.flush();
    assert_eq!(d.reap(), Some((3, 0)), "an indirect chain holds one slot");

    let bad = |table_addr: u64, len: u32, nested: bool| {
        let (mut q, mut d, _call) = pair(8, features, false);
        if nested {
            d.mem
                .write_obj(F_INDIRECT, GuestAddress(table + 16 + 14))
                .unwrap();
        }
        for (k, &(addr, l)) in entries.iter().enumerate() {
            let e = GuestAddress(table + 16 * k as u64);
            d.mem.write_obj(addr, e).unwrap();
            d.mem.write_obj(l, GuestAddress(e.0 + 8)).unwrap();
        }
        d.offer(&[(table_addr, len, F_INDIRECT)], 0);
        q.pop().unwrap_err()
    };
    assert_eq!(bad(table, 40, false), ChainError::IndirectTable(40));
    assert_eq!(bad(table, 0, false), ChainError::ZeroLength);
    assert!(matches!(
        bad(MEM - 16, 32, false),
        ChainError::OutOfMemory { .. }
    ));
    assert_eq!(bad(table, 48, true), ChainError::IndirectTable(48));
    // Without the feature, as on a split ring.
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    d.offer(&[(table, 48, F_INDIRECT)], 0);
    assert_eq!(q.pop().unwrap_err(), ChainError::Indirect);
}

#[test]
fn hostile_chains_get_the_split_rings_errors() {
    let one = |bufs: &[(u64, u32, u16)], id: u16, size: u16| {
        let (mut q, mut d, _call) = pair(size, PLAIN, false);
        d.offer(bufs, id);
        q.pop().unwrap_err()
    };
    assert_eq!(one(&[(BUFS, 0, 0)], 0, 8), ChainError::ZeroLength);
    assert!(matches!(
        one(&[(MEM - 16, 64, 0)], 0, 8),
        ChainError::OutOfMemory { .. }
    ));
    assert!(matches!(
        one(&[(1 << 40, 64, 0)], 0, 8),
        ChainError::OutOfMemory { .. }
    ));
    assert_eq!(
        one(&[(BUFS, 64, F_WRITE)], 0, 8),
        ChainError::WrongDirection
    );
    assert_eq!(one(&[(BUFS, 64, 0)], 8, 8), ChainError::IndexOutOfRange(8));
    let long = vec![(BUFS, 16, 0); 100];
    assert_eq!(one(&long, 0, 256), ChainError::TooLong);
    // Every slot says NEXT: the chain never ends.
    let (mut q, d, _call) = pair(8, PLAIN, false);
    for slot in 0..8 {
        d.put(slot, BUFS, 16, 0, F_NEXT | F_AVAIL);
    }
    assert_eq!(q.pop().unwrap_err(), ChainError::Loop);
    // A buffer id offered twice while in flight.
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    d.offer_one(1, 64, 0);
    d.offer_one(1, 64, 0);
    assert_eq!(q.pop().unwrap().unwrap().head(), 1);
    assert_eq!(q.pop().unwrap_err(), ChainError::IndexJump);
    // A used id that is not in flight.
    assert_eq!(
        q.add_used(2, 0).unwrap_err(),
        ChainError::IndexOutOfRange(2)
    );
}

#[test]
fn a_bad_chain_ends_a_burst_after_the_good_ones() {
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    d.offer_one(0, 64, 0);
    d.offer_one(1, 64, 0);
    d.offer(&[(BUFS, 0, 0)], 2);
    let mut b = Burst::new();
    assert_eq!(
        q.pop_burst(&mut b, BURST).unwrap_err(),
        ChainError::ZeroLength
    );
    assert_eq!(b.len(), 2);
}

#[test]
fn lines_of_four_and_single_chains_pop_alike_on_any_ring_size() {
    // 12 and 6 slots: not powers of two (a packed ring's size need not
    // be), so positions and pop counts wrap by hand; 6 leaves a line of
    // only two slots before the end.
    for size in [12u16, 6, 8] {
        let (mut q, mut d, _call) = pair(size, PLAIN, true);
        let mut b = Burst::new();
        let mut next = 0u16;
        // Bursts of 1, 5, 3, 4, ...: the lines of four begin anywhere.
        for round in 0..12u16 {
            let n = [1u16, 5, 3, 4][usize::from(round % 4)].min(size);
            let offered: Vec<u16> = (0..n).map(|k| (next + k) % size).collect();
            for &id in &offered {
                d.offer_one(id, 2000 + u32::from(id), F_WRITE);
            }
            next = (next + n) % size;
            q.pop_burst(&mut b, BURST).unwrap();
            assert_eq!(heads(&b), offered, "size {size}, round {round}");
            for k in 0..b.len() {
                let (id, segs, len) = b.chain(k);
                assert_eq!(segs.len(), 1);
                assert_eq!(segs[0].addr, BUFS + 2048 * u64::from(id));
                assert_eq!(len, 2000 + u64::from(id));
                q.add_used(id, 7).unwrap();
            }
            q.flush();
            for &id in &offered {
                assert_eq!(d.reap(), Some((id, 7)), "size {size}, round {round}");
            }
        }
        assert_eq!(q.next_avail(), d.avail.encode(), "size {size}");
    }
}

#[test]
fn a_line_of_four_with_a_chain_of_two_is_popped_one_by_one() {
    let (mut q, mut d, _call) = pair(16, PLAIN, false);
    d.offer_one(0, 64, 0);
    d.offer(&[(BUFS + 0x1000, 14, 0), (BUFS + 0x2000, 50, 0)], 1);
    d.offer_one(2, 64, 0);
    d.offer_one(3, 64, 0);
    d.offer_one(4, 64, 0);
    let mut b = Burst::new();
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(heads(&b), vec![0, 1, 2, 3, 4]);
    assert_eq!(b.chain(1).1.len(), 2);
    assert_eq!(b.chain(1).2, 64);
    // Given back across the line, popped again the same.
    q.unpop_n(4);
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(heads(&b), vec![1, 2, 3, 4]);
}

#[test]
fn a_fault_inside_a_line_of_four_ends_the_burst_at_its_chain() {
    // A buffer of no length third, then an id offered twice third.
    let cases: [(&[u16], u32, ChainError); 2] = [
        (&[0, 1, 2, 3], 2, ChainError::ZeroLength),
        (&[0, 1, 1, 3], 2, ChainError::IndexJump),
    ];
    for (ids, good, err) in cases {
        let (mut q, mut d, _call) = pair(8, PLAIN, false);
        for (k, &id) in ids.iter().enumerate() {
            let len = if k == 2 && err == ChainError::ZeroLength {
                0
            } else {
                64
            };
            d.offer(&[(BUFS + 2048 * u64::from(id), len, 0)], id);
        }
        let mut b = Burst::new();
        assert_eq!(q.pop_burst(&mut b, BURST).unwrap_err(), err);
        assert_eq!(b.len(), good as usize, "the good chains before it stay");
        assert_eq!(heads(&b), ids[..good as usize].to_vec());
    }
    // A buffer for the wrong direction in the line: refused at its chain.
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    for id in 0..4 {
        d.offer_one(id, 64, if id == 1 { F_WRITE } else { 0 });
    }
    let mut b = Burst::new();
    assert_eq!(
        q.pop_burst(&mut b, BURST).unwrap_err(),
        ChainError::WrongDirection
    );
    assert_eq!(heads(&b), vec![0]);
}

#[test]
fn reading_ahead_or_not_a_buffer_outside_memory_in_a_line_of_four_ends_the_burst() {
    // A transmit buffer is asked for only once it is known to be in guest
    // memory, whether the worker reads ahead or not.
    for read_ahead in [false, true] {
        let (mut q, mut d, _call) = pair(8, PLAIN, false);
        for id in 0..4u16 {
            let addr = if id == 2 {
                1u64 << 40
            } else {
                BUFS + 2048 * u64::from(id)
            };
            d.offer(&[(addr, 64, 0)], id);
        }
        let mut b = Burst::new();
        b.set_read_ahead(read_ahead);
        assert!(matches!(
            q.pop_burst(&mut b, BURST).unwrap_err(),
            ChainError::OutOfMemory { .. }
        ));
        assert_eq!(heads(&b), vec![0, 1], "the good chains before it stay");
    }
}

#[test]
fn an_id_in_flight_offered_again_in_a_line_of_four_is_refused_and_stays_in_flight() {
    let (mut q, mut d, _call) = pair(8, PLAIN, false);
    for id in 0..4 {
        d.offer_one(id, 64, 0);
    }
    let mut b = Burst::new();
    q.pop_burst(&mut b, 4).unwrap();
    assert_eq!(heads(&b), vec![0, 1, 2, 3]);
    // The next line offers id 2 again while it is in flight.
    for id in [4, 5, 2, 7] {
        d.offer_one(id, 64, 0);
    }
    assert_eq!(
        q.pop_burst(&mut b, BURST).unwrap_err(),
        ChainError::IndexJump
    );
    assert_eq!(heads(&b), vec![4, 5], "the good chains before it stay");
    // The refused line marked nothing and unmarked nothing: every chain
    // popped comes back once, and 7, never popped, does not.
    for id in [0, 1, 2, 3, 4, 5] {
        q.add_used(id, 0).unwrap();
    }
    assert_eq!(
        q.add_used(2, 0).unwrap_err(),
        ChainError::IndexOutOfRange(2)
    );
    assert_eq!(
        q.add_used(7, 0).unwrap_err(),
        ChainError::IndexOutOfRange(7)
    );
}

#[test]
fn bursts_give_back_and_take_again() {
    let (mut q, mut d, _call) = pair(8, PLAIN, true);
    for id in 0..5 {
        d.offer_one(id, 2048, F_WRITE);
    }
    let mut b = Burst::new();
    q.pop_burst(&mut b, 4).unwrap();
    assert_eq!(b.len(), 4, "no more than asked for");
    q.unpop_n(2);
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(
        (0..b.len()).map(|k| b.chain(k).0).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    q.unpop_n(3);
    // Taken ahead, given back across bursts, taken again in order.
    let mut c = Chain::new();
    assert!(q.take(&mut c, 2).unwrap());
    assert_eq!(c.head(), 2);
    q.add_used(2, 60).unwrap();
    assert!(q.take(&mut c, 2).unwrap());
    assert!(q.take(&mut c, 2).unwrap(), "a new burst");
    assert_eq!(c.head(), 4);
    q.untake(2);
    assert_eq!(q.next_avail(), 3 | 0x8000);
    assert!(q.take(&mut c, 8).unwrap());
    assert_eq!(c.head(), 3);
    // Stopping returns the chains popped ahead and not taken.
    assert_eq!(q.stop_state() & 0xffff, 4 | 0x8000);
}
