//! AF_PACKET sockets bound to one interface: promiscuous, carrying a
//! 10-byte virtio-net header (PACKET_VNET_HDR), not seeing their own
//! transmissions (PACKET_IGNORE_OUTGOING), and reporting VLAN tags the
//! driver stripped (PACKET_AUXDATA).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_AUXDATA: libc::c_int = 8;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: u16 = 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const ETH_P_ALL_BE: u16 = 0x0003u16.to_be();

#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: u16,
    alen: u16,
    address: [u8; 8],
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct AuxData {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    vlan_tci: u16,
    vlan_tpid: u16,
}

/// A bound packet socket.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is one int, valid for the call; the length says so.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl PacketSocket {
    /// Opens a socket on interface `ifname`.
    pub fn open(ifname: &str) -> io::Result<Self> {
        let cname = CString::new(ifname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        // SAFETY: `cname` is a valid C string for the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: plain socket(2) call.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(ETH_P_ALL_BE),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        setsockopt_int(raw, SOL_PACKET, PACKET_VNET_HDR, 1)?;
        setsockopt_int(raw, SOL_PACKET, PACKET_AUXDATA, 1)?;
        setsockopt_int(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        // SAFETY: all-zero sockaddr_ll is valid; the fields set below are plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL_BE;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a sockaddr_ll of the stated length, valid for the call.
        let r = unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mreq = PacketMreq {
            ifindex: ifindex as i32,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        // SAFETY: `mreq` has packet_mreq's layout and lives across the call.
        let r = unsafe {
            libc::setsockopt(
                raw,
                SOL_PACKET,
                PACKET_ADD_MEMBERSHIP,
                (&mreq as *const PacketMreq).cast(),
                std::mem::size_of::<PacketMreq>() as u32,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Receives one frame (virtio-net header first) into `buf`; returns its
    /// length and the VLAN TCI the driver stripped, if any. `WouldBlock` when empty.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Option<u16>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        #[repr(C, align(8))]
        struct Cbuf([u8; 64]);
        let mut cbuf = Cbuf([0; 64]);
        // SAFETY: all-zero msghdr is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.0.len() as _;
        // SAFETY: `msg` points at `iov` (covering `buf`) and `cbuf`, both valid for the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n > buf.len() || msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "frame larger than the buffer",
            ));
        }
        let mut tci = None;
        // SAFETY: walking the control messages the kernel wrote, bounded by
        // msg_controllen; a PACKET_AUXDATA payload is a tpacket_auxdata.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                    let aux: AuxData = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    if aux.status & TP_STATUS_VLAN_VALID != 0 {
                        tci = Some(aux.vlan_tci);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n, tci))
    }

    /// Sends one frame (virtio-net header first).
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of its length during the call.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
