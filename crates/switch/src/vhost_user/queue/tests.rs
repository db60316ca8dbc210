//! Unit tests of [`super`] (queue/mod.rs).
use super::*;
use crate::endpoint::ring::{DriverRing, RingLayout};
use crate::stats::QueueStats;
use crate::vhost_user::protocol::MemoryRegion;
use std::io::Read;
use std::sync::atomic::Ordering;
use vm_memory::{Bytes, GuestMemoryMmap};

const SIZE: u16 = 8;

/// Device and driver sides of one queue over the same memfd.
fn pair(event_idx: bool, writable: bool) -> (ActiveQueue, DriverRing, GuestMemoryMmap, File) {
    let layout = RingLayout::at(0, SIZE, 256);
    let size = layout.end().div_ceil(4096) * 4096;
    let f = crate::sys::memfd::create("queue-test", size).unwrap();
    let driver_mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
        GuestAddress(0),
        size as usize,
        Some(vm_memory::FileOffset::new(f.try_clone().unwrap(), 0)),
    )])
    .unwrap();
    let region = MemoryRegion {
        guest_phys_addr: 0,
        memory_size: size,
        userspace_addr: 0,
        mmap_offset: 0,
    };
    let dev_mem = Arc::new(
        GuestMem::from_table(
            vec![(region, f.try_clone().unwrap())],
            crate::vhost_user::memory::DEFAULT_MAX_MEMORY,
        )
        .unwrap(),
    );
    let ring = DriverRing::new(&driver_mem, layout, event_idx).expect("ring inside memory");
    let call = crate::sys::memfd::create("not-an-eventfd", 0).unwrap();
    let addrs = addrs_of(&layout);
    let q = ActiveQueue::start(
        dev_mem,
        SIZE,
        addrs,
        0,
        event_idx,
        Some(call.try_clone().unwrap()),
        writable,
    )
    .unwrap();
    (q, ring, driver_mem, call)
}

/// Where the driver's rings of `layout` are, as the front-end says it.
fn addrs_of(layout: &RingLayout) -> RingAddrs {
    RingAddrs {
        desc: GuestAddress(layout.desc),
        avail: GuestAddress(layout.avail),
        used: GuestAddress(layout.used),
    }
}

/// The driver offers a 64-byte chain; the device pops and uses it (not
/// published yet).
fn use_one(q: &mut ActiveQueue, ring: &mut DriverRing) {
    let id = ring.take().unwrap();
    ring.publish(id, 64, false);
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 0).unwrap();
}

fn calls(f: &File) -> u64 {
    // The stand-in for the call eventfd is a plain file: each signal appends 8 bytes.
    let mut v = Vec::new();
    let mut r = f.try_clone().unwrap();
    std::io::Seek::rewind(&mut r).unwrap();
    r.read_to_end(&mut v).unwrap();
    v.len() as u64 / 8
}

#[test]
fn pop_use_and_reap_round_trip() {
    let (mut q, mut ring, _, _call) = pair(false, false);
    assert!(q.pop().unwrap().is_none(), "nothing offered yet");
    for len in [60u32, 61, 62] {
        let id = ring.take().unwrap();
        ring.publish(id, len, false);
    }
    assert!(q.has_available().unwrap());
    let mut heads = Vec::new();
    while let Some(c) = q.pop().unwrap() {
        heads.push((c.head(), c.len()));
        q.add_used(c.head(), 0).unwrap();
    }
    assert_eq!(
        heads.iter().map(|h| h.1).collect::<Vec<_>>(),
        vec![60, 61, 62]
    );
    assert_eq!(q.next_avail(), 3);
    assert!(
        ring.reap().is_none(),
        "used elements are published per batch"
    );
    q.flush();
    let mut reaped = Vec::new();
    while let Some((id, _)) = ring.reap() {
        reaped.push(id);
        ring.release(id);
    }
    assert_eq!(reaped, heads.iter().map(|h| h.0).collect::<Vec<_>>());
}

#[test]
fn bursts_pop_in_order_up_to_the_limit_and_give_back() {
    let (mut q, mut ring, _, _call) = pair(false, false);
    let mut b = Burst::new();
    q.pop_burst(&mut b, BURST).unwrap();
    assert!(b.is_empty(), "nothing offered yet");
    ring.stage();
    let mut ids = Vec::new();
    for len in 60..66u32 {
        let id = ring.take().unwrap();
        ring.publish(id, len, false);
        ids.push(id);
    }
    ring.flush();
    q.pop_burst(&mut b, 4).unwrap();
    assert_eq!(b.len(), 4, "no more than asked for");
    for (k, &id) in ids.iter().enumerate().take(4) {
        let (head, segs, len) = b.chain(k);
        assert_eq!(head, id);
        assert_eq!(len, 60 + k as u64);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].addr, ring.layout.buffer(head).0);
    }
    // The last two go back and come again, after the two not taken yet.
    q.unpop_n(2);
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(
        (0..b.len()).map(|k| b.chain(k).0).collect::<Vec<_>>(),
        ids[2..].to_vec()
    );
    assert_eq!(q.next_avail(), 6);
}

