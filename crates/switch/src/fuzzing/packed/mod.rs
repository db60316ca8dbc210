//! The packed-ring harness of [`crate::fuzzing`]: a descriptor ring written from the
//! input and driven through [`ActiveQueue`] as the data path drives it,
//! while the input, playing a hostile driver, rewrites descriptors and its
//! event area between the device's steps. A model of what the device
//! popped and returned checks every answer: popped chains are what the ring
//! holds, ids in flight are never handed out twice, positions and used
//! descriptors land where the spec puts them.

use crate::vhost_user::chain::{ChainError, Seg, MAX_SEGS};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::protocol::MemoryRegion;
use crate::vhost_user::queue::ActiveQueue;
use std::sync::Arc;
use virtio_bindings::virtio_ring as vr;
use vm_memory::{Bytes, GuestAddress};

/// Guest memory: two adjacent regions (a buffer may cross between them),
/// nothing from `MEM_END` on.
const REGION_A: u64 = 0x4000;
const MEM_END: u64 = 0x5000;
/// Ring sizes to choose from (0 must be refused; most are not powers of two).
const SIZES: [u16; 16] = [0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 31, 32, 64, 100, 128, 256];
const F_NEXT: u16 = vr::VRING_DESC_F_NEXT as u16;
const F_WRITE: u16 = vr::VRING_DESC_F_WRITE as u16;
const F_INDIRECT: u16 = vr::VRING_DESC_F_INDIRECT as u16;
const F_AVAIL: u16 = 1 << vr::VRING_PACKED_DESC_F_AVAIL;
const F_USED: u16 = 1 << vr::VRING_PACKED_DESC_F_USED;

mod run;
pub use run::packed_ring;

/// The input, read front to back; None once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }

    fn desc(&mut self) -> Option<[u8; 16]> {
        let d = self.0.get(..16)?.try_into().ok()?;
        self.0 = &self.0[16..];
        Some(d)
    }
}

/// A place in the ring, as the spec counts it (the device's own is private).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    idx: u16,
    wrap: bool,
}

impl Pos {
    fn advance(&mut self, n: u16, size: u16) {
        let i = u32::from(self.idx) + u32::from(n);
        if i >= u32::from(size) {
            self.idx = (i - u32::from(size)) as u16;
            self.wrap = !self.wrap;
        } else {
            self.idx = i as u16;
        }
    }

    fn encode(self) -> u16 {
        self.idx | if self.wrap { 0x8000 } else { 0 }
    }
}

/// A chain popped and not returned: its id, the slots it holds, its first.
#[derive(Debug, Clone, Copy)]
struct Popped {
    id: u16,
    slots: u16,
    at: Pos,
}

/// What the device must have done, as the spec and the queue's contract say.
struct Model {
    size: u16,
    writable: bool,
    indirect: bool,
    /// In-order transmit: one used descriptor per flush, for the batch.
    batching: bool,
    avail: Pos,
    used: Pos,
    /// In pop order.
    in_flight: Vec<Popped>,
    /// How many of the last `in_flight` are the last chains popped, none
    /// returned since: what may be given back.
    tail: usize,
    /// Used descriptors returned since the last flush: (where, id, len).
    noted: Vec<(Pos, u16, u32)>,
    /// Slots the driver rewrote since the last flush.
    rewritten: Vec<u16>,
    batch_from: Pos,
    batch_id: u16,
}

/// A descriptor as the driver wrote it: (addr, len, id, flags).
fn read_desc(mem: &GuestMem, at: u64) -> (u64, u32, u16, u16) {
    let lo: u64 = mem.mem().read_obj(GuestAddress(at)).unwrap_or(0);
    let hi: u64 = mem.mem().read_obj(GuestAddress(at + 8)).unwrap_or(0);
    (lo, hi as u32, (hi >> 32) as u16, (hi >> 48) as u16)
}

impl Model {
    /// Checks a chain just popped at `avail` against the ring and notes it
    /// in flight.
    fn popped(&mut self, mem: &GuestMem, id: u16, segs: &[Seg], total: u64) {
        assert!(id < self.size, "id {id} beyond the ring");
        assert!(
            self.in_flight.iter().all(|p| p.id != id),
            "id {id} handed out while in flight"
        );
        assert!(!segs.is_empty() && segs.len() <= MAX_SEGS);
        assert_eq!(segs.iter().map(|s| u64::from(s.len)).sum::<u64>(), total);
        for s in segs {
            assert!(
                s.len > 0 && mem.contains(s.addr, s.len),
                "{s:?} not in memory"
            );
        }
        let head = read_desc(mem, 16 * u64::from(self.avail.idx));
        let direction = |flags: u16| (flags & F_WRITE != 0) == self.writable;
        let slots = if head.3 & F_INDIRECT != 0 {
            assert!(self.indirect && head.3 & F_NEXT == 0);
            assert_eq!((head.1, head.2), (16 * segs.len() as u32, id));
            for (k, s) in segs.iter().enumerate() {
                let e = read_desc(mem, head.0 + 16 * k as u64);
                assert_eq!((e.0, e.1), (s.addr, s.len), "indirect entry {k}");
                assert!(direction(e.3) && e.3 & F_INDIRECT == 0);
            }
            1
        } else {
            let mut at = self.avail;
            for (k, s) in segs.iter().enumerate() {
                let d = read_desc(mem, 16 * u64::from(at.idx));
                assert_eq!((d.0, d.1), (s.addr, s.len), "descriptor {k} of the chain");
                assert!(direction(d.3) && d.3 & F_INDIRECT == 0);
                assert_eq!(d.3 & F_NEXT != 0, k + 1 < segs.len());
                at.advance(1, self.size);
            }
            segs.len() as u16
        };
        // The id is the last descriptor's.
        if slots > 1 {
            let mut last = self.avail;
            last.advance(slots - 1, self.size);
            assert_eq!(read_desc(mem, 16 * u64::from(last.idx)).2, id);
        } else {
            assert_eq!(head.2, id);
        }
        self.in_flight.push(Popped {
            id,
            slots,
            at: self.avail,
        });
        self.tail += 1;
        self.avail.advance(slots, self.size);
    }

