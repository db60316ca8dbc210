//! Unit tests of [`super`] (packed/mod.rs): a packed queue driven through
//! [`ActiveQueue`] by a small driver written here from the spec, on the
//! same memfd. Here: starting, returning used chains (in order, in
//! batches, at the flush), event suppression and the dirty log; popping
//! chains is tested in `pop_tests.rs`, with the same driver.
use super::*;
use crate::stats::QueueStats;
use crate::vhost_user::protocol::MemoryRegion;
use crate::vhost_user::queue::{ActiveQueue, Burst, BURST};
use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use vm_memory::{Bytes, GuestMemoryMmap};

pub(super) const DESC: u64 = 0;
pub(super) const BUFS: u64 = 0x10_0000;
pub(super) const MEM: u64 = 0x20_0000;
pub(super) const F_WRITE: u16 = 2;

/// The driver side of a packed ring (virtio 1.1 §2.8), minimal.
pub(super) struct Driver {
    pub(super) mem: GuestMemoryMmap,
    pub(super) size: u16,
    pub(super) avail: Pos,
    pub(super) used: Pos,
    /// Descriptors each id in flight holds, in the order offered.
    pub(super) in_flight: Vec<(u16, u16)>,
}

impl Driver {
    pub(super) fn driver_event(&self) -> GuestAddress {
        GuestAddress(DESC + 16 * u64::from(self.size))
    }

    pub(super) fn device_event(&self) -> GuestAddress {
        GuestAddress(DESC + 16 * u64::from(self.size) + 4)
    }

    fn flags_for(&self, wrap: bool, flags: u16) -> u16 {
        flags | if wrap { F_AVAIL } else { F_USED }
    }

    pub(super) fn put(&self, slot: u16, addr: u64, len: u32, id: u16, flags: u16) {
        let d = GuestAddress(DESC + 16 * u64::from(slot));
        self.mem.write_obj(addr, d).unwrap();
        self.mem.write_obj(len, GuestAddress(d.0 + 8)).unwrap();
        self.mem.write_obj(id, GuestAddress(d.0 + 12)).unwrap();
        self.mem.write_obj(flags, GuestAddress(d.0 + 14)).unwrap();
    }

    /// Offers a chain of `(addr, len, flags)` as buffer `id`: the rest of
    /// the chain first, the head's flags last.
    pub(super) fn offer(&mut self, bufs: &[(u64, u32, u16)], id: u16) {
        let head = self.avail;
        let mut at = self.avail;
        for (k, &(addr, len, flags)) in bufs.iter().enumerate() {
            let next = if k + 1 < bufs.len() { F_NEXT } else { 0 };
            let f = self.flags_for(at.wrap, flags | next);
            if k == 0 {
                // Not available yet: the head's flags are written last.
                self.put(at.idx, addr, len, id, self.flags_for(!at.wrap, 0));
            } else {
                self.put(at.idx, addr, len, id, f);
            }
            at.advance(1, self.size);
        }
        let f = self.flags_for(
            head.wrap,
            bufs[0].2 | if bufs.len() > 1 { F_NEXT } else { 0 },
        );
        self.mem
            .write_obj(f, GuestAddress(DESC + 16 * u64::from(head.idx) + 14))
            .unwrap();
        self.avail = at;
        self.in_flight.push((id, bufs.len() as u16));
    }

    /// One buffer of `len` bytes as buffer `id` (its own 2 KiB slot).
    pub(super) fn offer_one(&mut self, id: u16, len: u32, flags: u16) {
        self.offer(&[(BUFS + 2048 * u64::from(id), len, flags)], id);
    }

    /// The next used descriptor: (id, len), the in-flight buffers up to
    /// that id released (in order, as VIRTIO_F_IN_ORDER lets the device
    /// name only the last of a batch).
    pub(super) fn reap(&mut self) -> Option<(u16, u32)> {
        let d = DESC + 16 * u64::from(self.used.idx);
        let flags: u16 = self.mem.read_obj(GuestAddress(d + 14)).unwrap();
        let w = self.used.wrap;
        if (flags & F_AVAIL != 0) != w || (flags & F_USED != 0) != w {
            return None;
        }
        let len: u32 = self.mem.read_obj(GuestAddress(d + 8)).unwrap();
        let id: u16 = self.mem.read_obj(GuestAddress(d + 12)).unwrap();
        loop {
            let (first, n) = self.in_flight.remove(0);
            self.used.advance(n, self.size);
            if first == id {
                return Some((id, len));
            }
        }
    }

