//! Byte movement over validated buffer lists: guest to guest in one copy,
//! guest to local and local to guest. Buffers were validated against the
//! memory map by [`super::chain::walk`]; these functions still go through
//! vm-memory's checked accessors and simply stop at anything unmapped.

use super::chain::Seg;
use super::memory::GuestMem;
use crate::wire::checksum;
use vm_memory::{
    GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
    VolatileSlice,
};

/// Walks a buffer list from a byte offset, yielding (address, length) pieces.
struct Pieces<'a> {
    segs: &'a [Seg],
    i: usize,
    off: u64,
}

impl<'a> Pieces<'a> {
    fn new(segs: &'a [Seg], mut skip: u64) -> Self {
        let mut i = 0;
        while i < segs.len() && skip >= u64::from(segs[i].len) {
            skip -= u64::from(segs[i].len);
            i += 1;
        }
        Self { segs, i, off: skip }
    }

    /// The next piece of at most `max` bytes, without consuming it.
    fn peek(&self, max: u64) -> Option<(u64, u64)> {
        let s = self.segs.get(self.i)?;
        Some((s.addr + self.off, (u64::from(s.len) - self.off).min(max)))
    }

    fn advance(&mut self, n: u64) {
        self.off += n;
        if let Some(s) = self.segs.get(self.i) {
            if self.off >= u64::from(s.len) {
                self.i += 1;
                self.off = 0;
            }
        }
    }
}

/// Guest memory as the copies see it: pieces that stay inside one region.
pub trait Slices {
    /// A slice of at most `n` bytes at `addr` that stays inside one region.
    fn slice(&self, addr: u64, n: u64) -> Option<VolatileSlice<'_, ()>>;
}

impl Slices for GuestMemoryMmap {
    fn slice(&self, addr: u64, n: u64) -> Option<VolatileSlice<'_, ()>> {
        let r = self.find_region(GuestAddress(addr))?;
        let off = addr - r.start_addr().0;
        let n = n.min(r.len() - off);
        r.get_slice(MemoryRegionAddress(off), n as usize).ok()
    }
}

impl Slices for GuestMem {
    #[inline]
    fn slice(&self, addr: u64, n: u64) -> Option<VolatileSlice<'_, ()>> {
        GuestMem::slice(self, addr, n)
    }
}

/// Copies up to `len` bytes from `src` (after `src_skip`) to `dst` (after
/// `dst_skip`), directly between the two memories. Returns bytes copied.
pub fn copy<S: Slices, D: Slices>(
    src_mem: &S,
    src: &[Seg],
    src_skip: u64,
    dst_mem: &D,
    dst: &[Seg],
    dst_skip: u64,
    len: u64,
) -> u64 {
    // The common case: both ranges inside the first buffers (one piece each).
    if let (Some(a), Some(b)) = (src.first(), dst.first()) {
        if src_skip + len <= u64::from(a.len) && dst_skip + len <= u64::from(b.len) {
            if let (Some(from), Some(to)) = (
                src_mem.slice(a.addr + src_skip, len),
                dst_mem.slice(b.addr + dst_skip, len),
            ) {
                if from.len() as u64 == len && to.len() as u64 == len {
                    from.copy_to_volatile_slice(to);
                    return len;
                }
            }
        }
    }
    let mut s = Pieces::new(src, src_skip);
    let mut d = Pieces::new(dst, dst_skip);
    let mut done = 0;
    while done < len {
        let Some((sa, sn)) = s.peek(len - done) else {
            break;
        };
        let Some((da, dn)) = d.peek(sn) else { break };
        let (Some(from), Some(to)) = (src_mem.slice(sa, dn), dst_mem.slice(da, dn)) else {
            break;
        };
        let n = from.len().min(to.len());
        from.subslice(0, n)
            .ok()
            .map(|f| to.subslice(0, n).ok().map(|t| f.copy_to_volatile_slice(t)));
        s.advance(n as u64);
        d.advance(n as u64);
        done += n as u64;
    }
    done
}

