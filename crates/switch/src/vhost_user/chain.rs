//! Descriptor-chain validation: every chain a front-end offers is walked
//! and checked against the memory map before a single byte of its buffers
//! is touched. A failure names the reason; the caller drops the frame,
//! counts it, and resets the port.

use virtio_queue::desc::split::Descriptor;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemory, GuestMemoryBackend, GuestMemoryRegion,
    MemoryRegionAddress,
};

/// Longest chain accepted (Linux uses at most MAX_SKB_FRAGS + 2 without indirect descriptors).
pub const MAX_SEGS: usize = 64;

const F_NEXT: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_NEXT as u16;
const F_WRITE: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_WRITE as u16;
const F_INDIRECT: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_INDIRECT as u16;

/// What is wrong with a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The head or a `next` index is not below the queue size.
    #[error("descriptor index {0} outside the queue")]
    IndexOutOfRange(u16),
    /// A buffer (or the descriptor table entry) is not inside guest memory.
    #[error("buffer {addr:#x}+{len} outside guest memory")]
    OutOfMemory {
        /// Buffer address.
        addr: u64,
        /// Buffer length.
        len: u32,
    },
    /// More descriptors than the queue has: the chain loops.
    #[error("descriptor chain loops")]
    Loop,
    /// More descriptors than [`MAX_SEGS`].
    #[error("descriptor chain longer than {MAX_SEGS}")]
    TooLong,
    /// A device-readable buffer where a writable one is required, or the reverse.
    #[error("descriptor with the wrong direction")]
    WrongDirection,
    /// A zero-length buffer.
    #[error("zero-length descriptor")]
    ZeroLength,
    /// An indirect descriptor (the feature is not offered).
    #[error("indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC")]
    Indirect,
    /// An indirect table whose length is not a whole number of descriptors
    /// (packed rings), or an indirect descriptor inside a chain or a table.
    #[error("indirect descriptor table of {0} bytes is malformed")]
    IndirectTable(u32),
    /// The chain's total length exceeds 4 GiB.
    #[error("descriptor chain too large")]
    TooLarge,
    /// The available index moved by more than the queue size.
    #[error("available index jumped")]
    IndexJump,
    /// Ring memory (available or used ring) could not be accessed.
    #[error("ring not accessible")]
    Ring,
}

/// A validated buffer: inside guest memory, non-empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seg {
    /// Guest address.
    pub addr: u64,
    /// Length.
    pub len: u32,
}

