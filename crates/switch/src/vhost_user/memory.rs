//! The front-end's memory, mapped from the memory table's descriptors
//! through vm-memory. Every guest access in the switch goes through
//! [`GuestMem`]; ring addresses (front-end virtual addresses) are translated
//! to guest physical addresses here.

use super::protocol::MemoryRegion;
use crate::sys::regions::Regions;
use crate::sys::sigbus;
use crate::sys::span::Span;
use crate::wire::virtio_net::HEADER_LEN;
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
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
    /// A region extends past the end of the file that backs it (mapping
    /// it would fault on first access).
    #[error(
        "memory region at guest address {gpa:#x} needs {needed} bytes of its file, which has {size}"
    )]
    ShortFile {
        /// Guest address of the region.
        gpa: u64,
        /// `mmap_offset + memory_size`.
        needed: u64,
        /// The file's size.
        size: u64,
    },
    /// A region's descriptor is not a regular file (memfd, tmpfs, hugetlbfs).
    #[error("memory region at guest address {0:#x} is not backed by a regular file")]
    NotAFile(u64),
    /// The table maps more than the port may.
    #[error("memory table of {total} bytes exceeds the port's cap of {cap} bytes")]
    OverCap {
        /// Bytes the table maps.
        total: u64,
        /// The cap.
        cap: u64,
    },
    /// The file could not be examined.
    #[error("cannot examine the file of the memory region at guest address {gpa:#x}")]
    Stat {
        /// Guest address of the region.
        gpa: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Too many guest memory mappings in the process.
    #[error(transparent)]
    Registry(#[from] crate::sys::sigbus::Full),
}

/// Default cap on the guest memory one port may map: 1 TiB, above any
/// guest this switch is likely to serve, below what a hostile front-end
/// would need to exhaust the switch's address space with a few ports.
pub const DEFAULT_MAX_MEMORY: u64 = 1 << 40;

/// Mapped guest memory plus the front-end's view of it.
#[derive(Debug)]
pub struct GuestMem {
    mem: GuestMemoryMmap,
    regions: Vec<MemoryRegion>,
    /// The mappings, with the per-frame path's lookup table and their
    /// registrations with the SIGBUS handler; shared with a batch of
    /// copies that holds addresses in them (`sys/copy_batch.rs`).
    maps: Arc<Regions>,
}

impl GuestMem {
    /// Maps every region of a memory table (shared, read-write), refusing
    /// a table that maps more than `cap` bytes or a region its file cannot
    /// back.
    pub fn from_table(table: Vec<(MemoryRegion, File)>, cap: u64) -> Result<Self, MemoryError> {
        let total = table
            .iter()
            .fold(0u64, |t, (r, _)| t.saturating_add(r.memory_size));
        if total > cap {
            return Err(MemoryError::OverCap { total, cap });
        }
        let mut mapped = Vec::with_capacity(table.len());
        let mut regions = Vec::with_capacity(table.len());
        let mut pages = Vec::with_capacity(table.len());
        for (r, file) in table {
            pages.push(check_file(&r, &file)?);
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
        let mut guards = Vec::with_capacity(mapped.len());
        for (m, page) in mapped.iter().zip(pages) {
            guards.push(sigbus::Mapping::register(m.as_ptr(), m.size(), page)?);
        }
        mapped.sort_by_key(vm_memory::GuestMemoryRegion::start_addr);
        let mapped: Vec<Arc<GuestRegionMmap>> = mapped.into_iter().map(Arc::new).collect();
        let mem = GuestMemoryMmap::from_arc_regions(mapped.clone()).map_err(MemoryError::Table)?;
        Ok(Self {
            mem,
            regions,
            maps: Arc::new(Regions::new(mapped, guards)),
        })
    }

    /// True once a page of this memory vanished under the switch (its file
    /// was truncated): the switch now reads zeros there and the port must
    /// be reset.
    pub fn lost(&self) -> bool {
        self.maps.lost()
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
        self.maps.mapped().iter().find_map(|r| {
            let off = addr.0.checked_sub(r.start_addr().0)?;
            let end = off.checked_add(len)?;
            (end <= r.len()).then(|| (Arc::clone(r), off))
        })
    }

    /// True when `[addr, addr + len)` is guest memory.
    #[inline]
    pub fn contains(&self, addr: u64, len: u32) -> bool {
        match self.maps.find(addr) {
            Some((i, off)) if u64::from(len) <= self.maps.left(i, off) => true,
            // Across regions: the general check.
            Some(_) => vm_memory::GuestMemoryBackend::check_range(
                &self.mem,
                GuestAddress(addr),
                len as usize,
            ),
            None => false,
        }
    }

    /// Up to `n` bytes at `addr` that stay inside one region.
    #[inline]
    pub fn slice(&self, addr: u64, n: u64) -> Option<VolatileSlice<'_, ()>> {
        let (i, off) = self.maps.find(addr)?;
        let r = &self.maps.mapped()[i];
        let n = n.min(r.len() - off);
        r.get_slice(vm_memory::MemoryRegionAddress(off), n as usize)
            .ok()
    }

    /// The lookup table, for a batch of copies to hold.
    #[inline(always)]
    pub fn maps(&self) -> &Arc<Regions> {
        &self.maps
    }

    /// `[addr, addr + len)` as a span of one region (the fast case's
    /// copies), when it lies inside one.
    #[inline]
    pub fn span(&self, addr: u64, len: u64) -> Option<Span<'_>> {
        self.maps.span(addr, len)
    }

    /// [`GuestMem::contains`] and, when it does and `hint`,
    /// [`GuestMem::prefetch`] of the same bytes, with one lookup: a popped
    /// buffer is checked and asked for at once.
    #[inline(always)]
    pub fn contains_prefetch(&self, addr: u64, len: u32, hint: bool, write: bool) -> bool {
        let Some(p) = self.maps.locate(addr, u64::from(len)) else {
            // Across regions, or not guest memory: the general check.
            return self.contains(addr, len);
        };
        if hint {
            hint_lines(p, len, write);
        }
        true
    }

    /// Hints that the cache lines holding the first `len` bytes (at most
    /// two lines: a frame's headers) at guest address `addr` will be read
    /// (`write`: written) soon: one lookup for both. Nothing happens
    /// outside guest memory.
    #[inline]
    pub fn prefetch(&self, addr: u64, len: u32, write: bool) {
        if let Some(p) = self.maps.host(addr) {
            hint_lines(p, len, write);
        }
    }

    /// The table the front-end sent.
    pub fn regions(&self) -> &[MemoryRegion] {
        &self.regions
    }
}

