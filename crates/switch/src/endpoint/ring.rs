//! The driver side of a split virtqueue, in shared memory the endpoint owns:
//! it posts buffers, publishes them in the available ring, reaps the used
//! ring, and decides when to kick (EVENT_IDX or the NO_NOTIFY flag).

use std::sync::atomic::{fence, Ordering};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

const F_WRITE: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_WRITE as u16;
const F_NEXT: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_NEXT as u16;
/// No next descriptor in [`DriverRing`]'s chain table.
const END: u16 = u16::MAX;
const VRING_USED_F_NO_NOTIFY: u16 = virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY as u16;

/// Where a queue and its buffers live in the endpoint's memory.
#[derive(Debug, Clone, Copy)]
pub struct RingLayout {
    /// Entries (power of two).
    pub size: u16,
    /// Descriptor table.
    pub desc: u64,
    /// Available ring.
    pub avail: u64,
    /// Used ring.
    pub used: u64,
    /// First buffer; buffer `i` is at `buffers + i * buf_size`.
    pub buffers: u64,
    /// Bytes per buffer.
    pub buf_size: u32,
}

impl RingLayout {
    /// Bytes the rings need (descriptor table, available and used rings, each page-aligned).
    pub fn ring_bytes(size: u16) -> u64 {
        let n = u64::from(size);
        let page = |x: u64| x.div_ceil(4096) * 4096;
        page(16 * n) + page(6 + 2 * n) + page(6 + 8 * n)
    }

    /// A layout at `base` with buffers after the rings.
    pub fn at(base: u64, size: u16, buf_size: u32) -> Self {
        let n = u64::from(size);
        let page = |x: u64| x.div_ceil(4096) * 4096;
        let desc = base;
        let avail = desc + page(16 * n);
        let used = avail + page(6 + 2 * n);
        let buffers = used + page(6 + 8 * n);
        Self {
            size,
            desc,
            avail,
            used,
            buffers,
            buf_size,
        }
    }

    /// End of this layout's memory.
    pub fn end(&self) -> u64 {
        self.buffers + u64::from(self.size) * u64::from(self.buf_size)
    }

    /// Address of buffer `i`.
    pub fn buffer(&self, i: u16) -> GuestAddress {
        GuestAddress(self.buffers + u64::from(i) * u64::from(self.buf_size))
    }
}

/// One split queue, driver side.
#[derive(Debug)]
pub struct DriverRing {
    /// Where it lives.
    pub layout: RingLayout,
    avail_idx: u16,
    last_used: u16,
    free: Vec<u16>,
    /// For each descriptor published in a chain, the next one (or [`END`]).
    next: Vec<u16>,
    event_idx: bool,
    kicked_at: u16,
    /// Publishing without making chains visible yet (see [`DriverRing::stage`]).
    staging: bool,
}

impl DriverRing {
    /// A ring with every descriptor free; descriptor `i` always points at buffer `i`.
    pub fn new(mem: &GuestMemoryMmap, layout: RingLayout, event_idx: bool) -> Self {
        for i in 0..layout.size {
            let d = layout.desc + 16 * u64::from(i);
            let _ = mem.write_obj(layout.buffer(i).raw_value().to_le(), GuestAddress(d));
        }
        let _ = mem.write_obj(0u16, GuestAddress(layout.avail));
        let _ = mem.write_obj(0u16, GuestAddress(layout.avail + 2));
        Self {
            layout,
            avail_idx: 0,
            last_used: 0,
            free: (0..layout.size).rev().collect(),
            next: vec![END; usize::from(layout.size)],
            event_idx,
            kicked_at: 0,
            staging: false,
        }
    }

    /// Writes descriptor `id` whole (one access: the generic accessors cost
    /// more per call than the rest of a frame's handling).
    fn set_desc(&self, mem: &GuestMemoryMmap, id: u16, len: u32, flags: u16, next: u16) {
        let d = GuestAddress(self.layout.desc + 16 * u64::from(id));
        let desc = Descriptor::new(self.layout.buffer(id).raw_value(), len, flags, next);
        let _ = mem.write_obj(desc, d);
    }

    /// Takes a free descriptor (its buffer is `layout.buffer(id)`).
    pub fn take(&mut self) -> Option<u16> {
        self.free.pop()
    }

    /// Descriptors free to take.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Publishes descriptor `id` with `len` bytes (device-writable when `writable`).
    pub fn publish(&mut self, mem: &GuestMemoryMmap, id: u16, len: u32, writable: bool) {
        self.publish_chain(mem, &[id], len, writable);
    }

