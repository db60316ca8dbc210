//! Unix-socket messages with file descriptors (SCM_RIGHTS), non-blocking.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one vhost-user message carries (the memory table).
pub const MAX_FDS: usize = 8;

const CMSG_SPACE: usize = 64; // >= CMSG_SPACE(MAX_FDS * sizeof(int)) = 16 + 32

#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_SPACE]);

/// Receives up to `buf.len()` bytes and any descriptors attached to them.
/// Descriptors beyond `MAX_FDS` are closed. Returns the bytes read (0 at end
/// of stream); `WouldBlock` when the socket is non-blocking and empty.
pub fn recv_with_fds(sock: &UnixStream, buf: &mut [u8], fds: &mut Vec<File>) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: msghdr is plain data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    // SAFETY: `msg` points at `iov` (covering `buf`, valid for writes of its
    // length) and at `cbuf` (valid for CMSG_SPACE bytes); both outlive the call.
    // MSG_CMSG_CLOEXEC makes received descriptors close-on-exec.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the CMSG_* macros walk the control buffer the kernel just
    // filled, bounded by msg_controllen; each SCM_RIGHTS payload holds
    // (cmsg_len - CMSG_LEN(0)) / 4 descriptors that are now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    // Owning the descriptor closes it on drop, also when discarded.
                    let f = File::from_raw_fd(fd);
                    if fds.len() < MAX_FDS {
                        fds.push(f);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "too many file descriptors attached",
        ));
    }
    Ok(n as usize)
}

/// Sends `buf` with `fds` attached (at most `MAX_FDS`).
pub fn send_with_fds(sock: &UnixStream, buf: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many file descriptors",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut _,
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; CMSG_SPACE]);
    // SAFETY: all-zero msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(payload) } as _;
        // SAFETY: the control buffer is CMSG_SPACE bytes, larger than
        // CMSG_SPACE(8 descriptors); the header and data written stay inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                payload as usize,
            );
        }
    }
    // SAFETY: `msg` points at valid iov and control buffers for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn passes_descriptors_both_ways() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = super::super::memfd::create("scm-test", 4096).unwrap();
        f.write_all(b"hello").unwrap();
        send_with_fds(&a, b"msg", &[f.as_raw_fd(), f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        let n = recv_with_fds(&b, &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"msg");
        assert_eq!(fds.len(), 2);
        let mut got = String::new();
        fds[0].rewind().unwrap();
        fds[0].read_to_string(&mut got).unwrap();
        assert!(got.starts_with("hello"));
        drop(a);
        assert_eq!(recv_with_fds(&b, &mut buf, &mut fds).unwrap(), 0);
    }
}
