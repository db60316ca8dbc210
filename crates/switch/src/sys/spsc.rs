//! A single-producer, single-consumer ring of variable-length records in
//! one allocation made at setup: how frames cross from one worker to
//! another without a lock or an allocation per frame.
//!
//! The producer reserves a contiguous record, writes it in place, commits
//! it, and publishes everything committed with one release store of the
//! tail per polling round ([`Producer::flush`]). The consumer peeks the
//! oldest published record in place, pops it, and hands the space back
//! with one release store of the head per round ([`Consumer::release`]).
//! A record is `[u32 length][u32 reserved][payload][padding to 8]`; a
//! record that would straddle the end of the buffer is preceded by a wrap
//! marker and starts at the beginning instead, so every record is one slice.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const HEADER: usize = 8;
const WRAP: u32 = u32::MAX;

/// Keeps the producer's and the consumer's indexes on separate cache lines.
#[repr(align(64))]
struct Padded(AtomicUsize);

struct Shared {
    buf: Box<[UnsafeCell<u8>]>,
    mask: usize,
    /// Bytes the consumer has handed back (monotonic).
    head: Padded,
    /// Bytes the producer has published (monotonic).
    tail: Padded,
}

// SAFETY: the buffer is shared between exactly one `Producer` and one
// `Consumer` (neither is Clone). The producer writes only bytes in
// [tail, head + capacity), which the consumer never reads; the consumer reads
// only bytes in [head, tail), which the producer never writes. The boundaries
// move by release stores and are read by acquire loads, so a record's bytes
// are complete before the other side can see its range.
unsafe impl Sync for Shared {}
// SAFETY: as above; the buffer itself is plain bytes.
unsafe impl Send for Shared {}

impl Shared {
    fn base(&self) -> *mut u8 {
        // UnsafeCell<u8> has the layout of u8 (repr(transparent)); writing
        // through this pointer is the interior mutability UnsafeCell grants.
        self.buf.as_ptr() as *mut u8
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }
}

/// The writing end.
pub struct Producer {
    shared: Arc<Shared>,
    /// Committed (not yet published) position.
    tail: usize,
    /// The head as last read.
    head: usize,
    /// Start of the current reservation, if any.
    reserved: Option<usize>,
}

/// The reading end.
pub struct Consumer {
    shared: Arc<Shared>,
    /// Popped (not yet released) position.
    head: usize,
    /// The tail as last read.
    tail: usize,
    /// Length of the record last peeked.
    peeked: Option<usize>,
}

