//! The dirty-page log of a live migration (vhost-user's
//! VHOST_USER_PROTOCOL_F_LOG_SHMFD): a bitmap the front-end shares through
//! SET_LOG_BASE, one bit per 4 KiB page of guest physical address (bit
//! `page % 8` of byte `page / 8`), which the switch sets for every guest
//! page it writes while VHOST_F_LOG_ALL is on. The front-end (QEMU) scans
//! and clears it while it copies memory, and copies again what was marked.
//!
//! A mark is an atomic OR, as the front-end clears bits concurrently. It
//! comes after the write it records: the other order could let the
//! front-end clear the bit and copy the page between mark and write, and
//! lose the write. Marks past the log's end are dropped.
//!
//! The log is the front-end's file, so it is checked once, when it
//! arrives, as guest memory is: a regular file whose real size (fstat)
//! holds `offset + size` (no overflow); a size that covers the memory
//! table already mapped (the highest guest address's page) and exceeds it
//! by at most [`SLACK`] (QEMU grows its log with 4 KiB to spare); only
//! the pages holding `[offset, offset + size)` mapped, from the page the
//! offset lies in (a sparse file with a huge offset maps a few pages, not
//! the address space below the offset); and those pages counted with the
//! guest memory against the port's cap (`max_guest_memory_mib`), released
//! when the log is dropped. A log that vanishes later (its file truncated)
//! is caught by the SIGBUS handler like guest memory: the switch writes
//! into zeros and resets the port ([`DirtyLog::lost`]).

use crate::sys::sigbus;
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

/// Bytes of guest memory per bit of the log (VHOST_LOG_PAGE).
pub const LOG_PAGE: u64 = 4096;

/// Bytes a log may exceed what the memory table needs by: QEMU allocates
/// its log in 8-byte chunks and, when it grows it, 4 KiB more than needed
/// (VHOST_LOG_BUFFER).
pub const SLACK: u64 = 4096 + 8;

