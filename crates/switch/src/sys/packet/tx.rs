//! The transmit side: a socket whose TX ring takes a round's frames and
//! one `send` hands them all to the kernel, and a plain socket for frames
//! larger than a ring slot.

use super::ring::Ring;
use super::{
    bind, ifindex, packet_socket, setsockopt, HDR2_LEN, PACKET_LOSS, PACKET_QDISC_BYPASS,
    PACKET_TX_RING, PACKET_VERSION, PACKET_VNET_HDR, SOL_PACKET, TPACKET_V2, TP_STATUS_SENDING,
    TP_STATUS_SEND_REQUEST,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

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