#[test]
fn a_bad_chain_ends_a_burst_after_the_good_ones() {
    // Read ahead or not: a buffer is asked for only once it is known to be
    // in guest memory.
    for read_ahead in [false, true] {
        let (mut q, mut ring, mem, _call) = pair(false, false);
        ring.stage();
        for _ in 0..3 {
            let id = ring.take().unwrap();
            ring.publish(id, 64, false);
        }
        ring.flush();
        // The third chain's buffer is moved outside guest memory.
        let third = mem
            .read_obj::<u16>(GuestAddress(ring.layout.avail + 4 + 2 * 2))
            .unwrap();
        mem.write_obj(
            1u64 << 40,
            GuestAddress(ring.layout.desc + 16 * u64::from(third)),
        )
        .unwrap();
        let mut b = Burst::new();
        b.set_read_ahead(read_ahead);
        assert!(matches!(
            q.pop_burst(&mut b, BURST),
            Err(ChainError::OutOfMemory { .. })
        ));
        assert_eq!(b.len(), 2, "the chains before the bad one are kept");
    }
}

#[test]
fn chains_taken_ahead_come_back_whole() {
    let (mut q, mut ring, _, _call) = pair(false, true);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = ring.take().unwrap();
        ring.publish(id, 256, true);
        ids.push(id);
    }
    let mut c = Chain::new();
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!((c.head(), c.len()), (ids[0], 256));
    assert_eq!(q.next_avail(), 3, "the three were popped at once");
    // Given back: taken again, in order.
    q.untake(1);
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!(c.head(), ids[0]);
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!(c.head(), ids[1]);
    // Two more offered: the third chain is still ahead, taken first.
    for _ in 0..2 {
        let id = ring.take().unwrap();
        ring.publish(id, 256, true);
        ids.push(id);
    }
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!(c.head(), ids[2]);
    assert!(q.take(&mut c, BURST).unwrap(), "a new burst");
    assert_eq!(c.head(), ids[3]);
    // Back across the two bursts: what was not consumed is popped again.
    q.untake(2);
    assert_eq!(q.next_avail(), 2);
    let taken: Vec<u16> = (0..3)
        .map(|_| {
            assert!(q.take(&mut c, BURST).unwrap());
            c.head()
        })
        .collect();
    assert_eq!(taken, ids[2..].to_vec());
    assert!(!q.take(&mut c, BURST).unwrap(), "nothing more offered");
    // Stopping returns where the driver's chains stop being consumed.
    q.untake(1);
    assert_eq!(q.stop(), 4);
}

#[test]
fn a_prepared_chain_is_taken_first_and_never_consumed_by_itself() {
    let (mut q, mut ring, _, _call) = pair(false, true);
    q.prepare().unwrap();
    assert_eq!(q.next_avail(), 0, "nothing offered, nothing popped");
    let ids: Vec<u16> = (0..2)
        .map(|_| {
            let id = ring.take().unwrap();
            ring.publish(id, 256, true);
            id
        })
        .collect();
    q.prepare().unwrap();
    q.prepare().unwrap();
    assert_eq!(q.next_avail(), 1, "one chain ahead, however idle");
    let mut c = Chain::new();
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!(c.head(), ids[0], "the prepared chain first");
    assert!(q.take(&mut c, BURST).unwrap());
    assert_eq!(c.head(), ids[1]);
    q.untake(1);
    q.prepare().unwrap();
    assert_eq!(q.stop(), 1, "taken and given back: not consumed");
    // A bad chain is found while idle, as it would be at delivery.
    let (mut q, mut ring, mem, _call) = pair(false, true);
    let id = ring.take().unwrap();
    ring.publish(id, 256, true);
    mem.write_obj(
        1u64 << 40,
        GuestAddress(ring.layout.desc + 16 * u64::from(id)),
    )
    .unwrap();
    assert!(q.prepare().is_err());
}

#[test]
fn unpop_gives_the_chain_back() {
    let (mut q, mut ring, _, _call) = pair(false, true);
    let id = ring.take().unwrap();
    ring.publish(id, 256, true);
    let c = q.pop().unwrap().unwrap();
    q.unpop();
    assert_eq!(q.pop().unwrap().unwrap().head(), c.head());
    assert!(q.pop().unwrap().is_none());
}