/// A ring of `capacity` bytes (a power of two, at least 64).
pub fn channel(capacity: usize) -> (Producer, Consumer) {
    assert!(capacity.is_power_of_two() && capacity >= 64);
    let buf: Box<[UnsafeCell<u8>]> = (0..capacity).map(|_| UnsafeCell::new(0)).collect();
    let shared = Arc::new(Shared {
        buf,
        mask: capacity - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer {
            shared: shared.clone(),
            tail: 0,
            head: 0,
            reserved: None,
        },
        Consumer {
            shared,
            head: 0,
            tail: 0,
            peeked: None,
        },
    )
}

fn padded(len: usize) -> usize {
    HEADER + len.div_ceil(8) * 8
}

impl Producer {
    /// The longest payload one record may carry (half the ring, so that a
    /// record always fits after a wrap).
    pub fn max_record(&self) -> usize {
        self.shared.capacity() / 2 - HEADER
    }

    /// A contiguous slot for a record of up to `len` bytes, or `None` when
    /// the ring is full (or `len` exceeds [`Producer::max_record`]).
    pub fn reserve(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.max_record() {
            return None;
        }
        let cap = self.shared.capacity();
        let need = padded(len);
        let pos = self.tail & self.shared.mask;
        let to_end = cap - pos;
        let want = if need > to_end { to_end + need } else { need };
        if self.tail + want - self.head > cap {
            self.head = self.shared.head.0.load(Ordering::Acquire);
            if self.tail + want - self.head > cap {
                return None;
            }
        }
        if need > to_end {
            // SAFETY: [pos, pos + 8) lies inside the buffer (positions and
            // lengths are multiples of 8 and to_end >= 8) and in the free
            // region checked above; only this producer writes there.
            unsafe {
                std::ptr::write_unaligned(self.shared.base().add(pos) as *mut u32, WRAP);
            }
            self.tail += to_end;
        }
        let at = self.tail & self.shared.mask;
        self.reserved = Some(at);
        // SAFETY: [at + 8, at + 8 + len) is inside the buffer (need fits
        // before its end) and in the free region; the slice borrows `self`
        // mutably, so no other reservation can alias it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.shared.base().add(at + HEADER), len) })
    }

    /// Commits the current reservation with `len` bytes of payload (at most
    /// what was reserved). It becomes visible at the next [`Producer::flush`].
    pub fn commit(&mut self, len: usize) {
        let Some(at) = self.reserved.take() else {
            return;
        };
        // SAFETY: `at` is the start of the reservation, inside the buffer and
        // the free region; only this producer writes there.
        unsafe {
            std::ptr::write_unaligned(self.shared.base().add(at) as *mut u32, len as u32);
        }
        self.tail += padded(len);
    }

    /// Publishes every committed record to the consumer.
    pub fn flush(&mut self) {
        self.shared.tail.0.store(self.tail, Ordering::Release);
    }

    /// True when committed records await a flush.
    pub fn unflushed(&self) -> bool {
        self.shared.tail.0.load(Ordering::Relaxed) != self.tail
    }
}

impl Consumer {
    /// The oldest published record, in place.
    pub fn peek(&mut self) -> Option<&[u8]> {
        loop {
            if self.head == self.tail {
                self.tail = self.shared.tail.0.load(Ordering::Acquire);
                if self.head == self.tail {
                    return None;
                }
            }
            let at = self.head & self.shared.mask;
            // SAFETY: [at, at + 8) is a published record header inside the
            // buffer; the producer does not write it until the head passes it.
            let len = unsafe { std::ptr::read_unaligned(self.shared.base().add(at) as *const u32) };
            if len == WRAP {
                self.head += self.shared.capacity() - at;
                continue;
            }
            let len = len as usize;
            self.peeked = Some(len);
            // SAFETY: the record's payload was written before the release
            // store that published it, lies inside the buffer (records never
            // straddle its end), and stays untouched until it is released.
            return Some(unsafe {
                std::slice::from_raw_parts(self.shared.base().add(at + HEADER), len)
            });
        }
    }

    /// Drops the record last peeked.
    pub fn pop(&mut self) {
        if let Some(len) = self.peeked.take() {
            self.head += padded(len);
        }
    }

    /// Hands the space of every popped record back to the producer.
    pub fn release(&mut self) {
        self.shared.head.0.store(self.head, Ordering::Release);
    }

    /// True when a record is published and not yet popped (reads the tail).
    pub fn pending(&mut self) -> bool {
        self.peek().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_out_in_order_across_wraps() {
        let (mut p, mut c) = channel(256);
        let mut expect = std::collections::VecDeque::new();
        let mut n = 0u8;
        for round in 0..500usize {
            // Produce a few records of varying length, then consume some.
            for k in 0..(round % 4) {
                let len = (round * 7 + k * 13) % 100;
                match p.reserve(len) {
                    Some(slot) => {
                        slot.fill(n);
                        p.commit(len);
                        expect.push_back((len, n));
                        n = n.wrapping_add(1);
                    }
                    None => break,
                }
            }
            p.flush();
            for _ in 0..(round % 3 + 1) {
                let Some(r) = c.peek() else { break };
                let (len, v) = expect.pop_front().expect("a record was produced");
                assert_eq!(r.len(), len);
                assert!(r.iter().all(|b| *b == v));
                c.pop();
            }
            c.release();
        }
        while let Some(r) = c.peek() {
            let (len, _) = expect.pop_front().unwrap();
            assert_eq!(r.len(), len);
            c.pop();
        }
        assert!(expect.is_empty());
    }

    #[test]
    fn full_until_released_and_unpublished_until_flushed() {
        let (mut p, mut c) = channel(128);
        assert!(p.reserve(p.max_record() + 1).is_none());
        assert!(p.reserve(40).is_some());
        p.commit(40);
        assert!(c.peek().is_none(), "not flushed");
        p.flush();
        assert!(p.reserve(40).is_some());
        p.commit(40);
        p.flush();
        assert!(p.reserve(40).is_none(), "96 of 128 bytes used");
        assert_eq!(c.peek().unwrap().len(), 40);
        c.pop();
        assert!(p.reserve(40).is_none(), "popped but not released");
        c.release();
        assert!(p.reserve(40).is_some());
    }

    #[test]
    fn two_threads_move_records_in_order() {
        let (mut p, mut c) = channel(4096);
        let n = 100_000u32;
        let t = std::thread::spawn(move || {
            let mut i = 0u32;
            while i < n {
                let len = 4 + (i % 50) as usize;
                if let Some(slot) = p.reserve(len) {
                    slot[..4].copy_from_slice(&i.to_le_bytes());
                    p.commit(len);
                    i += 1;
                    if i % 16 == 0 {
                        p.flush();
                    }
                } else {
                    p.flush();
                    std::hint::spin_loop();
                }
            }
            p.flush();
        });
        let mut next = 0u32;
        while next < n {
            while let Some(r) = c.peek() {
                assert_eq!(r.len(), 4 + (next % 50) as usize);
                assert_eq!(u32::from_le_bytes([r[0], r[1], r[2], r[3]]), next);
                c.pop();
                next += 1;
            }
            c.release();
            std::hint::spin_loop();
        }
        t.join().unwrap();
    }
}
