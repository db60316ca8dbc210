//! An rtnetlink socket subscribed to neighbour (and bridge FDB) changes,
//! and the calls around it the EVPN agent makes (`crate::evpn`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The multicast group of neighbour changes.
const RTMGRP_NEIGH: u32 = 4;

/// A non-blocking NETLINK_ROUTE socket in the neighbour group, with a
/// receive buffer of `rcvbuf` bytes (forced when allowed).
pub fn neigh_socket(rcvbuf: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just created and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::c_int>() as u32;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads `len` bytes of `rcvbuf`.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&rcvbuf as *const libc::c_int).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
    }
    // SAFETY: an all-zero sockaddr_nl is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = RTMGRP_NEIGH;
    // SAFETY: `sa` is a sockaddr_nl of the length given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    match r < 0 {
        true => Err(io::Error::last_os_error()),
        false => Ok(fd),
    }
}

/// Sends one netlink message to the kernel.
pub fn send(fd: &OwnedFd, msg: &[u8]) -> io::Result<()> {
    // SAFETY: reads `msg.len()` bytes of `msg`.
    let r = unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    match r < 0 {
        true => Err(io::Error::last_os_error()),
        false => Ok(()),
    }
}

/// One datagram into `buf`; `Ok(None)` when none is waiting.
pub fn recv(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock => Ok(None),
        _ => Err(e),
    }
}

/// Waits up to `ms` milliseconds for `fd` to be readable.
pub fn wait_readable(fd: &OwnedFd, ms: i32) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// The index of network device `name`.
pub fn ifindex(name: &str) -> io::Result<i32> {
    let c =
        std::ffi::CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid C string for the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i as i32),
    }
}