    /// Sets the driver's event suppression area.
    fn want_calls(&self, flags: u16, off_wrap: u16) {
        self.mem.write_obj(off_wrap, self.driver_event()).unwrap();
        self.mem
            .write_obj(flags, GuestAddress(self.driver_event().0 + 2))
            .unwrap();
    }

    /// The device's event suppression area: (off_wrap, flags).
    fn device_wants(&self) -> (u16, u16) {
        let e = self.device_event();
        (
            self.mem.read_obj(e).unwrap(),
            self.mem.read_obj(GuestAddress(e.0 + 2)).unwrap(),
        )
    }
}

/// A device queue and its driver over one memfd; `call` counts calls.
pub(super) fn pair(
    size: u16,
    features: PackedFeatures,
    writable: bool,
) -> (ActiveQueue, Driver, File) {
    let f = crate::sys::memfd::create("packed-test", MEM).unwrap();
    let driver_mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
        GuestAddress(0),
        MEM as usize,
        Some(vm_memory::FileOffset::new(f.try_clone().unwrap(), 0)),
    )])
    .unwrap();
    let region = MemoryRegion {
        guest_phys_addr: 0,
        memory_size: MEM,
        userspace_addr: 0,
        mmap_offset: 0,
    };
    let dev_mem = Arc::new(
        GuestMem::from_table(
            vec![(region, f)],
            crate::vhost_user::memory::DEFAULT_MAX_MEMORY,
        )
        .unwrap(),
    );
    let start = Pos { idx: 0, wrap: true };
    let d = Driver {
        mem: driver_mem,
        size,
        avail: start,
        used: start,
        in_flight: Vec::new(),
    };
    let addrs = RingAddrs {
        desc: GuestAddress(DESC),
        avail: d.driver_event(),
        used: d.device_event(),
    };
    let call = crate::sys::memfd::create("not-an-eventfd", 0).unwrap();
    let q = ActiveQueue::start_packed(
        dev_mem,
        size,
        addrs,
        u32::from(start.encode()),
        features,
        Some(call.try_clone().unwrap()),
        writable,
    )
    .unwrap();
    (q, d, call)
}

fn calls(f: &File) -> u64 {
    // The stand-in for the call eventfd is a plain file: each signal appends 8 bytes.
    let mut v = Vec::new();
    let mut r = f.try_clone().unwrap();
    std::io::Seek::rewind(&mut r).unwrap();
    r.read_to_end(&mut v).unwrap();
    v.len() as u64 / 8
}

pub(super) const PLAIN: PackedFeatures = PackedFeatures {
    event_idx: false,
    in_order: false,
    indirect: false,
};

#[test]
fn single_buffers_round_trip_across_several_wraps() {
    let (mut q, mut d, _call) = pair(8, PLAIN, true);
    assert!(q.pop().unwrap().is_none(), "nothing offered yet");
    for round in 0..5u16 {
        // Three per round: the ring of 8 wraps in the middle of rounds.
        for k in 0..3 {
            d.offer_one(k, 2048, F_WRITE);
        }
        for k in 0..3u16 {
            let c = q.pop().unwrap().unwrap();
            assert_eq!((c.head(), c.len()), (k, 2048));
            assert_eq!(c.segs()[0].addr, BUFS + 2048 * u64::from(k));
            q.add_used(c.head(), 100 + u32::from(k + round)).unwrap();
        }
        assert!(q.pop().unwrap().is_none());
        assert!(d.reap().is_none(), "used descriptors wait for the flush");
        q.flush();
        for k in 0..3u16 {
            assert_eq!(d.reap(), Some((k, 100 + u32::from(k + round))));
        }
        assert!(d.reap().is_none());
    }
    // 15 slots on: slot 7 of the second lap (wrap counter 0).
    assert_eq!(q.next_avail(), 7);
    assert_eq!(q.stop_state(), 7 | 7 << 16);
}