    /// Expects chain `id` returned with `len` bytes: Ok when it was in flight.
    fn used(&mut self, id: u16, len: u32) -> Result<(), ChainError> {
        let Some(k) = self.in_flight.iter().position(|p| p.id == id) else {
            return Err(ChainError::IndexOutOfRange(id));
        };
        let p = self.in_flight.remove(k);
        if k + self.tail > self.in_flight.len() {
            self.tail = self.in_flight.len() - k;
        }
        if self.batching {
            self.batch_id = id;
        } else {
            self.noted.push((self.used, id, len));
        }
        self.used.advance(p.slots, self.size);
        Ok(())
    }

    /// The flush: every used descriptor noted is in the ring now.
    fn flush(&mut self, mem: &GuestMem) {
        if self.batching && self.used != self.batch_from {
            self.noted.push((self.batch_from, self.batch_id, 0));
        }
        self.batch_from = self.used;
        for &(at, id, len) in &self.noted {
            // A slot the driver rewrote after the chain there came back,
            // or offered again before its used descriptor was stored (a
            // second one noted there): which the slot ends with is the
            // driver's problem.
            let again = self.noted.iter().filter(|n| n.0.idx == at.idx).count() > 1;
            if again || self.rewritten.contains(&at.idx) {
                continue;
            }
            let flags = if at.wrap { F_AVAIL | F_USED } else { 0 };
            let d = read_desc(mem, 16 * u64::from(at.idx));
            assert_eq!(
                (d.1, d.2, d.3),
                (len, id, flags),
                "used descriptor at {at:?}"
            );
        }
        self.noted.clear();
        self.rewritten.clear();
    }

    fn check(&self, q: &ActiveQueue) {
        assert_eq!(q.next_avail(), self.avail.encode());
        assert!(self.in_flight.len() <= usize::from(self.size));
        let slots: u32 = self.in_flight.iter().map(|p| u32::from(p.slots)).sum();
        assert!(slots <= u32::from(self.size), "{slots} slots in flight");
        assert!(self.tail <= self.in_flight.len());
    }
}

/// What making descriptors likely valid ([`near`]) goes by.
struct Near {
    size: u16,
    writable: bool,
    /// Bytes of guest memory the input filled (where tables may lie).
    image: u64,
}

/// Makes descriptor `d` of slot `slot` (or an indirect table's entry),
/// which the device reaches in lap `wrap`, likely valid: an address in or
/// just beyond guest memory, the ring's direction, the slot's own id, flags
/// that make it available; each fault kept now and then.
fn near(d: &mut [u8; 16], n: &Near, slot: u64, wrap: bool) {
    let raw_addr = u64::from_le_bytes(d[..8].try_into().unwrap_or_default());
    let raw_len = u32::from_le_bytes(d[8..12].try_into().unwrap_or_default());
    let raw_id = u16::from_le_bytes([d[12], d[13]]);
    let f = u16::from_le_bytes([d[14], d[15]]);
    let mut flags = f & F_NEXT;
    if (f & 0x0f00 == 0x0f00) != n.writable {
        flags |= F_WRITE;
    }
    let mut addr = raw_addr % (MEM_END + 0x400);
    let mut len = raw_len % 0x1100;
    if f & 0x00f0 == 0x00f0 {
        flags |= F_INDIRECT;
        if raw_len & 1 == 0 && n.image > 0 {
            // A table of whole entries in what the input wrote.
            len = (len & !15) % (16 * 17);
            addr = (raw_addr % n.image) & !15;
        }
    }
    // Ids unique within a lap, as a driver keeps them.
    let id = if raw_id & 0xf000 == 0xf000 {
        raw_id % (n.size + 1)
    } else {
        (slot % u64::from(n.size.max(1))) as u16
    };
    flags |= if f & 0x3000 == 0x3000 {
        // Any AVAIL and USED bits.
        f & (F_AVAIL | F_USED)
    } else if wrap {
        F_AVAIL
    } else {
        F_USED
    };
    d[..8].copy_from_slice(&addr.to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[12..14].copy_from_slice(&id.to_le_bytes());
    d[14..].copy_from_slice(&flags.to_le_bytes());
}

/// Guest memory of two adjacent regions on one memfd.
fn memory() -> Option<Arc<GuestMem>> {
    let f = crate::sys::memfd::create("fuzz-packed", MEM_END).ok()?;
    let region = |gpa: u64, size: u64| MemoryRegion {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: gpa,
        mmap_offset: gpa,
    };
    let table = vec![
        (region(0, REGION_A), f.try_clone().ok()?),
        (region(REGION_A, MEM_END - REGION_A), f),
    ];
    GuestMem::from_table(table, MEM_END).ok().map(Arc::new)
}
