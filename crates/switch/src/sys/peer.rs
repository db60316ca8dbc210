//! Who is at the other end of a Unix socket (SO_PEERCRED, SO_PEERGROUPS:
//! the credentials the kernel recorded at connect time, which the peer
//! cannot forge), who we are, and a user's or a group's id by name.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

/// A peer's credentials at connect time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The credentials of the process connected to `sock`.
pub fn peer_cred(sock: &impl AsRawFd) -> io::Result<PeerCred> {
    let fd = sock.as_raw_fd();
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` is a ucred of the length passed, written by the kernel.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut c as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
        groups: peer_groups(fd),
    })
}

/// The peer's supplementary groups; none when the kernel cannot say
/// (SO_PEERGROUPS is Linux 4.13+): then only the primary group counts.
fn peer_groups(fd: std::os::fd::RawFd) -> Vec<u32> {
    // A first call with room for many; the kernel says how much it needs
    // when that is not enough.
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: `groups` has `len` bytes of room, written by the kernel.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / 4);
            return groups;
        }
        let more = len as usize / 4;
        if io::Error::last_os_error().raw_os_error() == Some(libc::ERANGE) && more > groups.len() {
            groups.resize(more, 0);
            continue;
        }
        return Vec::new();
    }
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The id of the group called `name` (None: no such group).
pub fn group_id(name: &str) -> io::Result<Option<u32>> {
    let cname = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero group is a valid out-parameter.
        let mut g: libc::group = unsafe { std::mem::zeroed() };
        let mut res: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is to live memory of the size passed;
        // getgrnam_r writes the strings it returns into `buf` only.
        let r = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut g,
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
                &mut res,
            )
        };
        match r {
            0 if res.is_null() => return Ok(None),
            0 => return Ok(Some(g.gr_gid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The id of the user called `name` (None: no such user).
pub fn user_id(name: &str) -> io::Result<Option<u32>> {
    let cname = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut p: libc::passwd = unsafe { std::mem::zeroed() };
        let mut res: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is to live memory of the size passed;
        // getpwnam_r writes the strings it returns into `buf` only.
        let r = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut p,
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
                &mut res,
            )
        };
        match r {
            0 if res.is_null() => return Ok(None),
            0 => return Ok(Some(p.pw_uid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socketpair_peer_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        assert_eq!(c.uid, euid());
    }

    #[test]
    fn root_group_is_zero() {
        assert_eq!(group_id("root").unwrap(), Some(0));
        assert_eq!(group_id("no-such-group-vnio").unwrap(), None);
    }
}
