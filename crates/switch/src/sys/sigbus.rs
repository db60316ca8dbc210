//! Guest memory that disappears under the switch costs only its port.
//!
//! A front-end shares its memory as a file it keeps control of: it can
//! truncate it (or a hugetlbfs file can lose its pages) after the switch
//! mapped it, and the next access to a page beyond the file's end raises
//! SIGBUS, whose default action kills the process. Every mapping of guest
//! memory is registered here; the SIGBUS handler, when the faulting address
//! lies in a registered mapping, maps anonymous zero-filled memory over the
//! faulting page (of the mapping's page size), marks the mapping as lost and
//! returns: the access is retried against zeros and the worker resets the
//! port at its next round ([`epoch`] tells it to look). A fault anywhere
//! else goes to the handler that was there before (Rust's stack-overflow
//! report, or the default action): a real bug still crashes.
//!
//! The registry is a fixed array of atomics, so the handler stays
//! async-signal-safe: no lock, no allocation.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Most mappings registered at once (ports x regions; 8 regions a port).
const SLOTS: usize = 4096;

const FREE: u8 = 0;
const CLAIMED: u8 = 1;
const ACTIVE: u8 = 2;

struct Entry {
    state: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    page: AtomicUsize,
    lost: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Entry = Entry {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    page: AtomicUsize::new(0),
    lost: AtomicBool::new(false),
};

static TABLE: [Entry; SLOTS] = [EMPTY; SLOTS];
static EPOCH: AtomicU64 = AtomicU64::new(0);
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Counts the pages replaced so far: a worker that sees it change looks for
/// lost mappings.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

/// A registered mapping; unregistered when dropped (before the memory is
/// unmapped).
#[derive(Debug)]
pub struct Mapping(usize);

/// Why a mapping could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("too many guest memory mappings ({SLOTS})")]
pub struct Full;

impl Mapping {
    /// Registers `[start, start + len)`, mapped from a file whose pages
    /// are `page` bytes (4 KiB, or a huge page size).
    pub fn register(start: *const u8, len: usize, page: usize) -> Result<Self, Full> {
        install();
        for (i, e) in TABLE.iter().enumerate() {
            if e.state
                .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                e.start.store(start as usize, Ordering::Relaxed);
                e.len.store(len, Ordering::Relaxed);
                e.page.store(page.max(4096), Ordering::Relaxed);
                e.lost.store(false, Ordering::Relaxed);
                e.state.store(ACTIVE, Ordering::Release);
                return Ok(Self(i));
            }
        }
        Err(Full)
    }

    /// True once a page of this mapping vanished (the port must be reset).
    pub fn lost(&self) -> bool {
        TABLE[self.0].lost.load(Ordering::Relaxed)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        TABLE[self.0].state.store(FREE, Ordering::Release);
    }
}

fn install() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: zeroed sigactions are valid; the handler only touches
        // atomics and calls mmap, both async-signal-safe. SA_ONSTACK: a
        // fault on a thread's stack limit still has a stack to run on.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as extern "C" fn(_, _, _) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &sa, &mut old) != 0 {
                log::error!(
                    "cannot install the SIGBUS handler: {}",
                    std::io::Error::last_os_error()
                );
            }
            old
        }
    });
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for e in &TABLE {
        if e.state.load(Ordering::Acquire) != ACTIVE {
            continue;
        }
        let start = e.start.load(Ordering::Relaxed);
        let len = e.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        let page = e.page.load(Ordering::Relaxed);
        let base = start + (addr - start) / page * page;
        let n = page.min(start + len - base);
        // SAFETY: [base, base + n) lies inside a live mapping of guest
        // memory this process made; replacing it with private anonymous
        // memory only changes what the switch reads there (zeros).
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            e.lost.store(true, Ordering::Relaxed);
            EPOCH.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    // Not guest memory: whoever handled SIGBUS before decides.
    match PREVIOUS.get() {
        Some(old) if old.sa_flags & libc::SA_SIGINFO != 0 && old.sa_sigaction > 1 => {
            // SAFETY: it was installed as a SA_SIGINFO handler, so this is its type.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig, info, ctx);
        }
        Some(old) if old.sa_sigaction > 1 => {
            // SAFETY: a plain handler's type.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig);
        }
        _ => {
            // Back to the default action: the access faults again and the
            // process dies as it would have without this handler.
            // SAFETY: resetting a signal's disposition is async-signal-safe.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_file_reads_as_zeros_and_the_mapping_is_lost() {
        let f = crate::sys::memfd::create("sigbus-test", 4 * 4096).unwrap();
        // SAFETY: a fresh shared mapping of the whole file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let m = Mapping::register(p.cast(), 4 * 4096, 4096).unwrap();
        let before = epoch();
        // SAFETY: inside the mapping.
        unsafe { std::ptr::write_volatile(p.cast::<u8>().add(3 * 4096), 7) };
        f.set_len(4096).unwrap();
        // SAFETY: inside the mapping; beyond the file's end now.
        let v = unsafe { std::ptr::read_volatile(p.cast::<u8>().add(3 * 4096 + 5)) };
        assert_eq!(v, 0);
        assert!(m.lost());
        assert!(epoch() > before);
        // The first page is still the file's.
        // SAFETY: inside the mapping and the file.
        unsafe { std::ptr::write_volatile(p.cast::<u8>(), 1) };
        drop(m);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, 4 * 4096) };
    }
}