/// Why a log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The descriptor is not a regular file (memfd, tmpfs, hugetlbfs).
    #[error("the log descriptor is not a regular file")]
    NotAFile,
    /// The file could not be examined.
    #[error("cannot examine the log file")]
    Stat(#[source] std::io::Error),
    /// Zero bytes, or `offset + size` overflows.
    #[error("log of {size} bytes at offset {offset} is invalid")]
    Invalid {
        /// Bytes of log.
        size: u64,
        /// Where it starts in the file.
        offset: u64,
    },
    /// The file is shorter than `offset + size` (mapping it would fault).
    #[error("log needs {needed} bytes of its file, which has {file}")]
    ShortFile {
        /// `offset + size`.
        needed: u64,
        /// The file's size.
        file: u64,
    },
    /// No memory table yet: nothing says how large the log should be.
    #[error("log sent before any memory table")]
    NoMemory,
    /// The log cannot cover the guest memory already mapped.
    #[error("log of {size} bytes covers less than the guest memory's {needed}")]
    TooSmall {
        /// Bytes of log.
        size: u64,
        /// Bytes guest memory needs.
        needed: u64,
    },
    /// Larger than the memory table needs (by more than [`SLACK`]).
    #[error("log of {size} bytes exceeds the {needed} bytes the memory table needs")]
    TooLarge {
        /// Bytes of log.
        size: u64,
        /// Bytes the memory table needs.
        needed: u64,
    },
    /// Mapping it would take the port past its guest memory cap.
    #[error("log mapping of {mapped} bytes exceeds the {left} bytes left of the port's guest memory cap")]
    OverCap {
        /// Bytes the mapping takes.
        mapped: u64,
        /// Bytes of the cap the memory table leaves.
        left: u64,
    },
    /// mmap failed.
    #[error("cannot map the log")]
    Map(#[source] vm_memory::mmap::MmapRegionError),
    /// Too many guest memory mappings in the process.
    #[error(transparent)]
    Registry(#[from] sigbus::Full),
}

/// Bytes of log that cover guest physical addresses below `end`.
pub fn bytes_for(end: u64) -> u64 {
    end.div_ceil(LOG_PAGE).div_ceil(8)
}

/// The log pages `[gpa, gpa + len)` touches, as a range of page numbers.
pub fn pages(gpa: u64, len: u64) -> std::ops::Range<u64> {
    if len == 0 {
        return 0..0;
    }
    let last = gpa.saturating_add(len - 1);
    gpa / LOG_PAGE..last / LOG_PAGE + 1
}

/// What a log must be, given the guest memory a port has mapped.
#[derive(Debug, Clone, Copy)]
pub struct LogBounds {
    /// The highest guest address mapped, plus one (0: no table yet).
    pub mem_end: u64,
    /// Bytes of the port's guest memory cap the memory table leaves.
    pub left: u64,
}

/// A mapped log.
#[derive(Debug)]
pub struct DirtyLog {
    /// The mapping's registration with the SIGBUS handler: declared
    /// first, so it is dropped before the mapping is unmapped.
    guard: sigbus::Mapping,
    map: MmapRegion,
    /// Where the bitmap starts in the mapping (the offset's place in its page).
    offset: usize,
    /// Bytes of bitmap.
    size: u64,
}

impl DirtyLog {
    /// Maps `size` bytes of `file` from `offset`, for a port whose guest
    /// memory is as `bounds` says.
    pub fn map(file: File, size: u64, offset: u64, bounds: LogBounds) -> Result<Self, LogError> {
        let meta = file.metadata().map_err(LogError::Stat)?;
        let ft = meta.file_type();
        if !ft.is_file() || ft.is_block_device() {
            return Err(LogError::NotAFile);
        }
        let end = offset
            .checked_add(size)
            .filter(|_| size > 0)
            .ok_or(LogError::Invalid { size, offset })?;
        if meta.len() < end {
            return Err(LogError::ShortFile {
                needed: end,
                file: meta.len(),
            });
        }
        if bounds.mem_end == 0 {
            return Err(LogError::NoMemory);
        }
        let needed = bytes_for(bounds.mem_end);
        if size < needed {
            return Err(LogError::TooSmall { size, needed });
        }
        if size > needed.saturating_add(SLACK) {
            return Err(LogError::TooLarge { size, needed });
        }
        // Only the pages holding the bitmap, from the one the offset is
        // in (mmap takes page-aligned offsets; hugetlbfs, huge pages).
        let page = meta.blksize().max(4096);
        let start = offset / page * page;
        let delta = offset - start;
        let mapped = (delta + size).div_ceil(page) * page;
        if mapped > bounds.left {
            return Err(LogError::OverCap {
                mapped,
                left: bounds.left,
            });
        }
        let len = usize::try_from(mapped).map_err(|_| LogError::OverCap {
            mapped,
            left: bounds.left,
        })?;
        let map =
            MmapRegion::from_file(FileOffset::new(file, start), len).map_err(LogError::Map)?;
        let guard = sigbus::Mapping::register(map.as_ptr(), map.size(), page as usize)?;
        Ok(Self {
            guard,
            map,
            offset: delta as usize,
            size,
        })
    }

    /// Bytes of bitmap.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes mapped (counted against the port's guest memory cap).
    pub fn mapped(&self) -> u64 {
        self.map.size() as u64
    }

    /// True once a page of the log vanished under the switch (its file
    /// was truncated): marks since went to zeros, and the port must be reset.
    pub fn lost(&self) -> bool {
        self.guard.lost()
    }

    /// The byte of the bitmap that holds `page`'s bit.
    fn byte(&self, page: u64) -> Option<&AtomicU8> {
        let i = page / 8;
        if i >= self.size {
            return None;
        }
        self.map
            .get_atomic_ref::<AtomicU8>(self.offset + i as usize)
            .ok()
    }

    /// Marks every page `[gpa, gpa + len)` touches as dirty.
    pub fn mark(&self, gpa: u64, len: u64) {
        for page in pages(gpa, len) {
            match self.byte(page) {
                Some(b) => {
                    b.fetch_or(1 << (page % 8), Ordering::Relaxed);
                }
                // Past the log's end: nothing further is in it either.
                None => break,
            }
        }
    }

    /// True when `page`'s bit is set.
    pub fn is_marked(&self, page: u64) -> bool {
        self.byte(page)
            .is_some_and(|b| b.load(Ordering::Relaxed) & (1 << (page % 8)) != 0)
    }
}

/// Where a queue marks what it writes while a migration logs.
#[derive(Debug, Clone)]
pub struct QueueLog {
    /// The shared log.
    pub log: Arc<DirtyLog>,
    /// The guest physical address of the used ring, as the front-end asked
    /// it logged (SET_VRING_ADDR's log_guest_addr).
    pub used: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(len: u64) -> File {
        crate::sys::memfd::create("log-test", len).unwrap()
    }

    /// Guest memory ending at `mem_end`, `left` bytes of the cap left.
    fn bounds(mem_end: u64, left: u64) -> LogBounds {
        LogBounds { mem_end, left }
    }

    #[test]
    fn page_math() {
        assert_eq!(pages(0, 0), 0..0);
        assert_eq!(pages(0, 1), 0..1);
        assert_eq!(pages(4095, 1), 0..1);
        assert_eq!(pages(4095, 2), 0..2);
        assert_eq!(pages(4096, 4096), 1..2);
        assert_eq!(pages(4096, 4097), 1..3);
        assert_eq!(
            pages(u64::MAX - 10, 100),
            (u64::MAX / 4096)..(u64::MAX / 4096 + 1)
        );
        assert_eq!(bytes_for(0), 0);
        assert_eq!(bytes_for(1), 1);
        assert_eq!(bytes_for(8 * 4096), 1);
        assert_eq!(bytes_for(8 * 4096 + 1), 2);
        assert_eq!(bytes_for(1 << 30), (1 << 30) / 4096 / 8);
    }

    #[test]
    fn marks_exactly_the_pages_written() {
        let f = memfd(8192);
        let log = DirtyLog::map(
            f.try_clone().unwrap(),
            64,
            100,
            bounds(64 * 8 * 4096, 1 << 30),
        )
        .unwrap();
        log.mark(3 * 4096 + 10, 4096); // pages 3 and 4
        log.mark(17 * 4096, 1); // page 17
        let set: Vec<u64> = (0..64 * 8).filter(|&p| log.is_marked(p)).collect();
        assert_eq!(set, vec![3, 4, 17]);
        // In the file: byte 0 of the bitmap (at offset 100) holds pages 0..8.
        let mut b = [0u8; 3];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 100).unwrap();
        assert_eq!(b, [0b0001_1000, 0, 0b0000_0010]);
        // Past the end: dropped, no fault.
        log.mark(64 * 8 * 4096, 1 << 20);
        assert!(!log.is_marked(64 * 8));
    }

    #[test]
    fn refuses_bad_logs() {
        let b = bounds(1 << 20, 1 << 30);
        let e = DirtyLog::map(memfd(4096), 8192, 0, b).unwrap_err();
        assert!(matches!(e, LogError::ShortFile { needed: 8192, .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 0, 0, b).unwrap_err();
        assert!(matches!(e, LogError::Invalid { .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 8, u64::MAX, b).unwrap_err();
        assert!(matches!(e, LogError::Invalid { .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 16, 0, b).unwrap_err();
        assert!(matches!(e, LogError::TooSmall { needed: 32, .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 32, 0, bounds(0, 1 << 30)).unwrap_err();
        assert!(matches!(e, LogError::NoMemory), "{e}");
        let (s, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = DirtyLog::map(File::from(std::os::fd::OwnedFd::from(s)), 32, 0, b).unwrap_err();
        assert!(matches!(e, LogError::NotAFile), "{e}");
        assert!(DirtyLog::map(memfd(4096), 32, 0, b).is_ok());
    }

    /// The size is what the memory table needs, with QEMU's slack: 1 GiB
    /// of guest memory needs 32 KiB of log; 4 KiB more is accepted, a page
    /// beyond that is not.
    #[test]
    fn the_size_follows_the_memory_table() {
        let b = bounds(1 << 30, 1 << 40);
        let need = bytes_for(1 << 30);
        assert_eq!(need, 32 << 10);
        let f = || memfd(1 << 20);
        assert!(DirtyLog::map(f(), need, 0, b).is_ok());
        assert!(DirtyLog::map(f(), need + 4096, 0, b).is_ok());
        let e = DirtyLog::map(f(), need + 8192, 0, b).unwrap_err();
        assert!(
            matches!(e, LogError::TooLarge { needed, .. } if needed == need),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "log of 40960 bytes exceeds the 32768 bytes the memory table needs"
        );
    }

    /// A sparse file with the log 64 TiB in: only the log's pages are
    /// mapped (the switch once mapped everything below the offset too).
    #[test]
    fn a_huge_offset_maps_only_the_log() {
        let offset = (64u64 << 40) + 100;
        let f = memfd(offset + 8192);
        let log = DirtyLog::map(
            f.try_clone().unwrap(),
            64,
            offset,
            bounds(64 * 8 * 4096, 1 << 30),
        )
        .unwrap();
        assert_eq!(log.mapped(), 4096);
        log.mark(9 * 4096, 1);
        let mut b = [0u8; 2];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, offset).unwrap();
        assert_eq!(b, [0, 0b10]);
        // Across a page boundary: two pages.
        let log = DirtyLog::map(f, 64, offset - 100 + 4090, bounds(64 * 8 * 4096, 1 << 30));
        assert_eq!(log.unwrap().mapped(), 8192);
    }

    #[test]
    fn the_mapping_counts_against_the_cap() {
        let b = |left| bounds(1 << 30, left);
        let need = bytes_for(1 << 30);
        assert!(DirtyLog::map(memfd(need), need, 0, b(need)).is_ok());
        let e = DirtyLog::map(memfd(need), need, 0, b(need - 4096)).unwrap_err();
        assert!(
            matches!(e, LogError::OverCap { mapped, .. } if mapped == need),
            "{e}"
        );
    }

    #[test]
    fn a_truncated_log_is_lost_not_fatal() {
        let f = memfd(8192);
        let log = DirtyLog::map(
            f.try_clone().unwrap(),
            64,
            4096,
            bounds(64 * 8 * 4096, 1 << 30),
        )
        .unwrap();
        log.mark(0, 1);
        assert!(!log.lost());
        f.set_len(0).unwrap();
        log.mark(4096, 1);
        assert!(log.lost());
    }
}
