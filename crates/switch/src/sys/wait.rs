//! Waiting on one file descriptor with a nanosecond timeout (ppoll), where
//! epoll's whole milliseconds would round a sub-millisecond wait up.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Waits until `fd` is readable or `timeout` passes: `Ok(true)` when
/// readable. A timeout beyond about 68 years is cut to that.
pub fn readable_within(fd: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as _, // time_t, not named (musl deprecates it)
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one live pollfd, a valid timespec, no signal mask.
    let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::EventFd;

    #[test]
    fn a_signalled_eventfd_is_readable_and_a_quiet_one_times_out() {
        let e = EventFd::new(0).unwrap();
        assert!(!readable_within(&e, Duration::from_micros(100)).unwrap());
        e.write(1).unwrap();
        assert!(readable_within(&e, Duration::ZERO).unwrap());
    }
}