#[test]
fn no_interrupt_flag_suppresses_calls() {
    let (mut q, mut ring, mem, call) = pair(false, false);
    let stats = QueueStats::default();
    use_one(&mut q, &mut ring);
    q.signal(&stats);
    assert_eq!(calls(&call), 1);
    q.signal(&stats);
    assert_eq!(calls(&call), 1, "nothing new used: no call");
    // The driver sets VRING_AVAIL_F_NO_INTERRUPT.
    mem.write_obj(1u16, GuestAddress(ring.layout.avail))
        .unwrap();
    use_one(&mut q, &mut ring);
    q.signal(&stats);
    assert_eq!(calls(&call), 1, "suppressed");
    assert_eq!(stats.notifications_sent.load(Ordering::Relaxed), 1);
}

#[test]
fn event_idx_calls_only_when_used_event_is_passed() {
    let (mut q, mut ring, mem, call) = pair(true, false);
    let stats = QueueStats::default();
    let used_event = GuestAddress(ring.layout.avail + 4 + 2 * u64::from(SIZE));
    // The driver asks to be called once the used index passes 2. (A
    // queue's first round calls whatever it asks: see the next test.)
    mem.write_obj(2u16, used_event).unwrap();
    for expected in [1u64, 1, 2, 2] {
        use_one(&mut q, &mut ring);
        q.signal(&stats);
        assert_eq!(calls(&call), expected);
    }
}

#[test]
fn a_queue_that_starts_calls_once_whatever_the_event_index() {
    let (mut q, mut ring, mem, call) = pair(true, false);
    let stats = QueueStats::default();
    // The old device used two chains and published them, then died before
    // calling: the driver still waits for a call at used index 1.
    let used_event = GuestAddress(ring.layout.avail + 4 + 2 * u64::from(SIZE));
    mem.write_obj(0u16, used_event).unwrap();
    for _ in 0..3 {
        let id = ring.take().unwrap();
        ring.publish(id, 64, false);
    }
    for _ in 0..2 {
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 0).unwrap();
    }
    q.flush();
    let (dev_mem, layout) = (q.mem().clone(), ring.layout);
    drop(q);
    let addrs = addrs_of(&layout);
    let start = || {
        ActiveQueue::start(
            dev_mem.clone(),
            SIZE,
            addrs,
            2,
            true,
            Some(call.try_clone().unwrap()),
            false,
        )
        .unwrap()
    };
    // Its first round calls though the index it asked for is behind...
    let mut q = start();
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 0).unwrap();
    q.signal(&stats);
    assert_eq!(calls(&call), 1, "the first round after a start calls");
    // ...and only then does the event index decide again (used_event 0
    // lies behind: no call).
    use_one(&mut q, &mut ring);
    q.signal(&stats);
    assert_eq!(calls(&call), 1);
    // A queue that starts with nothing to return calls once too: the
    // driver may wait for the chains the old device returned.
    drop(q);
    let mut q = start();
    q.signal(&stats);
    q.signal(&stats);
    assert_eq!(calls(&call), 2);
}

#[test]
fn index_jump_is_refused() {
    let (mut q, ring, mem, _call) = pair(false, false);
    mem.write_obj(SIZE + 1, GuestAddress(ring.layout.avail + 2))
        .unwrap();
    assert_eq!(q.pop().unwrap_err(), ChainError::IndexJump);
}

#[test]
fn rings_outside_memory_do_not_start() {
    let (q, ring, _mem, _call) = pair(false, false);
    let mem = q.mem().clone();
    let bad = RingAddrs {
        desc: GuestAddress(1 << 40),
        avail: GuestAddress(ring.layout.avail),
        used: GuestAddress(ring.layout.used),
    };
    assert!(matches!(
        ActiveQueue::start(mem, SIZE, bad, 0, false, None, false),
        Err(QueueError::Rings)
    ));
}

#[test]
fn a_restart_resumes_at_the_used_index_whatever_the_base() {
    let (mut q, mut ring, _, call) = pair(false, false);
    for len in [60u32, 61, 62] {
        let id = ring.take().unwrap();
        ring.publish(id, len, false);
    }
    // Two chains used and published, the third popped: then the switch
    // dies without a GET_VRING_BASE.
    for _ in 0..2 {
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 0).unwrap();
    }
    q.flush();
    assert!(q.pop().unwrap().is_some());
    let mem_dev = q.mem().clone();
    drop(q);
    let layout = ring.layout;
    let addrs = addrs_of(&layout);
    // A stale base (0, as a front-end that lost count would send) is
    // overruled by the used index; the right one (2) is kept.
    for base in [0, 2] {
        let mut q = ActiveQueue::start(
            mem_dev.clone(),
            SIZE,
            addrs,
            base,
            false,
            Some(call.try_clone().unwrap()),
            false,
        )
        .unwrap();
        assert_eq!(q.next_avail(), 2, "base {base}");
        let c = q.pop().unwrap().unwrap();
        assert_eq!(c.len(), 62, "the unfinished chain again, not the first");
        assert!(q.pop().unwrap().is_none());
    }
}
