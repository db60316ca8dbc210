//! Batched UDP for the VXLAN port: `recvmmsg` on the bound UDP socket,
//! `sendmmsg` on either that socket or a raw IPPROTO_UDP socket (which
//! lets the switch write the UDP header itself, so each flow gets its own
//! source port, RFC 7348 §5, while the kernel still routes the packet and
//! writes the IPv4 header).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Most datagrams one call moves.
pub const MAX_BATCH: usize = 64;

/// One datagram to send: `len` bytes at `off` in the caller's buffer, to `to`.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing {
    /// Offset in the buffer.
    pub off: usize,
    /// Length.
    pub len: usize,
    /// Destination (the port is ignored by a raw socket).
    pub to: SocketAddrV4,
}

/// One datagram received into its slot.
#[derive(Debug, Clone, Copy)]
pub struct Incoming {
    /// Bytes received (at most the slot's room).
    pub len: usize,
    /// The kernel cut it to the slot's room.
    pub truncated: bool,
    /// Sender.
    pub from: SocketAddrV4,
}

impl Default for Incoming {
    fn default() -> Self {
        Self {
            len: 0,
            truncated: false,
            from: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        }
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` is a live c_int for the call and the length is its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Never fragment (RFC 7348 §4.3: VTEPs must not fragment VXLAN packets):
/// the kernel sets DF and refuses a datagram above the route's MTU with
/// EMSGSIZE instead of cutting it. `ttl`: the outer TTL, when given.
pub fn set_outer(fd: RawFd, ttl: Option<u8>) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )?;
    if let Some(t) = ttl {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, libc::c_int::from(t))?;
    }
    Ok(())
}

/// A raw IPv4 socket for UDP bound to `local` (the outer source address),
/// non-blocking, that never queues anything it would receive (a raw socket
/// of a protocol gets a copy of every incoming datagram of that protocol:
/// a filter that accepts nothing keeps that copy from being made).
pub fn raw_udp(local: Ipv4Addr) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_UDP,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // `ret #0`: keep no byte of any packet.
    let drop_all = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: drop_all.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `drop_all`, both live for the call (the
    // kernel copies the program); the length is the struct's size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let sa = sockaddr(SocketAddrV4::new(local, 0));
    // SAFETY: `sa` is a valid sockaddr_in for the call.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Sends `out` (at most [`MAX_BATCH`]) from `buf` in one `sendmmsg`.
/// Returns how many went (in order); a first datagram the kernel refuses is
/// the error (the caller counts it and goes on after it).
pub fn send_batch(fd: RawFd, buf: &[u8], out: &[Outgoing]) -> io::Result<usize> {
    let n = out.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut addrs: [libc::sockaddr_in; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (k, o) in out[..n].iter().enumerate() {
        let bytes = &buf[o.off..o.off + o.len];
        addrs[k] = sockaddr(o.to);
        iovs[k] = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
    }
    for k in 0..n {
        msgs[k].msg_hdr.msg_name = (&mut addrs[k] as *mut libc::sockaddr_in).cast();
        msgs[k].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        msgs[k].msg_hdr.msg_iov = &mut iovs[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` point at `addrs` and `iovs`, which point into
    // `buf` (read only by the kernel); all live for the call.
    let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT as _) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Receives up to `into.len()` (at most [`MAX_BATCH`]) datagrams in one
/// `recvmmsg`, datagram `k` into `buf[k * slot + off ..][.. slot - off]`.
/// `Ok(0)` when nothing is waiting.
pub fn recv_batch(
    fd: RawFd,
    buf: &mut [u8],
    slot: usize,
    off: usize,
    into: &mut [Incoming],
) -> io::Result<usize> {
    let n = into.len().min(MAX_BATCH).min(buf.len() / slot.max(1));
    if n == 0 || off >= slot {
        return Ok(0);
    }
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut addrs: [libc::sockaddr_in; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // Each slot's room, disjoint and in bounds (n * slot <= buf.len()).
    for (iov, room) in iovs.iter_mut().zip(buf.chunks_exact_mut(slot)).take(n) {
        let room = &mut room[off..];
        *iov = libc::iovec {
            iov_base: room.as_mut_ptr().cast(),
            iov_len: room.len(),
        };
    }
    for k in 0..n {
        msgs[k].msg_hdr.msg_name = (&mut addrs[k] as *mut libc::sockaddr_in).cast();
        msgs[k].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        msgs[k].msg_hdr.msg_iov = &mut iovs[k];
        msgs[k].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each iovec covers its own slot of `buf` (disjoint, in
    // bounds), the names point at `addrs`; all live for the call.
    let r = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT as _,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(e);
    }
    let got = r as usize;
    for k in 0..got {
        let a = addrs[k];
        into[k] = Incoming {
            len: (msgs[k].msg_len as usize).min(slot - off),
            truncated: msgs[k].msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            from: SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            ),
        };
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_batch_goes_and_comes_back_over_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(to) = b.local_addr().unwrap() else {
            unreachable!("bound to an IPv4 address")
        };
        let buf: Vec<u8> = (0..100u8).collect();
        let out = [
            Outgoing {
                off: 0,
                len: 10,
                to,
            },
            Outgoing {
                off: 50,
                len: 50,
                to,
            },
        ];
        assert_eq!(send_batch(a.as_raw_fd(), &buf, &out).unwrap(), 2);
        let mut rx = vec![0u8; 4 * 64];
        let mut inc = [Incoming::default(); 4];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut got = 0;
        while got < 2 && std::time::Instant::now() < deadline {
            let mut more = [Incoming::default(); 4];
            let n = recv_batch(b.as_raw_fd(), &mut rx[got * 64..], 64, 4, &mut more).unwrap();
            inc[got..got + n].copy_from_slice(&more[..n]);
            got += n;
        }
        assert_eq!(got, 2);
        assert_eq!(inc[0].len, 10);
        assert_eq!(&rx[4..14], &buf[..10]);
        assert_eq!(inc[1].len, 50);
        assert!(!inc[1].truncated);
        assert_eq!(&rx[64 + 4..64 + 54], &buf[50..100]);
        assert_eq!(*inc[0].from.ip(), Ipv4Addr::LOCALHOST);
        // Nothing more: not an error.
        assert_eq!(
            recv_batch(b.as_raw_fd(), &mut rx, 64, 4, &mut inc).unwrap(),
            0
        );
    }
}
