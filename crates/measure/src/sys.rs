//! The few kernel calls no safe wrapper covers. Every `unsafe` of the crate
//! lives here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Sets an `int` socket option.
fn set_int_opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the fd is valid for the borrow; we pass a pointer to a live
    // c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SO_BUSY_POLL: busy-poll the device queue for up to `us` microseconds on a
/// blocking receive. Raising it above net.core.busy_read needs CAP_NET_ADMIN.
pub fn set_busy_poll(fd: BorrowedFd<'_>, us: u32) -> io::Result<()> {
    set_int_opt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_BUSY_POLL,
        us.min(i32::MAX as u32) as libc::c_int,
    )
}

/// TCP segment counters from TCP_INFO: (segments out, segments in).
pub fn tcp_segments(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    // tcpi_segs_out and tcpi_segs_in sit at offsets 136 and 140 of struct
    // tcp_info since Linux 4.2; the libc crate's struct predates them.
    const SEGS_OUT: usize = 136;
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is writable for len bytes and len points to its size.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < SEGS_OUT + 8 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel's TCP_INFO has no segment counters",
        ));
    }
    let word = |o: usize| u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    Ok((word(SEGS_OUT), word(SEGS_OUT + 4)))
}

/// CPU time of the calling thread: (user ns, system ns).
pub fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage owned by this frame.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    (timeval_ns(ru.ru_utime), timeval_ns(ru.ru_stime))
}

/// CPU time of the whole process: (user ns, system ns).
pub fn process_cpu_ns() -> (u64, u64) {
    // SAFETY: as in thread_cpu_ns.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage owned by this frame.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    (timeval_ns(ru.ru_utime), timeval_ns(ru.ru_stime))
}

fn timeval_ns(tv: libc::timeval) -> u64 {
    (tv.tv_sec as u64) * 1_000_000_000 + (tv.tv_usec as u64) * 1_000
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments and no memory effects.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// Lets the calling thread's timed sleeps expire on time: the default 50 us
/// timer slack would otherwise be added to every wake-up.
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Views an initialised byte buffer as a `MaybeUninit` buffer, the form
/// socket2's receive calls take.
pub fn as_uninit(buf: &mut [u8]) -> &mut [std::mem::MaybeUninit<u8>] {
    // SAFETY: MaybeUninit<u8> has the same layout as u8, and an initialised
    // value is a valid MaybeUninit; the callee only writes bytes into it.
    unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) }
}
