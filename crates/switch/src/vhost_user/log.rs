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
//! lose the write. The log is validated once, when it arrives: a regular
//! file long enough for `offset + size`, a size that covers the guest's
//! memory and is not absurdly larger; marks past its end are dropped.

use crate::sys::sigbus;
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use virtio_queue::desc::split::Descriptor;
use vm_memory::{FileOffset, MmapRegion, VolatileMemory};

/// Bytes of guest memory per bit of the log (VHOST_LOG_PAGE).
pub const LOG_PAGE: u64 = 4096;

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
    /// The log cannot cover the guest memory already mapped.
    #[error("log of {size} bytes covers less than the guest memory's {needed}")]
    TooSmall {
        /// Bytes of log.
        size: u64,
        /// Bytes guest memory needs.
        needed: u64,
    },
    /// Larger than the port's memory cap could ever need.
    #[error("log of {size} bytes exceeds the {cap} bytes the port's memory cap needs")]
    TooLarge {
        /// Bytes of log.
        size: u64,
        /// Bytes the cap needs.
        cap: u64,
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

/// A mapped log.
#[derive(Debug)]
pub struct DirtyLog {
    /// The mapping's registration with the SIGBUS handler: declared
    /// first, so it is dropped before the mapping is unmapped.
    _guard: sigbus::Mapping,
    map: MmapRegion,
    /// Where the bitmap starts in the mapping.
    offset: usize,
    /// Bytes of bitmap.
    size: u64,
}

impl DirtyLog {
    /// Maps `size` bytes of `file` from `offset`, for guest memory that
    /// ends at `mem_end` (0: none mapped yet) on a port that may map at
    /// most `mem_cap` bytes of guest memory.
    pub fn map(
        file: File,
        size: u64,
        offset: u64,
        mem_end: u64,
        mem_cap: u64,
    ) -> Result<Self, LogError> {
        let meta = file.metadata().map_err(LogError::Stat)?;
        let ft = meta.file_type();
        if !ft.is_file() || ft.is_block_device() {
            return Err(LogError::NotAFile);
        }
        let needed = offset
            .checked_add(size)
            .filter(|_| size > 0)
            .ok_or(LogError::Invalid { size, offset })?;
        if meta.len() < needed {
            return Err(LogError::ShortFile {
                needed,
                file: meta.len(),
            });
        }
        let covers = bytes_for(mem_end);
        if size < covers {
            return Err(LogError::TooSmall {
                size,
                needed: covers,
            });
        }
        // Guest memory may sit above 4 GiB with a hole below: the cap plus
        // 4 GiB of address space, and a page of slack (QEMU rounds up).
        let cap = bytes_for(mem_cap.saturating_add(1 << 32)) + LOG_PAGE;
        if size > cap {
            return Err(LogError::TooLarge { size, cap });
        }
        let len = usize::try_from(needed).map_err(|_| LogError::TooLarge { size, cap })?;
        // Mapped from 0: the offset need not be page-aligned.
        let map = MmapRegion::from_file(FileOffset::new(file, 0), len).map_err(LogError::Map)?;
        let page = usize::try_from(meta.blksize()).unwrap_or(4096);
        let guard = sigbus::Mapping::register(map.as_ptr(), map.size(), page)?;
        Ok(Self {
            _guard: guard,
            map,
            offset: offset as usize,
            size,
        })
    }

    /// Bytes of bitmap.
    pub fn size(&self) -> u64 {
        self.size
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

/// Marks the writable buffers of the chain at `head` (descriptors read
/// through `descriptor`) for the first `left` bytes the device wrote into
/// them. The chain was validated when popped, and the driver may not
/// change it before it is used.
pub(super) fn log_chain(
    log: &DirtyLog,
    descriptor: impl Fn(u16) -> Option<Descriptor>,
    size: u16,
    head: u16,
    mut left: u64,
) {
    let mut i = head;
    for _ in 0..size {
        let Some(d) = descriptor(i) else {
            return;
        };
        if d.is_write_only() {
            let n = u64::from(d.len()).min(left);
            log.mark(d.addr().0, n);
            left -= n;
        }
        if left == 0 || !d.has_next() || d.next() >= size {
            return;
        }
        i = d.next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(len: u64) -> File {
        crate::sys::memfd::create("log-test", len).unwrap()
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
        let log = DirtyLog::map(f.try_clone().unwrap(), 64, 100, 64 * 8 * 4096, 1 << 30).unwrap();
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
    fn a_chain_is_marked_for_the_bytes_written_only() {
        const NEXT: u16 = 1;
        const WRITE: u16 = 2;
        let log = DirtyLog::map(memfd(4096), 64, 0, 64 * 8 * 4096, 1 << 30).unwrap();
        // 0: read-only 4 KiB at page 1 -> 1: writable 4 KiB at page 5 -> 2: writable 8 KiB at page 9.
        let table = [
            Descriptor::new(4096, 4096, NEXT, 1),
            Descriptor::new(5 * 4096, 4096, WRITE | NEXT, 2),
            Descriptor::new(9 * 4096, 8192, WRITE, 0),
        ];
        let at = |i: u16| table.get(usize::from(i)).copied();
        // 4 KiB + 1 byte written: page 5 whole, the first byte of page 9.
        log_chain(&log, at, 8, 0, 4097);
        let set: Vec<u64> = (0..64 * 8).filter(|&p| log.is_marked(p)).collect();
        assert_eq!(set, vec![5, 9]);
    }

    #[test]
    fn refuses_bad_logs() {
        let cap = 1 << 30;
        let e = DirtyLog::map(memfd(4096), 8192, 0, 0, cap).unwrap_err();
        assert!(matches!(e, LogError::ShortFile { needed: 8192, .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 0, 0, 0, cap).unwrap_err();
        assert!(matches!(e, LogError::Invalid { .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 8, u64::MAX, 0, cap).unwrap_err();
        assert!(matches!(e, LogError::Invalid { .. }), "{e}");
        let e = DirtyLog::map(memfd(4096), 16, 0, 1 << 20, cap).unwrap_err();
        assert!(matches!(e, LogError::TooSmall { needed: 32, .. }), "{e}");
        let e = DirtyLog::map(memfd(1 << 22), 1 << 22, 0, 0, 1 << 20).unwrap_err();
        assert!(matches!(e, LogError::TooLarge { .. }), "{e}");
        let (s, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let e = DirtyLog::map(File::from(std::os::fd::OwnedFd::from(s)), 8, 0, 0, cap).unwrap_err();
        assert!(matches!(e, LogError::NotAFile), "{e}");
        assert!(DirtyLog::map(memfd(4096), 32, 0, 1 << 20, cap).is_ok());
    }
}
