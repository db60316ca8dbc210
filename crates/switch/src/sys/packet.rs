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

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

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

fn ifindex(ifname: &str) -> io::Result<i32> {
    let cname = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    // SAFETY: `cname` is a valid C string for the call.
    let i = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i as i32)
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

/// A mapped TPACKET_V2 ring on a socket: `frames` slots of `frame_size` bytes.
#[derive(Debug)]
struct Ring {
    base: *mut u8,
    len: usize,
    frame_size: usize,
    frames: usize,
    head: usize,
}

// SAFETY: the mapping is owned by the ring (unmapped on drop) and reached
// only through `&mut Ring`; moving it to another thread moves that ownership.
unsafe impl Send for Ring {}

impl Ring {
    /// Sets up ring `which` (PACKET_RX_RING or PACKET_TX_RING) on `fd` and maps it.
    fn new(fd: RawFd, which: libc::c_int, frame_size: usize, frames: usize) -> io::Result<Self> {
        if !frame_size.is_power_of_two() || !(2048..=MAX_FRAME_SIZE).contains(&frame_size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring frame size must be a power of two between 2 KiB and 128 KiB",
            ));
        }
        // Blocks of 64 KiB (or one frame when larger): frames never straddle
        // a block, so frame i is at i * frame_size.
        let block_size = frame_size.max(1 << 16);
        let per_block = block_size / frame_size;
        let frames = frames.max(per_block).div_ceil(per_block) * per_block;
        let req = TpacketReq {
            block_size: block_size as u32,
            block_nr: (frames / per_block) as u32,
            frame_size: frame_size as u32,
            frame_nr: frames as u32,
        };
        setsockopt(fd, SOL_PACKET, which, &req)?;
        let len = frames * frame_size;
        // SAFETY: a fresh shared mapping of the ring the kernel just set up
        // on `fd`, of exactly its size; nothing else aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: base.cast(),
            len,
            frame_size,
            frames,
            head: 0,
        })
    }

    /// The status word of the frame at `head`.
    fn status(&self) -> &AtomicU32 {
        // SAFETY: `head < frames`, so the frame start is inside the mapping;
        // frames are 2 KiB aligned and the kernel accesses the word
        // atomically too (smp_store_release / smp_load_acquire).
        unsafe {
            &*(self
                .base
                .add(self.head * self.frame_size)
                .cast::<AtomicU32>())
        }
    }

    /// The header field at `off` (a u16 or u32) of the frame at `head`.
    fn field<T: Copy>(&self, off: usize) -> T {
        // SAFETY: `off` is inside the 32-byte header of a frame inside the
        // mapping, aligned for T; the frame belongs to user space (checked
        // by the caller through the status word with acquire ordering).
        unsafe {
            std::ptr::read_volatile(self.base.add(self.head * self.frame_size + off).cast::<T>())
        }
    }

    fn set_field<T: Copy>(&mut self, off: usize, v: T) {
        // SAFETY: as in `field`; the frame belongs to user space until its
        // status is handed back.
        unsafe {
            std::ptr::write_volatile(
                self.base.add(self.head * self.frame_size + off).cast::<T>(),
                v,
            )
        }
    }

    /// Bytes `from..frame_size` of the frame at `head`.
    fn data(&mut self, from: usize) -> &mut [u8] {
        // SAFETY: the range is inside the frame at `head`, inside the
        // mapping. The frame belongs to user space (the caller saw its
        // status with acquire ordering) until `advance` hands it back, and
        // `&mut self` keeps this the only reference to it.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base.add(self.head * self.frame_size + from),
                self.frame_size - from,
            )
        }
    }

    /// Hands the frame at `head` over with `status` and moves on.
    fn advance(&mut self, status: u32) {
        self.status().store(status, Ordering::Release);
        self.head += 1;
        if self.head == self.frames {
            self.head = 0;
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no reference
        // into it outlives `&mut self`.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
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

/// A transmit socket with its TX ring.
#[derive(Debug)]
pub struct TxRing {
    ring: Ring,
    fd: OwnedFd,
    pending: usize,
}

impl TxRing {
    /// Opens a transmit socket on `ifname` with `frames` slots of
    /// `frame_size` bytes; `qdisc_bypass` hands frames straight to the driver.
    pub fn open(
        ifname: &str,
        frame_size: usize,
        frames: usize,
        qdisc_bypass: bool,
    ) -> io::Result<Self> {
        let ifindex = ifindex(ifname)?;
        let fd = packet_socket(0)?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VNET_HDR, &1i32)?;
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        // A frame the kernel refuses (a bad header from a guest) is skipped
        // instead of stopping the ring.
        setsockopt(raw, SOL_PACKET, PACKET_LOSS, &1i32)?;
        if qdisc_bypass {
            setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        }
        let ring = Ring::new(raw, PACKET_TX_RING, frame_size, frames)?;
        // Bound to protocol 0: the socket sends on the interface and receives nothing.
        bind(raw, ifindex, 0)?;
        Ok(Self {
            ring,
            fd,
            pending: 0,
        })
    }

    /// The data area of the next free slot (virtio-net header, then the
    /// frame), or None when every slot is still queued or being sent.
    #[inline]
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        let s = self.ring.status().load(Ordering::Acquire);
        if s & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING) != 0 {
            return None;
        }
        Some(self.ring.data(HDR2_LEN))
    }

    /// The most a slot takes (virtio-net header and frame).
    #[inline]
    pub fn slot_len(&self) -> usize {
        self.ring.frame_size - HDR2_LEN
    }

    /// Queues the first `len` bytes of the slot [`TxRing::slot`] returned.
    #[inline]
    pub fn commit(&mut self, len: usize) {
        self.ring.set_field::<u32>(4, len as u32);
        self.ring.advance(TP_STATUS_SEND_REQUEST);
        self.pending += 1;
    }

    /// Frames queued since the last flush.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Hands every queued frame to the kernel (one system call, not waiting
    /// for completion).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        self.pending = 0;
        // SAFETY: a zero-length send with no buffer: the kernel reads the
        // frames from the ring mapped on this socket.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // Nothing could be sent right now; the frames stay queued.
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(());
            }
            return Err(e);
        }
        Ok(())
    }
}

impl AsRawFd for TxRing {
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

/// A transmit socket without a ring, for frames larger than a ring slot
/// (GSO frames up to 64 KiB): one `send` per frame.
#[derive(Debug)]
pub struct PlainTx {
    fd: OwnedFd,
}

impl PlainTx {
    /// Opens it on `ifname`.
    pub fn open(ifname: &str, qdisc_bypass: bool) -> io::Result<Self> {
        let ifindex = ifindex(ifname)?;
        let fd = packet_socket(0)?;
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VNET_HDR, &1i32)?;
        if qdisc_bypass {
            setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32)?;
        }
        bind(raw, ifindex, 0)?;
        Ok(Self { fd })
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
