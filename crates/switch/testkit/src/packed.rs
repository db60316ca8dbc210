//! The driver side of a packed virtqueue (virtio 1.1 §2.8) for the
//! hand-driven front-end: the descriptor ring at the layout's descriptor
//! table, the driver's event area at its available ring, the device's at
//! its used ring, one buffer slot per id. Minimal: each buffer is one
//! descriptor unless a test writes chains itself.

use std::collections::VecDeque;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vnio_switch::endpoint::ring::RingLayout;

pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_AVAIL: u16 = 1 << 7;
pub const F_USED: u16 = 1 << 15;

pub struct PackedRing {
    pub layout: RingLayout,
    /// Next slot to offer at, and the driver's wrap counter.
    pub avail: (u16, bool),
    used: (u16, bool),
    free: Vec<u16>,
    /// Buffers offered and not returned: (id, descriptors).
    in_flight: VecDeque<(u16, u16)>,
}

impl PackedRing {
    pub fn new(layout: RingLayout) -> Self {
        Self {
            layout,
            avail: (0, true),
            used: (0, true),
            free: (0..layout.size).rev().collect(),
            in_flight: VecDeque::new(),
        }
    }

    fn advance(&self, (idx, wrap): (u16, bool), n: u16) -> (u16, bool) {
        let i = idx + n;
        if i >= self.layout.size {
            (i - self.layout.size, !wrap)
        } else {
            (i, wrap)
        }
    }

    /// The flags that make a descriptor available in the current lap.
    pub fn avail_flags(&self) -> u16 {
        if self.avail.1 {
            F_AVAIL
        } else {
            F_USED
        }
    }

    /// Writes ring slot `slot` as is (hostile chains write their own).
    pub fn put(&self, mem: &GuestMemoryMmap, slot: u16, addr: u64, len: u32, id: u16, flags: u16) {
        let d = self.layout.desc + 16 * u64::from(slot % self.layout.size);
        mem.write_obj(addr, GuestAddress(d)).unwrap();
        mem.write_obj(len, GuestAddress(d + 8)).unwrap();
        mem.write_obj(id, GuestAddress(d + 12)).unwrap();
        mem.write_obj(flags, GuestAddress(d + 14)).unwrap();
    }

    /// Offers the chain `bufs` (addr, len, flags) as buffer `id`: the
    /// head's flags are written last, so the device sees it whole.
    pub fn offer(&mut self, mem: &GuestMemoryMmap, bufs: &[(u64, u32, u16)], id: u16) {
        let head = self.avail;
        let mut at = head;
        let mut head_flags = 0;
        for (k, &(addr, len, flags)) in bufs.iter().enumerate() {
            let next = if k + 1 < bufs.len() { F_NEXT } else { 0 };
            let lap = if at.1 { F_AVAIL } else { F_USED };
            if k == 0 {
                head_flags = flags | next | lap;
                // Not available until the end.
                let not_yet = if at.1 { F_USED } else { F_AVAIL };
                self.put(mem, at.0, addr, len, id, not_yet);
            } else {
                self.put(mem, at.0, addr, len, id, flags | next | lap);
            }
            at = self.advance(at, 1);
        }
        let d = self.layout.desc + 16 * u64::from(head.0);
        mem.write_obj(head_flags, GuestAddress(d + 14)).unwrap();
        self.avail = at;
        self.in_flight.push_back((id, bufs.len() as u16));
    }

    /// A free buffer id.
    pub fn take(&mut self) -> Option<u16> {
        self.free.pop()
    }

    /// Offers buffer `id`'s slot, `len` bytes, device-writable or not.
    pub fn publish(&mut self, mem: &GuestMemoryMmap, id: u16, len: u32, writable: bool) {
        let flags = if writable { F_WRITE } else { 0 };
        self.offer(mem, &[(self.layout.buffer(id).0, len, flags)], id);
    }

    /// The next used buffer (id, len); with VIRTIO_F_IN_ORDER the earlier
    /// buffers the device skipped are freed too.
    pub fn reap(&mut self, mem: &GuestMemoryMmap) -> Option<(u16, u32)> {
        let d = self.layout.desc + 16 * u64::from(self.used.0);
        let flags: u16 = mem.read_obj(GuestAddress(d + 14)).unwrap();
        let w = self.used.1;
        if (flags & F_AVAIL != 0) != w || (flags & F_USED != 0) != w {
            return None;
        }
        let len: u32 = mem.read_obj(GuestAddress(d + 8)).unwrap();
        let id: u16 = mem.read_obj(GuestAddress(d + 12)).unwrap();
        while let Some((first, n)) = self.in_flight.pop_front() {
            self.used = self.advance(self.used, n);
            if first == id {
                return Some((id, len));
            }
            self.free.push(first);
        }
        panic!("the device returned id {id}, never offered");
    }

    /// Returns `id` to the free list.
    pub fn release(&mut self, id: u16) {
        self.free.push(id);
    }

    /// Free ids.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}
