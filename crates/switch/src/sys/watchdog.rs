//! A watchdog for the few system calls a worker makes on descriptors a
//! front-end controls and that no flag can make non-blocking for sure (an
//! eventfd write; a read on a kernel without RWF_NOWAIT). The call runs
//! "guarded": the thread publishes a sequence number while inside it, and a
//! watchdog thread that sees the same number on two looks in a row, one
//! [`PERIOD`] apart, interrupts the thread with a signal whose handler does
//! nothing and does not restart the call, so the call fails with EINTR and
//! the caller resets the port that owns the descriptor.
//!
//! A guarded call costs two stores to a thread-local; the watchdog wakes
//! [`PERIOD`]⁻¹ times a second and reads one atomic per guarded thread. A
//! legitimate front-end never makes a guarded call block, so the signal is
//! only ever sent to a worker that would otherwise hang forever.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

/// How often the watchdog looks: a blocked call ends within two periods.
pub const PERIOD: Duration = Duration::from_millis(10);

struct Guard {
    /// The thread's `pthread_t`, as an integer: a pointer on musl, which
    /// would make the guard neither `Send` nor `Sync`.
    thread: usize,
    /// 0 outside a guarded call, else the call's sequence number.
    inside: AtomicU64,
}

static GUARDS: Mutex<Vec<Weak<Guard>>> = Mutex::new(Vec::new());
static START: Once = Once::new();

thread_local! {
    static MINE: (Arc<Guard>, std::cell::Cell<u64>) = {
        start();
        // SAFETY: pthread_self has no preconditions.
        let g = Arc::new(Guard { thread: unsafe { libc::pthread_self() } as usize, inside: AtomicU64::new(0) });
        GUARDS.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(&g));
        (g, std::cell::Cell::new(0))
    };
}

/// Starts the watchdog thread (once). The switch calls it before its
/// workers pin themselves, so the watchdog keeps the process's own CPUs
/// rather than a dedicated worker's.
pub fn start() {
    START.call_once(|| {
        install_handler();
        let spawned = std::thread::Builder::new()
            .name("vnio-watchdog".into())
            .spawn(watch);
        if let Err(e) = spawned {
            log::error!("cannot start the worker watchdog: {e}");
        }
    });
}

/// Runs `f`, a system call on a descriptor a front-end controls; should it
/// block, it is interrupted (EINTR) within two [`PERIOD`]s.
pub fn guarded<R>(f: impl FnOnce() -> R) -> R {
    MINE.with(|(g, seq)| {
        let n = seq.get().wrapping_add(1).max(1);
        seq.set(n);
        g.inside.store(n, Ordering::SeqCst);
        let r = f();
        g.inside.store(0, Ordering::SeqCst);
        r
    })
}

fn watch() {
    let mut seen: Vec<(Weak<Guard>, u64)> = Vec::new();
    loop {
        std::thread::sleep(PERIOD);
        {
            let mut guards = GUARDS.lock().unwrap_or_else(|e| e.into_inner());
            guards.retain(|w| w.strong_count() > 0);
            seen.retain(|(w, _)| w.strong_count() > 0);
            for w in guards.iter() {
                if !seen.iter().any(|(s, _)| s.ptr_eq(w)) {
                    seen.push((w.clone(), 0));
                }
            }
        }
        for (w, last) in &mut seen {
            let Some(g) = w.upgrade() else { continue };
            let now = g.inside.load(Ordering::SeqCst);
            if now != 0 && now == *last {
                // SAFETY: the thread is alive (its guard is, and the guard
                // dies with the thread's locals); the signal's handler is
                // installed and does nothing.
                unsafe { libc::pthread_kill(g.thread as libc::pthread_t, signal()) };
            }
            *last = now;
        }
    }
}

fn signal() -> libc::c_int {
    libc::SIGRTMIN()
}

extern "C" fn interrupted(_: libc::c_int) {}

fn install_handler() {
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe
    // (it does nothing); no SA_RESTART, so the interrupted call fails with EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = interrupted as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        if libc::sigaction(signal(), &sa, std::ptr::null_mut()) != 0 {
            log::error!(
                "cannot install the watchdog's signal handler: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_blocked_call_is_interrupted_and_a_quick_one_is_not() {
        let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&r);
        let t = Instant::now();
        let mut b = [0u8; 1];
        // SAFETY: a live one-byte buffer.
        let n = guarded(|| unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) });
        let e = std::io::Error::last_os_error();
        assert_eq!(n, -1);
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
        // Two periods on a quiet host; the bound only says it ends (a loaded
        // host may not run the watchdog for a while).
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        for _ in 0..1000 {
            assert_eq!(guarded(|| 7), 7);
        }
    }
}
