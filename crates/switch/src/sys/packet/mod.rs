//! AF_PACKET sockets bound to one interface with TPACKET_V2 rings mapped
//! into the process, carrying a 10-byte virtio-net header (PACKET_VNET_HDR).
//!
//! Receive: a socket per queue, promiscuous, not seeing the host's own
//! transmissions (PACKET_IGNORE_OUTGOING), with an RX ring whose frames the
//! kernel hands over one by one through a status word: reading a frame is a
//! memory load, no system call. TPACKET_V2 rather than V3: V3 hands over
//! whole blocks, on a block-retire timer of at least a millisecond when
//! traffic is light, which is the latency this switch exists to avoid.
//!
//! Transmit: a socket bound to no protocol (so it receives nothing) with a
//! TX ring: frames are written into the ring and one `send` per polling
//! round hands the whole batch to the kernel, optionally straight to the
//! driver (PACKET_QDISC_BYPASS).
//!
//! The mapped ring is in `ring.rs`, the two sides in `rx.rs`
//! and `tx.rs`; this file holds the socket set-up they share.

use super::netlink::ifindex;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

mod ring;
mod rx;
mod tx;

pub use rx::RxRing;
pub use tx::{PlainTx, TxRing};

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_COPY_THRESH: libc::c_int = 7;
const PACKET_AUXDATA: libc::c_int = 8;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const PACKET_MR_PROMISC: u16 = 1;
const ETH_P_ALL_BE: u16 = 0x0003u16.to_be();
// `libc::Ioctl`: the request type differs between glibc (c_ulong) and musl (c_int).
const SIOCGIFMTU: libc::Ioctl = 0x8921;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_SENDING: u32 = 2;

/// `struct tpacket2_hdr` (32 bytes); the data of a TX frame starts right
/// after it (tp_hdrlen minus the sockaddr_ll the kernel only fills on RX).
const HDR2_LEN: usize = 32;
/// Where the receive data area of a slot starts: after the header and the
/// sockaddr_ll (TPACKET2_HDRLEN = 32 + 20).
const RX_DATA_AT: usize = HDR2_LEN + 20;
/// The interface's MTU is not known: the largest slot this code maps.
const MAX_FRAME_SIZE: usize = 1 << 17;

#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: u16,
    alen: u16,
    address: [u8; 8],
}

#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// A classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant.
    pub k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const BpfInsn,
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised T for the call and the length is its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The interface's MTU (SIOCGIFMTU: answers in the caller's network
/// namespace, where sysfs may show another).
pub fn mtu(ifname: &str) -> io::Result<usize> {
    #[repr(C)]
    struct IfReqMtu {
        name: [u8; libc::IFNAMSIZ],
        mtu: libc::c_int,
        _pad: [u8; 20],
    }
    if ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let mut req = IfReqMtu {
        name: [0; libc::IFNAMSIZ],
        mtu: 0,
        _pad: [0; 20],
    };
    req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
    // SAFETY: plain socket(2) call.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: SIOCGIFMTU reads the name and writes the int of a struct
    // ifreq; `req` has that layout (name, then the union, padded to 40 bytes).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGIFMTU, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(req.mtu.max(0) as usize)
}

/// The slot size that holds a frame of `mtu` bytes plus Ethernet and VLAN
/// headers behind the receive-side headers (a power of two, at least 2 KiB).
pub fn frame_size_for(mtu: usize) -> usize {
    // Receive: header, sockaddr_ll, padding to 16 (the kernel reserves
    // 16 bytes for the MAC header), the virtio-net header, then the frame.
    let need = RX_DATA_AT + 16 + 10 + mtu + 18 + 4;
    need.next_power_of_two().clamp(2048, MAX_FRAME_SIZE)
}

fn packet_socket(protocol: u16) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::c_int::from(protocol),
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn bind(fd: RawFd, ifindex: i32, protocol: u16) -> io::Result<()> {
    // SAFETY: all-zero sockaddr_ll is valid; the fields set below are plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol;
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a sockaddr_ll of the stated length, valid for the call.
    let r = unsafe {
        libc::bind(
            fd,
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A receive socket's second descriptor (see [`RxRing::handle`]).
#[derive(Debug)]
pub struct SocketHandle(OwnedFd);

impl SocketHandle {
    /// Replaces the socket's filter.
    pub fn set_filter(&self, filter: &[BpfInsn]) -> io::Result<()> {
        attach_filter(self.0.as_raw_fd(), filter)
    }
}

/// The ring-full drops of packet socket `fd` since the last read (the
/// kernel resets its counter on every read).
fn take_drops(fd: RawFd) -> io::Result<u32> {
    let mut st = [0u32; 2];

    let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
    // SAFETY: PACKET_STATISTICS writes a struct tpacket_stats (two u32s)
    // into `st`, whose size `len` states.
    let r = unsafe {
        libc::getsockopt(
            fd,
            SOL_PACKET,
            PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st[1])
}

fn attach_filter(fd: RawFd, filter: &[BpfInsn]) -> io::Result<()> {
    let prog = SockFprog {
        len: u16::try_from(filter.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?,
        filter: filter.as_ptr(),
    };
    // The kernel copies the program during the call; `filter` outlives it.
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_sizes_follow_the_mtu() {
        assert_eq!(frame_size_for(1500), 2048);
        assert_eq!(frame_size_for(1900), 2048);
        assert_eq!(frame_size_for(2000), 4096);
        assert_eq!(frame_size_for(9000), 16384);
        assert_eq!(frame_size_for(65536), MAX_FRAME_SIZE);
    }
}