/// The heads of burst `b`, in order.
pub(super) fn heads(b: &Burst) -> Vec<u16> {
    (0..b.len()).map(|k| b.chain(k).0).collect()
}

#[test]
fn in_order_transmit_writes_one_used_descriptor_per_flush() {
    let features = PackedFeatures {
        in_order: true,
        ..PLAIN
    };
    let (mut q, mut d, _call) = pair(8, features, false);
    for id in 0..3 {
        d.offer_one(id, 64, 0);
    }
    let mut b = Burst::new();
    q.pop_burst(&mut b, BURST).unwrap();
    for k in 0..3 {
        q.add_used(b.chain(k).0, 0).unwrap();
    }
    q.flush();
    let written =
        |slot: u64| -> u16 { d.mem.read_obj(GuestAddress(DESC + 16 * slot + 14)).unwrap() };
    assert_eq!(written(0) & (F_AVAIL | F_USED), F_AVAIL | F_USED);
    assert_eq!(
        written(1) & F_USED,
        0,
        "no used descriptor in the batch's other slots"
    );
    assert_eq!(d.reap(), Some((2, 0)), "naming the batch's last buffer");
    assert!(d.in_flight.is_empty(), "the driver released all three");
    // The receive queue writes each (its lengths differ).
    let (mut q, mut d, _call) = pair(8, features, true);
    for id in 0..2 {
        d.offer_one(id, 2048, F_WRITE);
    }
    for len in [70, 80] {
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), len).unwrap();
    }
    q.flush();
    assert_eq!(d.reap(), Some((0, 70)));
    assert_eq!(d.reap(), Some((1, 80)));
}

#[test]
fn in_order_transmit_bursts_return_at_once_and_stop_at_an_id_not_in_flight() {
    let features = PackedFeatures {
        in_order: true,
        ..PLAIN
    };
    let (mut q, mut d, _call) = pair(8, features, false);
    // A chain of two slots among single ones: the batch moves five slots.
    d.offer_one(0, 64, 0);
    d.offer(&[(BUFS + 0x1000, 14, 0), (BUFS + 0x2000, 50, 0)], 1);
    d.offer_one(2, 64, 0);
    d.offer_one(3, 64, 0);
    let mut b = Burst::new();
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(heads(&b), vec![0, 1, 2, 3]);
    q.add_used_burst(&b, 4).unwrap();
    q.flush();
    assert_eq!(
        d.reap(),
        Some((3, 0)),
        "one used descriptor, naming the last"
    );
    assert!(d.in_flight.is_empty(), "the driver released all four");
    // The next batch begins five slots on and ends across the ring's end.
    for id in [4, 5, 6, 7] {
        d.offer_one(id, 64, 0);
    }
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(heads(&b), vec![4, 5, 6, 7]);
    q.add_used_burst(&b, 4).unwrap();
    q.flush();
    assert_eq!(d.reap(), Some((7, 0)));
    assert!(d.in_flight.is_empty());
    // An id not in flight stops the burst there: the chains before it are
    // returned, the ones after it stay in flight.
    for id in [0, 1, 2] {
        d.offer_one(id, 64, 0);
    }
    q.pop_burst(&mut b, BURST).unwrap();
    assert_eq!(heads(&b), vec![0, 1, 2]);
    q.add_used(1, 0).unwrap();
    assert_eq!(
        q.add_used_burst(&b, 3).unwrap_err(),
        ChainError::IndexOutOfRange(1)
    );
    assert_eq!(
        q.add_used(0, 0).unwrap_err(),
        ChainError::IndexOutOfRange(0),
        "returned by the burst"
    );
    q.add_used(2, 0).unwrap();
}

