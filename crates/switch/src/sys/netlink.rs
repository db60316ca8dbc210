//! What netlink-sys's socket leaves to the caller, for the EVPN agent's
//! rtnetlink socket (`crate::evpn`): a receive buffer beyond `rmem_max`,
//! and the index of a device by name.

use std::io;
use std::os::fd::AsRawFd;

/// Sets the receive buffer of `socket` to `bytes`, forced past the
/// system's limit when allowed (CAP_NET_ADMIN), else as far as it goes.
pub fn force_rcvbuf(socket: &impl AsRawFd, bytes: i32) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as u32;
    let mut last = Ok(());
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt reads `len` bytes of `bytes`.
        let r = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                len,
            )
        };
        if r == 0 {
            return Ok(());
        }
        last = Err(io::Error::last_os_error());
    }
    last
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