/// Checks that `r`'s file backs all of it; returns its page size (the
/// block size: 4 KiB, or the huge page size on hugetlbfs).
fn check_file(r: &MemoryRegion, file: &File) -> Result<usize, MemoryError> {
    let gpa = r.guest_phys_addr;
    let meta = file
        .metadata()
        .map_err(|source| MemoryError::Stat { gpa, source })?;
    let ft = meta.file_type();
    if !ft.is_file() || ft.is_block_device() {
        return Err(MemoryError::NotAFile(gpa));
    }
    let needed = r.mmap_offset.saturating_add(r.memory_size);
    if meta.len() < needed {
        return Err(MemoryError::ShortFile {
            gpa,
            needed,
            size: meta.len(),
        });
    }
    Ok(usize::try_from(meta.blksize()).unwrap_or(4096).max(4096))
}

/// Hints the lines holding the first `len` bytes (at most two: a frame's
/// headers) at host address `p`, for reading or (`write`) for ownership.
///
/// A buffer the switch will write starts with a virtio-net header (at most
/// [`HEADER_LEN`] bytes), which it stores only where it changes
/// (`Span::write_header`). When the header's line holds none of the
/// frame (a DPDK driver puts the header at the end of a line, the frame at
/// the next), that line is asked for reading only: taken for ownership, it
/// would leave the driver's core, which reads it back, for nothing.
#[inline(always)]
fn hint_lines(p: *const u8, len: u32, write: bool) {
    // The last byte wanted, when its line is not the first's (a hint
    // never faults, even past the region).
    let line = |q: *const u8| q as usize / 64;
    let last = p.wrapping_add(len.clamp(1, 64) as usize - 1);
    let second = (line(last) != line(p)).then_some(last);
    let header_only = write && line(p.wrapping_add(HEADER_LEN)) != line(p);
    if write && !header_only {
        crate::sys::prefetch::write(p);
    } else {
        crate::sys::prefetch::read(p);
    }
    if let Some(q) = second {
        // A branch, not a function pointer: the hints inline to one
        // instruction.
        if write {
            crate::sys::prefetch::write(q)
        } else {
            crate::sys::prefetch::read(q)
        }
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
        let g = GuestMem::from_table(vec![(r, f)], DEFAULT_MAX_MEMORY).unwrap();
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
        assert!(GuestMem::from_table(vec![(r, a), (r2, b)], DEFAULT_MAX_MEMORY).is_err());
    }

    fn region(size: u64) -> MemoryRegion {
        MemoryRegion {
            guest_phys_addr: 0,
            memory_size: size,
            userspace_addr: 0,
            mmap_offset: 0,
        }
    }

    #[test]
    fn refuses_a_file_shorter_than_its_region() {
        let f = crate::sys::memfd::create("short", 0x1000).unwrap();
        let e = GuestMem::from_table(vec![(region(0x2000), f)], DEFAULT_MAX_MEMORY).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryError::ShortFile {
                    needed: 0x2000,
                    size: 0x1000,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn refuses_what_is_not_a_file() {
        let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = GuestMem::from_table(
            vec![(region(0x1000), File::from(std::os::fd::OwnedFd::from(r)))],
            DEFAULT_MAX_MEMORY,
        )
        .unwrap_err();
        assert!(matches!(e, MemoryError::NotAFile(0)), "{e}");
    }

    #[test]
    fn refuses_a_table_over_the_cap() {
        let f = crate::sys::memfd::create("big", 0x4000).unwrap();
        let e = GuestMem::from_table(vec![(region(0x4000), f)], 0x3000).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryError::OverCap {
                    total: 0x4000,
                    cap: 0x3000
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_truncated_region_is_lost_not_fatal() {
        let f = crate::sys::memfd::create("trunc", 0x4000).unwrap();
        let g = GuestMem::from_table(
            vec![(region(0x4000), f.try_clone().unwrap())],
            DEFAULT_MAX_MEMORY,
        )
        .unwrap();
        assert!(!g.lost());
        f.set_len(0).unwrap();
        assert_eq!(g.mem().read_obj::<u64>(GuestAddress(0x3000)).unwrap(), 0);
        assert!(g.lost());
    }
}