/// A validated chain: its head index and buffers, all of one direction.
#[derive(Debug, Clone)]
pub struct Chain {
    /// Head index (returned to the used ring), held in 32 bits: stored in
    /// 16 it was loaded back in 32 (as an argument), a load the store
    /// buffer cannot forward, once per frame (`Span::write_words_with`).
    head: u32,
    segs: [Seg; MAX_SEGS],
    n: usize,
    len: u64,
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Chain {
    /// An empty chain (a buffer for [`walk_into`]).
    pub fn new() -> Self {
        Self {
            head: 0,
            segs: [Seg::default(); MAX_SEGS],
            n: 0,
            len: 0,
        }
    }

    /// The buffers.
    pub fn segs(&self) -> &[Seg] {
        &self.segs[..self.n]
    }

    /// Total bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Head index (returned to the used ring).
    #[inline]
    pub fn head(&self) -> u16 {
        self.head as u16
    }

    /// Sets the chain to validated buffers (a copy of one popped earlier).
    #[inline]
    pub fn set(&mut self, head: u16, segs: &[Seg], len: u64) {
        self.head = u32::from(head);
        self.n = segs.len().min(MAX_SEGS);
        // Most receive chains are one buffer: no copy loop for them.
        if let [one] = segs {
            self.segs[0] = *one;
        } else {
            self.segs[..self.n].copy_from_slice(&segs[..self.n]);
        }
        self.len = len;
    }

    /// True when the chain has no bytes (never true for a validated chain).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Checks one buffer of a chain, in either ring layout (the WRITE flag is
/// the same bit in both): its direction, a length, inside guest memory.
#[inline]
pub(crate) fn check_buffer(
    addr: u64,
    len: u32,
    flags: u16,
    writable: bool,
    in_memory: impl Fn(u64, u32) -> bool,
) -> Result<Seg, ChainError> {
    if (flags & F_WRITE != 0) != writable {
        return Err(ChainError::WrongDirection);
    }
    if len == 0 {
        return Err(ChainError::ZeroLength);
    }
    if !in_memory(addr, len) {
        return Err(ChainError::OutOfMemory { addr, len });
    }
    Ok(Seg { addr, len })
}

/// Reads a descriptor from the region holding `at` (one region lookup, no iteration).
fn read_descriptor<M: GuestMemoryBackend>(mem: &M, at: GuestAddress) -> Option<Descriptor> {
    let r = mem.find_region(at)?;
    let off = at.raw_value() - r.start_addr().raw_value();
    r.read_obj::<Descriptor>(MemoryRegionAddress(off)).ok()
}

/// True when `[addr, addr + len)` is guest memory: one lookup in the common
/// case of a buffer inside one region, the general check across regions otherwise.
fn in_memory<M: GuestMemoryBackend>(mem: &M, addr: u64, len: u32) -> bool {
    let Some(r) = mem.find_region(GuestAddress(addr)) else {
        return false;
    };
    let off = addr - r.start_addr().raw_value();
    match off.checked_add(u64::from(len)) {
        Some(end) if end <= r.len() => true,
        Some(_) => GuestMemoryBackend::check_range(mem, GuestAddress(addr), len as usize),
        None => false,
    }
}

/// Walks the chain starting at `head` in the descriptor table at
/// `desc_table` of a queue of `queue_size` entries; all buffers must be
/// device-writable when `writable`, device-readable otherwise.
pub fn walk<M: GuestMemory + GuestMemoryBackend>(
    mem: &M,
    desc_table: GuestAddress,
    queue_size: u16,
    head: u16,
    writable: bool,
) -> Result<Chain, ChainError> {
    let mut chain = Chain::new();
    let read = |idx: u16| {
        let at = desc_table.checked_add(u64::from(idx) * 16)?;
        read_descriptor(mem, at)
    };
    walk_into(
        &mut chain,
        read,
        |addr, len| in_memory(mem, addr, len),
        queue_size,
        head,
        writable,
    )?;
    Ok(chain)
}

/// Like [`walk`], filling `chain` in place, reading descriptor `i` with
/// `read_desc(i)` (None: the table entry is not in guest memory) and
/// asking `in_memory(addr, len)` whether a buffer is guest memory.
pub fn walk_into(
    chain: &mut Chain,
    read_desc: impl Fn(u16) -> Option<Descriptor>,
    in_memory: impl Fn(u64, u32) -> bool,
    queue_size: u16,
    head: u16,
    writable: bool,
) -> Result<(), ChainError> {
    chain.head = u32::from(head);
    chain.n = 0;
    chain.len = 0;
    let (n, len) = walk_segs(
        &mut chain.segs,
        read_desc,
        in_memory,
        queue_size,
        head,
        writable,
    )?;
    chain.n = n;
    chain.len = len;
    Ok(())
}

/// The common chain, one buffer, checked in one go: Some when descriptor
/// `d` is a whole valid chain (no next, not indirect, the right
/// direction, not empty, inside guest memory); None sends the caller to
/// [`walk_segs`], which takes the same decision for such a chain and
/// names what is wrong with any other.
#[inline(always)]
pub(crate) fn single(
    d: &Descriptor,
    writable: bool,
    in_memory: impl Fn(u64, u32) -> bool,
) -> Option<Seg> {
    let flags = d.flags();
    let want = if writable { F_WRITE } else { 0 };
    let (addr, len) = (d.addr().raw_value(), d.len());
    (flags & (F_NEXT | F_INDIRECT | F_WRITE) == want && len != 0 && in_memory(addr, len))
        .then_some(Seg { addr, len })
}

/// The walk itself: the chain's buffers go to `segs`; `in_memory(addr,
/// len)` says whether a buffer lies in guest memory. Returns how many
/// buffers and their total length.
#[inline(always)]
pub fn walk_segs(
    segs: &mut [Seg; MAX_SEGS],
    read_desc: impl Fn(u16) -> Option<Descriptor>,
    in_memory: impl Fn(u64, u32) -> bool,
    queue_size: u16,
    head: u16,
    writable: bool,
) -> Result<(usize, u64), ChainError> {
    let mut n = 0;
    let mut total: u64 = 0;
    let mut idx = head;
    let mut count: usize = 0;
    loop {
        if idx >= queue_size {
            return Err(ChainError::IndexOutOfRange(idx));
        }
        count += 1;
        if count > usize::from(queue_size) {
            return Err(ChainError::Loop);
        }
        if n == MAX_SEGS {
            return Err(ChainError::TooLong);
        }
        let d = read_desc(idx).ok_or(ChainError::OutOfMemory {
            addr: u64::from(idx),
            len: 16,
        })?;
        let flags = d.flags();
        if flags & F_INDIRECT != 0 {
            return Err(ChainError::Indirect);
        }
        segs[n] = check_buffer(d.addr().raw_value(), d.len(), flags, writable, &in_memory)?;
        n += 1;
        total += u64::from(d.len());
        if total > u64::from(u32::MAX) {
            return Err(ChainError::TooLarge);
        }
        if flags & F_NEXT == 0 {
            return Ok((n, total));
        }
        idx = d.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::GuestMemoryMmap;

    const TABLE: GuestAddress = GuestAddress(0x1000);

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap()
    }

    fn put(m: &GuestMemoryMmap, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        m.write_obj(
            Descriptor::new(addr, len, flags, next),
            TABLE.unchecked_add(u64::from(i) * 16),
        )
        .unwrap();
    }

    #[test]
    fn valid_chains() {
        let m = mem();
        put(&m, 0, 0x4000, 12, F_NEXT, 3);
        put(&m, 3, 0x5000, 1500, 0, 0);
        let c = walk(&m, TABLE, 8, 0, false).unwrap();
        assert_eq!(
            c.segs(),
            &[
                Seg {
                    addr: 0x4000,
                    len: 12
                },
                Seg {
                    addr: 0x5000,
                    len: 1500
                }
            ]
        );
        assert_eq!(c.len(), 1512);
        put(&m, 1, 0x6000, 2048, F_WRITE, 0);
        assert_eq!(walk(&m, TABLE, 8, 1, true).unwrap().len(), 2048);
    }

    #[test]
    fn every_hostile_shape_is_named() {
        let m = mem();
        // Buffer outside memory, and one straddling its end.
        put(&m, 0, 0x10_0000, 64, 0, 0);
        assert!(matches!(
            walk(&m, TABLE, 8, 0, false),
            Err(ChainError::OutOfMemory { .. })
        ));
        put(&m, 0, 0xfff0, 64, 0, 0);
        assert!(matches!(
            walk(&m, TABLE, 8, 0, false),
            Err(ChainError::OutOfMemory { .. })
        ));
        // A loop: 0 -> 1 -> 0.
        put(&m, 0, 0x4000, 64, F_NEXT, 1);
        put(&m, 1, 0x4000, 64, F_NEXT, 0);
        assert_eq!(walk(&m, TABLE, 8, 0, false).unwrap_err(), ChainError::Loop);
        // Next index beyond the queue, and head beyond it.
        put(&m, 1, 0x4000, 64, F_NEXT, 9);
        assert_eq!(
            walk(&m, TABLE, 8, 0, false).unwrap_err(),
            ChainError::IndexOutOfRange(9)
        );
        assert_eq!(
            walk(&m, TABLE, 8, 8, false).unwrap_err(),
            ChainError::IndexOutOfRange(8)
        );
        // Wrong direction both ways.
        put(&m, 0, 0x4000, 64, F_WRITE, 0);
        assert_eq!(
            walk(&m, TABLE, 8, 0, false).unwrap_err(),
            ChainError::WrongDirection
        );
        put(&m, 0, 0x4000, 64, 0, 0);
        assert_eq!(
            walk(&m, TABLE, 8, 0, true).unwrap_err(),
            ChainError::WrongDirection
        );
        // Zero length, indirect.
        put(&m, 0, 0x4000, 0, 0, 0);
        assert_eq!(
            walk(&m, TABLE, 8, 0, false).unwrap_err(),
            ChainError::ZeroLength
        );
        put(&m, 0, 0x4000, 64, F_INDIRECT, 0);
        assert_eq!(
            walk(&m, TABLE, 8, 0, false).unwrap_err(),
            ChainError::Indirect
        );
        // Descriptor table itself outside memory.
        assert!(matches!(
            walk(&m, GuestAddress(0xfff8), 8, 0, false),
            Err(ChainError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn over_long_chain_in_a_big_queue() {
        let m = mem();
        for i in 0..100u16 {
            put(&m, i, 0x8000, 1, F_NEXT, i + 1);
        }
        put(&m, 100, 0x8000, 1, 0, 0);
        assert_eq!(
            walk(&m, TABLE, 256, 0, false).unwrap_err(),
            ChainError::TooLong
        );
    }
}
