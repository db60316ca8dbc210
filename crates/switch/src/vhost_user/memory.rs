//! The front-end's memory, mapped from the memory table's descriptors
//! through vm-memory. Every guest access in the switch goes through
//! [`GuestMem`]; ring addresses (front-end virtual addresses) are translated
//! to guest physical addresses here.

use super::protocol::MemoryRegion;
use std::fs::File;
use std::sync::Arc;
use vm_memory::GuestMemoryRegion;
use vm_memory::{
    FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion, VolatileSlice,
};

/// Why a memory table could not be mapped.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A region is larger than this address space can map.
    #[error("memory region of {0} bytes is too large")]
    TooLarge(u64),
    /// mmap of a region failed (bad offset, bad descriptor, no memory).
    #[error("cannot map memory region at guest address {gpa:#x}")]
    Map {
        /// Guest address of the region.
        gpa: u64,
        /// Why.
        #[source]
        source: vm_memory::mmap::MmapRegionError,
    },
    /// Regions overlap or wrap.
    #[error("invalid memory table")]
    Table(#[source] vm_memory::GuestRegionCollectionError),
    /// A region could not be placed at its guest address.
    #[error("memory region at guest address {0:#x} is invalid")]
    Region(u64),
}

/// Mapped guest memory plus the front-end's view of it.
#[derive(Debug)]
pub struct GuestMem {
    mem: GuestMemoryMmap,
    regions: Vec<MemoryRegion>,
    mapped: Vec<Arc<GuestRegionMmap>>,
}

impl GuestMem {
    /// Maps every region of a memory table (shared, read-write).
    pub fn from_table(table: Vec<(MemoryRegion, File)>) -> Result<Self, MemoryError> {
        let mut mapped = Vec::with_capacity(table.len());
        let mut regions = Vec::with_capacity(table.len());
        for (r, file) in table {
            let size =
                usize::try_from(r.memory_size).map_err(|_| MemoryError::TooLarge(r.memory_size))?;
            let mmap = MmapRegion::from_file(FileOffset::new(file, r.mmap_offset), size).map_err(
                |source| MemoryError::Map {
                    gpa: r.guest_phys_addr,
                    source,
                },
            )?;
            let region = GuestRegionMmap::new(mmap, GuestAddress(r.guest_phys_addr))
                .ok_or(MemoryError::Region(r.guest_phys_addr))?;
            mapped.push(region);
            regions.push(r);
        }
        mapped.sort_by_key(vm_memory::GuestMemoryRegion::start_addr);
        let mapped: Vec<Arc<GuestRegionMmap>> = mapped.into_iter().map(Arc::new).collect();
        let mem = GuestMemoryMmap::from_arc_regions(mapped.clone()).map_err(MemoryError::Table)?;
        Ok(Self {
            mem,
            regions,
            mapped,
        })
    }

    /// The mapped memory.
    pub fn mem(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// Translates a front-end virtual address to a guest address, when
    /// `[va, va + len)` lies inside one region.
    pub fn va_to_gpa(&self, va: u64, len: u64) -> Option<GuestAddress> {
        self.regions.iter().find_map(|r| {
            let off = va.checked_sub(r.userspace_addr)?;
            let end = off.checked_add(len)?;
            (end <= r.memory_size).then(|| GuestAddress(r.guest_phys_addr + off))
        })
    }

    /// The region holding all of `[addr, addr + len)` and the offset of
    /// `addr` in it (None when the range is not inside one region).
    pub fn region_for(&self, addr: GuestAddress, len: u64) -> Option<(Arc<GuestRegionMmap>, u64)> {
        self.mapped.iter().find_map(|r| {
            let off = addr.0.checked_sub(r.start_addr().0)?;
            let end = off.checked_add(len)?;
            (end <= r.len()).then(|| (Arc::clone(r), off))
        })
    }

    /// The region holding guest address `addr` and the offset in it. A
    /// front-end's table has a handful of regions (most often one): a
    /// scan beats the generic lookup on the per-frame path.
    #[inline]
    fn find(&self, addr: u64) -> Option<(&GuestRegionMmap, u64)> {
        self.mapped.iter().find_map(|r| {
            let off = addr.wrapping_sub(r.start_addr().0);
            (off < r.len()).then_some((&**r, off))
        })
    }

    /// True when `[addr, addr + len)` is guest memory.
    #[inline]
    pub fn contains(&self, addr: u64, len: u32) -> bool {
        match self.find(addr) {
            Some((r, off)) => match off.checked_add(u64::from(len)) {
                Some(end) if end <= r.len() => true,
                // Across regions: the general check.
                Some(_) => vm_memory::GuestMemoryBackend::check_range(
                    &self.mem,
                    GuestAddress(addr),
                    len as usize,
                ),
                None => false,
            },
            None => false,
        }
    }

    /// Up to `n` bytes at `addr` that stay inside one region.
    #[inline]
    pub fn slice(&self, addr: u64, n: u64) -> Option<VolatileSlice<'_, ()>> {
        let (r, off) = self.find(addr)?;
        let n = n.min(r.len() - off);
        r.get_slice(vm_memory::MemoryRegionAddress(off), n as usize)
            .ok()
    }

    /// Hints that the cache line at guest address `addr` will be read
    /// (`write`: written) soon. Nothing happens outside guest memory.
    #[inline]
    pub fn prefetch(&self, addr: u64, write: bool) {
        if let Some((r, off)) = self.find(addr) {
            if let Ok(p) = r.get_host_address(vm_memory::MemoryRegionAddress(off)) {
                if write {
                    crate::sys::prefetch::write(p);
                } else {
                    crate::sys::prefetch::read(p);
                }
            }
        }
    }

    /// The table the front-end sent.
    pub fn regions(&self) -> &[MemoryRegion] {
        &self.regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    #[test]
    fn maps_a_memfd_and_translates() {
        let f = crate::sys::memfd::create("mem-test", 0x20000).unwrap();
        let r = MemoryRegion {
            guest_phys_addr: 0x1000_0000,
            memory_size: 0x20000,
            userspace_addr: 0x7000_0000,
            mmap_offset: 0,
        };
        let g = GuestMem::from_table(vec![(r, f)]).unwrap();
        assert_eq!(
            g.va_to_gpa(0x7000_0100, 16),
            Some(GuestAddress(0x1000_0100))
        );
        assert_eq!(g.va_to_gpa(0x7001_fff8, 16), None, "crosses the end");
        assert_eq!(g.va_to_gpa(0x6fff_ffff, 1), None);
        g.mem()
            .write_obj(0xdead_beefu32, GuestAddress(0x1000_0100))
            .unwrap();
        assert_eq!(
            g.mem().read_obj::<u32>(GuestAddress(0x1000_0100)).unwrap(),
            0xdead_beef
        );
        assert!(g.mem().read_obj::<u32>(GuestAddress(0x1002_0000)).is_err());
    }

    #[test]
    fn refuses_overlaps() {
        let a = crate::sys::memfd::create("a", 0x2000).unwrap();
        let b = crate::sys::memfd::create("b", 0x2000).unwrap();
        let r = MemoryRegion {
            guest_phys_addr: 0,
            memory_size: 0x2000,
            userspace_addr: 0,
            mmap_offset: 0,
        };
        let r2 = MemoryRegion {
            guest_phys_addr: 0x1000,
            ..r
        };
        assert!(GuestMem::from_table(vec![(r, a), (r2, b)]).is_err());
    }
}
