//! A front-end's mapped regions as the per-frame path looks them up: a
//! flat table of guest start, length and host address, scanned first
//! region first (a table most often has one), so finding the bytes at a
//! guest address is a few compares. The table holds the mappings and their
//! registrations with the SIGBUS handler, so a host address it gives stays
//! mapped, and a vanished page under it is caught, while it is held.

use super::sigbus;
use super::span::Span;
use std::sync::Arc;
use vm_memory::{GuestMemoryRegion, GuestRegionMmap};

/// One mapped region (the default: an empty one, holding no address).
#[derive(Debug, Clone, Copy, Default)]
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
    /// The first region (an empty one when there is none), held here and
    /// not only in `hosts`: a lookup loads its fields straight from the
    /// table, not through the vector's pointer first. The fast case looks
    /// up five ranges a frame, each a chain of dependent loads from the
    /// port to the table, so one load fewer per lookup shows in the
    /// frame's cost (`examples/datapath_cost`).
    first: Host,
    hosts: Vec<Host>,
    /// The mappings' registrations: declared before `mapped`, so they are
    /// dropped first and no address is registered after it is unmapped.
    guards: Vec<sigbus::Mapping>,
    mapped: Vec<Arc<GuestRegionMmap>>,
}

impl Regions {
    /// The table of `mapped` (sorted by guest address), holding their
    /// SIGBUS registrations `guards`.
    pub fn new(mapped: Vec<Arc<GuestRegionMmap>>, guards: Vec<sigbus::Mapping>) -> Self {
        let hosts: Vec<Host> = mapped
            .iter()
            .map(|r| Host {
                start: r.start_addr().0,
                len: r.len(),
                addr: r.as_ptr() as usize,
            })
            .collect();
        Self {
            first: hosts.first().copied().unwrap_or_default(),
            hosts,
            guards,
            mapped,
        }
    }

    /// True once a page of a mapping vanished (its file was truncated).
    pub fn lost(&self) -> bool {
        self.guards.iter().any(sigbus::Mapping::lost)
    }

    /// The mappings.
    pub fn mapped(&self) -> &[Arc<GuestRegionMmap>] {
        &self.mapped
    }

    /// The index of the region holding guest address `addr`, and the
    /// offset in it.
    #[inline(always)]
    pub fn find(&self, addr: u64) -> Option<(usize, u64)> {
        let first = &self.first;
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

    /// The host address of `[addr, addr + len)`, when it lies inside one
    /// region: the per-frame check, one lookup for the range and its
    /// address.
    #[inline(always)]
    pub fn locate(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let first = &self.first;
        let off = addr.wrapping_sub(first.start);
        if off < first.len && len <= first.len - off {
            return Some((first.addr + off as usize) as *mut u8);
        }
        self.locate_other(addr, len)
    }

    /// [`Regions::locate`] past the first region (regions do not overlap,
    /// so a range that starts in the first and leaves it is found nowhere).
    #[inline(never)]
    fn locate_other(&self, addr: u64, len: u64) -> Option<*mut u8> {
        self.hosts.iter().skip(1).find_map(|h| {
            let off = addr.wrapping_sub(h.start);
            (off < h.len && len <= h.len - off).then(|| (h.addr + off as usize) as *mut u8)
        })
    }

    /// `[addr, addr + len)` as a span, when it lies inside one region.
    #[inline(always)]
    pub fn span(&self, addr: u64, len: u64) -> Option<Span<'_>> {
        let p = self.locate(addr, len)?;
        let len = usize::try_from(len).ok()?;
        // SAFETY: the `len` bytes at `p` lie inside one region (`locate`),
        // held mapped by `self.mapped` while `self` is borrowed.
        Some(unsafe { Span::from_raw(p, len) })
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
    fn an_empty_table_finds_nothing_not_even_address_zero() {
        let t = Regions::new(Vec::new(), Vec::new());
        for addr in [0, 1, 0x1000, u64::MAX] {
            assert_eq!(t.find(addr), None);
            assert_eq!(t.locate(addr, 0), None);
            assert_eq!(t.locate(addr, 1), None);
            assert!(t.host(addr).is_none());
        }
    }

    #[test]
    fn addresses_are_found_in_either_region_and_nowhere_else() {
        let r = Regions::new(
            vec![region(0x1000, 0x1000), region(0x10000, 0x2000)],
            Vec::new(),
        );
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
    fn a_range_is_located_only_inside_one_region() {
        let r = Regions::new(
            vec![region(0x1000, 0x1000), region(0x10000, 0x2000)],
            Vec::new(),
        );
        let (a, b) = (
            r.mapped()[0].as_ptr() as usize,
            r.mapped()[1].as_ptr() as usize,
        );
        assert_eq!(r.locate(0x1000, 0x1000), Some(a as *mut u8));
        assert_eq!(r.locate(0x1ff0, 0x10), Some((a + 0xff0) as *mut u8));
        assert_eq!(r.locate(0x11ff0, 0x10), Some((b + 0x1ff0) as *mut u8));
        for (addr, len) in [
            (0x1ff0, 0x11),
            (0x11ff0, 0x11),
            (0x2000, 1),
            (0, 0x1001),
            (0x1000, u64::MAX),
            (u64::MAX, 2),
        ] {
            assert_eq!(r.locate(addr, len), None, "{addr:#x}+{len:#x}");
        }
    }

    #[test]
    fn a_span_must_fit_inside_its_region() {
        let r = Regions::new(
            vec![region(0x1000, 0x1000), region(0x2000, 0x1000)],
            Vec::new(),
        );
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
