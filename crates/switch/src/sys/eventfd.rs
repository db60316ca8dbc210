//! The eventfds a front-end hands over (kick and call), used so that the
//! worker never blocks on them, whatever the front-end does to the shared
//! file: it may have made them blocking, or clear O_NONBLOCK later, since
//! the open file (and its flags) is shared with the switch.
//!
//! - A kick is read with `preadv2(RWF_NOWAIT)`, which the eventfd honours
//!   regardless of O_NONBLOCK (Linux 5.10+); an older kernel falls back to a
//!   zero-timeout poll before the read, with the worker's watchdog
//!   ([`super::watchdog`]) as the net should the front-end drain the
//!   counter in between.
//! - A call is written under the watchdog: an eventfd write blocks only when
//!   the front-end raised the counter to its maximum, which no legitimate
//!   front-end does; the watchdog interrupts it and the caller resets the port.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// True when `fd` is an eventfd (what the vhost-user spec requires for
/// kicks and calls; a pipe or a socket could block the worker in ways an
/// eventfd cannot).
pub fn is_eventfd(fd: &impl AsRawFd) -> bool {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::read_link(link).is_ok_and(|p| p.as_os_str() == "anon_inode:[eventfd]")
}

/// Set once the kernel refused RWF_NOWAIT on an eventfd.
static NO_RWF_NOWAIT: AtomicBool = AtomicBool::new(false);

/// Reads and clears an eventfd's counter without blocking: `Ok(Some(n))`
/// with the counter, `Ok(None)` when it was zero.
pub fn read_nowait(fd: &impl AsRawFd) -> io::Result<Option<u64>> {
    let fd = fd.as_raw_fd();
    let mut buf = [0u8; 8];
    if !NO_RWF_NOWAIT.load(Ordering::Relaxed) {
        match preadv2_nowait(fd, &mut buf) {
            Ok(8) => return Ok(Some(u64::from_ne_bytes(buf))),
            Ok(_) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                NO_RWF_NOWAIT.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    if !super::wait::readable_within(&Fd(fd), std::time::Duration::ZERO)? {
        return Ok(None);
    }
    let n = super::watchdog::guarded(|| {
        // SAFETY: `buf` is a live, writable 8-byte buffer.
        unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
    });
    match n {
        8 => Ok(Some(u64::from_ne_bytes(buf))),
        n if n < 0 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            }
        }
        _ => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

fn preadv2_nowait(fd: RawFd, buf: &mut [u8; 8]) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over a live, writable buffer; offset -1 reads at
    // the current position, as read(2) does.
    let n = unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Adds one to an eventfd's counter. Never blocks for longer than the
/// watchdog's period: a write that would block (the front-end raised the
/// counter to its maximum) fails with `Interrupted`.
pub fn signal(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    let one = 1u64.to_ne_bytes();
    let n = super::watchdog::guarded(|| {
        // SAFETY: `one` is a live 8-byte buffer.
        unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) }
    });
    match n {
        8 => Ok(()),
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

struct Fd(RawFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::EventFd;

    #[test]
    fn a_blocking_eventfd_is_read_without_blocking() {
        let e = EventFd::new(0).unwrap();
        assert_eq!(read_nowait(&e).unwrap(), None);
        e.write(3).unwrap();
        assert_eq!(read_nowait(&e).unwrap(), Some(3));
        assert_eq!(read_nowait(&e).unwrap(), None);
    }

    #[test]
    fn only_eventfds_are_eventfds() {
        assert!(is_eventfd(&EventFd::new(0).unwrap()));
        let (r, _w) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!is_eventfd(&r));
        assert!(!is_eventfd(&super::super::memfd::create("x", 0).unwrap()));
    }

    #[test]
    fn a_call_that_would_block_is_interrupted() {
        // A blocking eventfd one below its maximum: the next write blocks.
        let e = EventFd::new(0).unwrap();
        e.write(u64::MAX - 1).unwrap();
        let t = std::time::Instant::now();
        let r = signal(&e);
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::Interrupted);
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        // The counter was left as it was.
        assert_eq!(read_nowait(&e).unwrap(), Some(u64::MAX - 1));
        assert!(signal(&e).is_ok());
    }
}