    /// Publishes descriptors `ids` as one chain: every buffer full except the
    /// last, which holds `last_len` bytes. [`DriverRing::release`] of the
    /// head frees them all.
    pub fn publish_chain(
        &mut self,
        mem: &GuestMemoryMmap,
        ids: &[u16],
        last_len: u32,
        writable: bool,
    ) {
        let Some((&id, _)) = ids.split_first() else {
            return;
        };
        let dir = if writable { F_WRITE } else { 0 };
        for (k, &d) in ids.iter().enumerate() {
            match ids.get(k + 1) {
                Some(&n) => {
                    self.set_desc(mem, d, self.layout.buf_size, dir | F_NEXT, n);
                    self.next[usize::from(d)] = n;
                }
                None => {
                    self.set_desc(mem, d, last_len, dir, 0);
                    self.next[usize::from(d)] = END;
                }
            }
        }
        let slot = self.layout.avail + 4 + 2 * u64::from(self.avail_idx % self.layout.size);
        let _ = mem.write_obj(id.to_le(), GuestAddress(slot));
        self.avail_idx = self.avail_idx.wrapping_add(1);
        if !self.staging {
            self.flush(mem);
        }
    }

    /// Until [`DriverRing::flush`], published chains are staged: the
    /// device sees them all at once (a burst, as a driver's batch).
    pub fn stage(&mut self) {
        self.staging = true;
    }

    /// Makes every staged chain visible to the device (one index store).
    pub fn flush(&mut self, mem: &GuestMemoryMmap) {
        self.staging = false;
        fence(Ordering::Release);
        let _ = mem.store(
            self.avail_idx.to_le(),
            GuestAddress(self.layout.avail + 2),
            Ordering::Release,
        );
    }

    /// True when the device wants a kick for what was published since the last kick.
    pub fn needs_kick(&mut self, mem: &GuestMemoryMmap) -> bool {
        fence(Ordering::SeqCst);
        let old = self.kicked_at;
        let new = self.avail_idx;
        if old == new {
            return false;
        }
        self.kicked_at = new;
        if self.event_idx {
            let at = self.layout.used + 4 + 8 * u64::from(self.layout.size);
            let event: u16 = mem
                .load(GuestAddress(at), Ordering::Acquire)
                .map(u16::from_le)
                .unwrap_or(0);
            // vring_need_event: kick when event lies in [old, new).
            new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
        } else {
            let flags: u16 = mem
                .load(GuestAddress(self.layout.used), Ordering::Acquire)
                .map(u16::from_le)
                .unwrap_or(0);
            flags & VRING_USED_F_NO_NOTIFY == 0
        }
    }

    /// The next used element (descriptor id, length), if the device returned one.
    pub fn reap(&mut self, mem: &GuestMemoryMmap) -> Option<(u16, u32)> {
        let used_idx: u16 = mem
            .load(GuestAddress(self.layout.used + 2), Ordering::Acquire)
            .map(u16::from_le)
            .ok()?;
        if used_idx == self.last_used {
            return None;
        }
        let e = self.layout.used + 4 + 8 * u64::from(self.last_used % self.layout.size);
        // The element (id, len) in one read.
        let elem = u64::from_le(mem.read_obj::<u64>(GuestAddress(e)).ok()?);
        let (id, len) = (elem as u32, (elem >> 32) as u32);
        self.last_used = self.last_used.wrapping_add(1);
        Some((id as u16 % self.layout.size, len))
    }

    /// Returns a reaped descriptor (and the rest of its chain) to the free list.
    pub fn release(&mut self, id: u16) {
        let mut d = id;
        // Bounded by the ring size even if the table were corrupted.
        for _ in 0..self.layout.size {
            self.free.push(d);
            let n = std::mem::replace(&mut self.next[usize::from(d)], END);
            if n == END || n >= self.layout.size {
                break;
            }
            d = n;
        }
    }

    /// Asks the device for a call once the used index passes the current
    /// position; returns true when something is already there.
    pub fn arm_call(&mut self, mem: &GuestMemoryMmap) -> bool {
        if self.event_idx {
            let at = self.layout.avail + 4 + 2 * u64::from(self.layout.size);
            let _ = mem.store(self.last_used.to_le(), GuestAddress(at), Ordering::Release);
        }
        fence(Ordering::SeqCst);
        let used_idx: u16 = mem
            .load(GuestAddress(self.layout.used + 2), Ordering::Acquire)
            .map(u16::from_le)
            .unwrap_or(0);
        used_idx != self.last_used
    }

    /// Descriptors currently owned by the driver.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}