#[test]
fn used_descriptors_are_stored_at_the_flush_the_first_last() {
    // More than a flush holds (SHADOW): those past it are stored at once,
    // behind the first, which still waits for the flush.
    let n = SHADOW as u16 + 8;
    let (mut q, mut d, _call) = pair(128, PLAIN, true);
    for k in 0..n {
        d.offer_one(k, 2048, F_WRITE);
    }
    let second_half = |d: &Driver, slot: u16| -> u64 {
        d.mem
            .read_obj(GuestAddress(DESC + 16 * u64::from(slot) + 8))
            .unwrap()
    };
    let offered: Vec<u64> = (0..n).map(|k| second_half(&d, k)).collect();
    for k in 0..n {
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 60 + u32::from(k)).unwrap();
    }
    for k in 0..SHADOW as u16 {
        let v = second_half(&d, k);
        assert_eq!(v, offered[usize::from(k)], "slot {k} waits for the flush");
    }
    assert!(d.reap().is_none(), "the driver stops at the first");
    q.flush();
    for k in 0..n {
        assert_eq!(d.reap(), Some((k, 60 + u32::from(k))));
    }
    assert!(d.reap().is_none());
}

#[test]
fn event_flags_without_event_idx() {
    let (mut q, mut d, call) = pair(8, PLAIN, false);
    let stats = QueueStats::default();
    assert_eq!(
        d.device_wants().1,
        EVENT_DISABLE,
        "a started queue is polled"
    );
    assert!(!q.enable_notification(), "nothing offered");
    assert_eq!(d.device_wants().1, EVENT_ENABLE);
    d.offer_one(0, 64, 0);
    assert!(q.enable_notification(), "a chain arrived: poll again");
    q.disable_notification();
    assert_eq!(d.device_wants().1, EVENT_DISABLE);
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 0).unwrap();
    q.signal(&stats);
    assert_eq!(calls(&call), 1, "ENABLE: called");
    d.want_calls(EVENT_DISABLE, 0);
    d.offer_one(1, 64, 0);
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 0).unwrap();
    q.signal(&stats);
    assert_eq!(calls(&call), 1, "DISABLE: suppressed");
    // DESC means nothing without EVENT_IDX: calls as ENABLE.
    d.want_calls(EVENT_DESC, 0);
    d.offer_one(2, 64, 0);
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 0).unwrap();
    q.signal(&stats);
    assert_eq!(calls(&call), 2);
}

#[test]
fn event_idx_calls_when_the_named_descriptor_is_used() {
    let features = PackedFeatures {
        event_idx: true,
        ..PLAIN
    };
    let (mut q, mut d, call) = pair(8, features, false);
    let stats = QueueStats::default();
    // The driver asks for a call once slot 2 of this lap (wrap 1) is used.
    // (The first round after a start calls whatever it asks.)
    d.want_calls(EVENT_DESC, 2 | 0x8000);
    let mut expected = Vec::new();
    for id in 0..4u16 {
        d.offer_one(id, 64, 0);
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 0).unwrap();
        q.signal(&stats);
        expected.push(calls(&call));
        while d.reap().is_some() {}
    }
    assert_eq!(expected, vec![1, 1, 2, 2]);
    // Next lap's slot 1 (wrap 0): six more used, the call on the sixth.
    d.want_calls(EVENT_DESC, 1);
    let mut seen = Vec::new();
    for id in 0..6u16 {
        d.offer_one(id, 64, 0);
        let c = q.pop().unwrap().unwrap();
        q.add_used(c.head(), 0).unwrap();
        q.signal(&stats);
        seen.push(calls(&call));
        while d.reap().is_some() {}
    }
    assert_eq!(seen, vec![2, 2, 2, 2, 2, 3]);
    // The device asks for a kick at its next avail slot.
    assert!(!q.enable_notification());
    assert_eq!(d.device_wants(), (q.next_avail(), EVENT_DESC));
    assert_eq!(q.next_avail(), 2, "ten slots on: slot 2, wrap counter 0");
}

#[test]
fn bad_bases_and_rings_do_not_start() {
    let (q, d, _call) = pair(8, PLAIN, false);
    let mem = q.mem().clone();
    let addrs = RingAddrs {
        desc: GuestAddress(DESC),
        avail: d.driver_event(),
        used: d.device_event(),
    };
    let start =
        |addrs, base| ActiveQueue::start_packed(mem.clone(), 8, addrs, base, PLAIN, None, false);
    assert!(matches!(start(addrs, 8), Err(QueueError::Base(8))));
    let outside = RingAddrs {
        desc: GuestAddress(MEM - 64),
        ..addrs
    };
    assert!(matches!(start(outside, 0), Err(QueueError::Rings)));
    let misaligned = RingAddrs {
        desc: GuestAddress(8),
        ..addrs
    };
    assert!(matches!(start(misaligned, 0), Err(QueueError::Rings)));
}

