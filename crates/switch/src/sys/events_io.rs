//! What the event stream needs from the system: the monotonic clock in
//! nanoseconds (the same clock `Instant` reads, through the vDSO: no system
//! call), and a small send buffer on a subscriber's socket (what a reader
//! that stops reading may hold in the kernel is bounded too).

use std::io;
use std::os::fd::AsRawFd;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call writes.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Sets SO_SNDBUF on `s` to `bytes` (the kernel doubles it and keeps a floor).
pub fn set_send_buffer(s: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `v` is a live c_int for the call and the length is its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