/// The common case of [`read`] and [`write`]: `[skip, skip + n)` lies in
/// the first buffer, one slice; `f` moves the bytes. None otherwise.
#[inline]
fn first_piece<M: Slices>(
    mem: &M,
    segs: &[Seg],
    skip: u64,
    n: usize,
    f: impl FnOnce(&VolatileSlice<'_, ()>) -> usize,
) -> Option<usize> {
    let a = segs.first()?;
    if skip + n as u64 > u64::from(a.len) {
        return None;
    }
    let s = mem.slice(a.addr + skip, n as u64)?;
    (s.len() == n).then(|| f(&s))
}

/// Reads up to `out.len()` bytes from guest buffers (after `skip`) into `out`.
pub fn read<M: Slices>(mem: &M, segs: &[Seg], skip: u64, out: &mut [u8]) -> usize {
    if let Some(done) = first_piece(mem, segs, skip, out.len(), |s| s.copy_to(&mut *out)) {
        return done;
    }
    let mut p = Pieces::new(segs, skip);
    let mut done = 0;
    while done < out.len() {
        let Some((a, n)) = p.peek((out.len() - done) as u64) else {
            break;
        };
        let Some(from) = mem.slice(a, n) else { break };
        let n = from.len();
        from.copy_to(&mut out[done..done + n]);
        p.advance(n as u64);
        done += n;
    }
    done
}

/// Writes `data` into guest buffers after `skip`; returns bytes written.
pub fn write<M: Slices>(mem: &M, segs: &[Seg], skip: u64, data: &[u8]) -> usize {
    if let Some(done) = first_piece(mem, segs, skip, data.len(), |s| {
        s.copy_from(data);
        data.len()
    }) {
        return done;
    }
    let mut p = Pieces::new(segs, skip);
    let mut done = 0;
    while done < data.len() {
        let Some((a, n)) = p.peek((data.len() - done) as u64) else {
            break;
        };
        let Some(to) = mem.slice(a, n) else { break };
        let n = to.len();
        to.copy_from(&data[done..done + n]);
        p.advance(n as u64);
        done += n;
    }
    done
}

/// Bytes staged at a time by the copies that checksum on the way: small
/// enough to stay in the first-level cache between the read and the write.
const STAGE: usize = 2048;

/// Adds the sum of `bytes`, which come `at` bytes into the data being
/// summed, to `acc` (a piece at an odd offset is byte-swapped).
fn sum_at(acc: u32, at: u64, bytes: &[u8]) -> u32 {
    let s = checksum::sum(bytes);
    checksum::add(acc, if at % 2 == 1 { checksum::odd(s) } else { s })
}

/// Like [`copy`], also returning the one's-complement sum of the bytes
/// copied (what [`checksum::sum`] gives over them): each piece is read
/// once into a small staging buffer, summed there and written from there,
/// so the bytes cross memory once.
pub fn copy_sum<S: Slices, D: Slices>(
    src_mem: &S,
    src: &[Seg],
    src_skip: u64,
    dst_mem: &D,
    dst: &[Seg],
    dst_skip: u64,
    len: u64,
) -> (u64, u32) {
    let mut stage = [0u8; STAGE];
    let mut s = Pieces::new(src, src_skip);
    let mut d = Pieces::new(dst, dst_skip);
    let (mut done, mut acc) = (0u64, 0u32);
    while done < len {
        let Some((sa, sn)) = s.peek((len - done).min(STAGE as u64)) else {
            break;
        };
        let Some((da, dn)) = d.peek(sn) else { break };
        let (Some(from), Some(to)) = (src_mem.slice(sa, dn), dst_mem.slice(da, dn)) else {
            break;
        };
        let n = from.len().min(to.len());
        let got = from.copy_to(&mut stage[..n]);
        acc = sum_at(acc, done, &stage[..got]);
        to.copy_from(&stage[..got]);
        s.advance(got as u64);
        d.advance(got as u64);
        done += got as u64;
        if got < n {
            break;
        }
    }
    (done, acc)
}

/// Like [`write()`], also returning the one's-complement sum of the bytes written.
pub fn write_sum<M: Slices>(mem: &M, segs: &[Seg], skip: u64, data: &[u8]) -> (usize, u32) {
    let n = write(mem, segs, skip, data);
    (n, checksum::sum(&data[..n]))
}

/// Where a frame's bytes are: in a front-end's memory, or in a local buffer.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    /// Guest buffers (validated).
    Guest {
        /// The guest's memory.
        mem: &'a GuestMem,
        /// The buffers.
        segs: &'a [Seg],
    },
    /// Local bytes.
    Local(&'a [u8]),
}

impl Src<'_> {
    /// Reads up to `out.len()` bytes after `skip`; returns bytes read.
    pub fn read(&self, skip: u64, out: &mut [u8]) -> usize {
        match self {
            Src::Guest { mem, segs } => read(*mem, segs, skip, out),
            Src::Local(b) => {
                let from = (skip as usize).min(b.len());
                let n = out.len().min(b.len() - from);
                out[..n].copy_from_slice(&b[from..from + n]);
                n
            }
        }
    }

    /// Copies `len` bytes after `skip` into guest buffers `dst` (after
    /// `dst_skip`); with `sum`, also returns their one's-complement sum
    /// (else 0). Returns bytes copied and the sum.
    pub fn copy_to_guest<D: Slices>(
        &self,
        skip: u64,
        dst_mem: &D,
        dst: &[Seg],
        dst_skip: u64,
        len: u64,
        sum: bool,
    ) -> (u64, u32) {
        match (self, sum) {
            (Src::Guest { mem, segs }, false) => {
                (copy(*mem, segs, skip, dst_mem, dst, dst_skip, len), 0)
            }
            (Src::Guest { mem, segs }, true) => {
                copy_sum(*mem, segs, skip, dst_mem, dst, dst_skip, len)
            }
            (Src::Local(b), _) => {
                let from = (skip as usize).min(b.len());
                let to = (from as u64 + len).min(b.len() as u64) as usize;
                if sum {
                    let (n, s) = write_sum(dst_mem, dst, dst_skip, &b[from..to]);
                    (n as u64, s)
                } else {
                    (write(dst_mem, dst, dst_skip, &b[from..to]) as u64, 0)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_across_uneven_segments_and_regions() {
        let a = GuestMemoryMmap::from_ranges(&[
            (GuestAddress(0), 0x1000),
            (GuestAddress(0x1000), 0x1000),
        ])
        .unwrap();
        let b = GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10000), 0x4000)]).unwrap();
        let data: Vec<u8> = (0..200u8).collect();
        // Source straddles the two regions of `a`.
        let src = [
            Seg {
                addr: 0xfc0,
                len: 100,
            },
            Seg {
                addr: 0x1800,
                len: 100,
            },
        ];
        assert_eq!(write(&a, &src, 0, &data), 200);
        let dst = [
            Seg {
                addr: 0x10000,
                len: 7,
            },
            Seg {
                addr: 0x12000,
                len: 300,
            },
        ];
        assert_eq!(copy(&a, &src, 10, &b, &dst, 3, 190), 190);
        let mut out = [0u8; 190];
        assert_eq!(read(&b, &dst, 3, &mut out), 190);
        assert_eq!(&out[..], &data[10..]);
        // Asking for more than the buffers hold stops at their end.
        assert_eq!(copy(&a, &src, 0, &b, &dst, 0, 1000), 200);
        let mut big = [0u8; 400];
        assert_eq!(read(&b, &dst, 0, &mut big), 307);
    }
}
