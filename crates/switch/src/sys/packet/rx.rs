//! The receive side: a promiscuous socket per queue whose RX ring hands
//! frames over by status word (no system call per frame), and the
//! `recvmsg` path for frames larger than a slot.

use super::ring::Ring;
use super::{
    attach_filter, bind, ifindex, packet_socket, setsockopt, take_drops, BpfInsn, PacketMreq,
    SocketHandle, ETH_P_ALL_BE, PACKET_ADD_MEMBERSHIP, PACKET_AUXDATA, PACKET_COPY_THRESH,
    PACKET_IGNORE_OUTGOING, PACKET_MR_PROMISC, PACKET_RX_RING, PACKET_VERSION, PACKET_VNET_HDR,
    RX_DATA_AT, SOL_PACKET, TPACKET_V2, TP_STATUS_COPY, TP_STATUS_KERNEL, TP_STATUS_USER,
    TP_STATUS_VLAN_VALID,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

/// A received frame, in the ring until [`RxRing::release`].
#[derive(Debug)]
pub struct RxFrame<'a> {
    /// The slot from its data area on: `buf[at..at + len]` is the virtio-net
    /// header and the frame; bytes before `at` are free for the caller.
    pub buf: &'a mut [u8],
    /// Where the virtio-net header starts in `buf`.
    pub at: usize,
    /// Header plus frame bytes in the slot.
    pub len: usize,
    /// The frame did not fit the slot (`len` is what fitted).
    pub truncated: bool,
    /// The VLAN TCI the driver stripped into metadata, if any.
    pub vlan_tci: Option<u16>,
    /// The frame did not fit the slot and the kernel queued a full copy on
    /// the socket: read it with [`RxRing::recv_copy`].
    pub copied: bool,
    /// When the kernel received it (CLOCK_REALTIME).
    pub stamp: std::time::Duration,
}

/// A receive socket with its RX ring.
#[derive(Debug)]
pub struct RxRing {
    ring: Ring,
    fd: OwnedFd,
}

impl RxRing {
    /// Opens a receive socket on `ifname` with `frames` slots of `frame_size` bytes.
    /// With `filter`, only frames the classic BPF program accepts land in the ring.
    pub fn open(
        ifname: &str,
        frame_size: usize,
        frames: usize,
        filter: Option<&[BpfInsn]>,
    ) -> io::Result<Self> {
        let ifindex = ifindex(ifname)?;
        // Protocol 0 until bound: no frame reaches the socket before its
        // filter and ring are in place.
        let fd = packet_socket(0)?;
        let raw = fd.as_raw_fd();
        if let Some(f) = filter {
            attach_filter(raw, f)?;
        }
        setsockopt(raw, SOL_PACKET, PACKET_VNET_HDR, &1i32)?;
        setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32)?;
        // A frame larger than a slot (a GSO frame from the host stack) is
        // also queued whole on the socket, read with recvmsg, whose
        // PACKET_AUXDATA carries the VLAN tag the driver stripped.
        setsockopt(raw, SOL_PACKET, PACKET_COPY_THRESH, &1i32)?;
        setsockopt(raw, SOL_PACKET, PACKET_AUXDATA, &1i32)?;
        setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &(4i32 << 20))?;
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        let ring = Ring::new(raw, PACKET_RX_RING, frame_size, frames)?;
        bind(raw, ifindex, ETH_P_ALL_BE)?;
        let mreq = PacketMreq {
            ifindex,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        setsockopt(raw, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq)?;
        Ok(Self { ring, fd })
    }

    /// Frames the kernel dropped because the ring was full, since the last call.
    pub fn take_drops(&self) -> io::Result<u32> {
        take_drops(self.fd.as_raw_fd())
    }

    /// A second descriptor of this socket: its filter can be changed
    /// through it while the ring is served elsewhere (an uplink queue lent
    /// to another worker).
    pub fn handle(&self) -> io::Result<SocketHandle> {
        Ok(SocketHandle(self.fd.try_clone()?))
    }

    /// The next received frame, if the kernel has handed one over.
    #[inline]
    pub fn peek(&mut self) -> Option<RxFrame<'_>> {
        let status = self.ring.status().load(Ordering::Acquire);
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        let wire_len = self.ring.field::<u32>(4) as usize;
        let snaplen = self.ring.field::<u32>(8) as usize;
        let mac = usize::from(self.ring.field::<u16>(12));
        let tci = self.ring.field::<u16>(24);
        let stamp = std::time::Duration::new(
            u64::from(self.ring.field::<u32>(16)),
            self.ring.field::<u32>(20).min(999_999_999),
        );
        let frame_size = self.ring.frame_size;
        // The kernel places the virtio-net header right before the MAC
        // header; a slot that says otherwise comes out empty.
        let (at, len) = if mac >= RX_DATA_AT + 10 && mac <= frame_size {
            (mac - 10 - RX_DATA_AT, 10 + snaplen.min(frame_size - mac))
        } else {
            (0, 0)
        };
        Some(RxFrame {
            buf: self.ring.data(RX_DATA_AT),
            at,
            len,
            truncated: snaplen < wire_len,
            vlan_tci: (status & TP_STATUS_VLAN_VALID != 0).then_some(tci),
            copied: status & TP_STATUS_COPY != 0,
            stamp,
        })
    }

    /// Replaces the socket's filter (atomically for the kernel: every frame
    /// meets either the old program or the new one).
    pub fn set_filter(&self, filter: &[BpfInsn]) -> io::Result<()> {
        attach_filter(self.fd.as_raw_fd(), filter)
    }

    /// Receives the full copy of a frame whose slot says `copied` into
    /// `buf`; returns its length (virtio-net header first) and the VLAN TCI
    /// the driver stripped, if any.
    pub fn recv_copy(&self, buf: &mut [u8]) -> io::Result<(usize, Option<u16>)> {
        recv(self.fd.as_raw_fd(), buf)
    }

    /// Hands the frame [`RxRing::peek`] returned back to the kernel.
    #[inline]
    pub fn release(&mut self) {
        self.ring.advance(TP_STATUS_KERNEL);
    }
}

impl AsRawFd for RxRing {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One recvmsg of a frame with its PACKET_AUXDATA.
fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u16>)> {
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
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_TRUNC | libc::MSG_DONTWAIT) };
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
