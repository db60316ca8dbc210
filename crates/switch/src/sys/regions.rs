//! A front-end's mapped regions as the per-frame path looks them up: a
//! flat table of guest start, length and host address, scanned first
//! region first (a table most often has one), so finding the bytes at a
//! guest address chases no pointer. The table holds the mappings, so a
//! host address it gives stays mapped while it is borrowed.

use super::span::Span;
use std::sync::Arc;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap};

/// One mapped region.
#[derive(Debug, Clone, Copy)]
struct Host {
    /// Guest address of its first byte.
    start: u64,
    /// Its length.
    len: u64,
    /// Host address of its first byte.
    addr: usize,
}

/// The mappings and their lookup table.
#[derive(Debug)]
pub struct Regions {
    mapped: Vec<Arc<GuestRegionMmap>>,
    hosts: Vec<Host>,
}

impl Regions {
    /// The table of `mapped` (sorted by guest address).
    pub fn new(mapped: Vec<Arc<GuestRegionMmap>>) -> Self {
        let hosts = mapped
            .iter()
            .map(|r| Host {
                start: r.start_addr().0,
                len: r.len(),
                addr: r.as_ptr() as usize,
            })
            .collect();
        Self { mapped, hosts }
    }

    /// The mappings.
    pub fn mapped(&self) -> &[Arc<GuestRegionMmap>] {
        &self.mapped
    }

    /// The index of the region holding guest address `addr`, and the
    /// offset in it.
    #[inline(always)]
    pub fn find(&self, addr: u64) -> Option<(usize, u64)> {
        let first = self.hosts.first()?;
        let off = addr.wrapping_sub(first.start);
        if off < first.len {
            return Some((0, off));
        }
        self.find_other(addr)
    }

    /// [`Regions::find`] past the first region.
    #[inline(never)]
    fn find_other(&self, addr: u64) -> Option<(usize, u64)> {
        self.hosts.iter().enumerate().skip(1).find_map(|(i, h)| {
            let off = addr.wrapping_sub(h.start);
            (off < h.len).then_some((i, off))
        })
    }

    /// Bytes of region `i` from offset `off` to its end.
    #[inline(always)]
    pub fn left(&self, i: usize, off: u64) -> u64 {
        self.hosts[i].len - off
    }

    /// `[addr, addr + len)` as a span, when it lies inside one region.
    #[inline(always)]
    pub fn span(&self, addr: u64, len: u64) -> Option<Span<'_>> {
        let (i, off) = self.find(addr)?;
        let h = &self.hosts[i];
        if len > h.len - off {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        // SAFETY: `[off, off + len)` lies inside region `i`, mapped at
        // `h.addr` and held mapped by `self.mapped` while `self` is borrowed.
        Some(unsafe { Span::from_raw((h.addr + off as usize) as *mut u8, len) })
    }

    /// The host address of offset `off` of region `i` (as [`Regions::find`]
    /// gave them), for a prefetch hint.
    #[inline(always)]
    pub fn host_at(&self, i: usize, off: u64) -> *const u8 {
        (self.hosts[i].addr + off as usize) as *const u8
    }

    /// The host address of guest address `addr` (for a prefetch hint).
    #[inline(always)]
    pub fn host(&self, addr: u64) -> Option<*const u8> {
        let (i, off) = self.find(addr)?;
        Some((self.hosts[i].addr + off as usize) as *const u8)
    }
}

#[cfg(test)]
mod tests {
    use super::Regions;
    use std::sync::Arc;
    use vm_memory::{GuestAddress, GuestRegionMmap, MmapRegion};

    fn region(start: u64, len: usize) -> Arc<GuestRegionMmap> {
        let m = MmapRegion::new(len).unwrap();
        Arc::new(GuestRegionMmap::new(m, GuestAddress(start)).unwrap())
    }

    #[test]
    fn addresses_are_found_in_either_region_and_nowhere_else() {
        let r = Regions::new(vec![region(0x1000, 0x1000), region(0x10000, 0x2000)]);
        assert_eq!(r.find(0x1000), Some((0, 0)));
        assert_eq!(r.find(0x1fff), Some((0, 0xfff)));
        assert_eq!(r.find(0x10010), Some((1, 0x10)));
        for gap in [0, 0xfff, 0x2000, 0xffff, 0x12000, u64::MAX] {
            assert_eq!(r.find(gap), None, "{gap:#x}");
            assert!(r.host(gap).is_none());
        }
        assert_eq!(r.left(1, 0x10), 0x1ff0);
        let base = r.mapped()[1].as_ptr() as usize;
        assert_eq!(r.host(0x10010), Some((base + 0x10) as *const u8));
    }

    #[test]
    fn a_span_must_fit_inside_its_region() {
        let r = Regions::new(vec![region(0x1000, 0x1000), region(0x2000, 0x1000)]);
        assert_eq!(r.span(0x1f00, 0x100).map(|s| s.len()), Some(0x100));
        // Across the boundary into the next region: not one span.
        assert!(r.span(0x1f00, 0x101).is_none());
        assert!(r.span(0x2fff, 2).is_none());
        assert!(r.span(0x3000, 1).is_none());
        assert!(r.span(0x1000, u64::MAX).is_none());
        let mut out = [0u8; 4];
        assert_eq!(r.span(0x2ffc, 4).unwrap().read_into(&mut out), 4);
    }
}