#[test]
fn logging_marks_the_buffers_descriptors_and_event_area_written() {
    use crate::vhost_user::log::{DirtyLog, QueueLog};
    let (mut q, mut d, _call) = pair(8, PLAIN, true);
    let f = crate::sys::memfd::create("packed-log", 64).unwrap();
    let log = Arc::new(DirtyLog::map(f, 64, 0, log_bounds()).unwrap());
    let marked = || {
        (0..MEM / 4096)
            .filter(|&p| log.is_marked(p))
            .collect::<Vec<_>>()
    };
    // Not logging: a used chain marks nothing.
    d.offer_one(0, 2048, F_WRITE);
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 64).unwrap();
    q.flush();
    assert!(marked().is_empty());
    q.set_log(Some(QueueLog {
        log: Arc::clone(&log),
        used: 0,
    }));
    // A chain of two buffers on pages 259 and 261 (262 beyond them),
    // 150 bytes written: 100 in the first, 50 in the second.
    d.offer(
        &[
            (BUFS + 0x3000, 100, F_WRITE),
            (BUFS + 0x5000, 8192, F_WRITE),
        ],
        1,
    );
    let c = q.pop().unwrap().unwrap();
    q.add_used(c.head(), 150).unwrap();
    q.flush();
    q.disable_notification();
    // The descriptor ring and both event areas are on page 0.
    assert_eq!(marked(), vec![0, 259, 261]);
    assert_eq!(d.reap(), Some((0, 64)));
    assert_eq!(d.reap(), Some((1, 150)));
}

fn log_bounds() -> crate::vhost_user::log::LogBounds {
    crate::vhost_user::log::LogBounds {
        mem_end: MEM,
        left: 1 << 30,
    }
}

/// The driver rewrites a receive chain's descriptor after the device
/// popped it (here: points it at another buffer, as a buggy or hostile
/// driver may): the device wrote where the chain pointed when popped, and
/// those pages are marked, not the ones the ring names now. Chains popped
/// ahead (`take`) before logging started are given back and recorded when
/// popped again.
#[test]
fn logging_marks_the_buffers_popped_not_the_descriptors_rewritten() {
    use crate::vhost_user::chain::Chain;
    use crate::vhost_user::log::{DirtyLog, QueueLog};
    let (mut q, mut d, _call) = pair(8, PLAIN, true);
    let f = crate::sys::memfd::create("packed-log", 64).unwrap();
    let log = Arc::new(DirtyLog::map(f, 64, 0, log_bounds()).unwrap());
    let marked = || {
        (0..MEM / 4096)
            .filter(|&p| log.is_marked(p))
            .collect::<Vec<_>>()
    };
    // Two chains, on pages 259 and 260, popped ahead before logging starts.
    d.offer(&[(BUFS + 0x3000, 4096, F_WRITE)], 0);
    d.offer(&[(BUFS + 0x4000, 4096, F_WRITE)], 1);
    let mut c = Chain::new();
    assert!(q.take(&mut c, 2).unwrap());
    q.untake(1);
    q.set_log(Some(QueueLog {
        log: Arc::clone(&log),
        used: 0,
    }));
    for (slot, id) in [(0u16, 0u16), (1, 1)] {
        assert!(q.take(&mut c, 2).unwrap());
        assert_eq!(c.head(), id);
        // After the pop, the driver points the slot at page 264 + slot.
        d.put(
            slot,
            BUFS + 0x8000 + 0x1000 * u64::from(slot),
            4096,
            id,
            F_WRITE | F_AVAIL,
        );
        // The device writes into the chain as popped, then uses it.
        let at = GuestAddress(c.segs()[0].addr);
        q.mem().mem().write_slice(&[7u8; 100], at).unwrap();
        q.add_used(c.head(), 100).unwrap();
    }
    q.flush();
    let m = marked();
    assert!(m.contains(&259) && m.contains(&260), "{m:?}");
    assert!(!m.contains(&264) && !m.contains(&265), "{m:?}");
    assert_eq!(d.reap(), Some((0, 100)));
    assert_eq!(d.reap(), Some((1, 100)));
}
