//! An uplink port: a host interface through an AF_PACKET socket (one
//! recvmsg or send per frame; a TPACKET ring or AF_XDP can replace the
//! socket behind the same shape). VLAN tags the interface's driver stripped
//! are put back in the frame, so a trunk uplink sees its tags. Partially
//! checksummed and TCP GSO frames from the host stack keep their virtio-net
//! header; the data path completes or segments them for destinations that
//! did not negotiate those offloads.

use super::{Watch, Watched};
use crate::sys::packet::PacketSocket;
use std::io;
use std::os::fd::AsRawFd;

/// The virtio-net header length on packet sockets (no `num_buffers`).
pub const HDR_LEN: usize = crate::wire::virtio_net::LEGACY_HEADER_LEN;
/// Largest frame plus header plus a re-inserted tag.
pub const BUF_LEN: usize = HDR_LEN + 65535 + 18 + 4;

/// Why an uplink could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open an AF_PACKET socket on {ifname}")]
pub struct UplinkError {
    /// Interface.
    pub ifname: String,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// What a read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A frame at `buf[start..start + len]` (virtio-net header first).
    Frame {
        /// Offset in the buffer.
        start: usize,
        /// Length.
        len: usize,
    },
    /// A frame larger than the buffer (truncated by the kernel).
    Unsupported,
}

/// The port.
#[derive(Debug)]
pub struct UplinkPort {
    sock: PacketSocket,
    ifname: String,
    readable: bool,
    out: Box<[u8]>,
}

impl UplinkPort {
    /// Opens the uplink on interface `ifname`.
    pub fn new(ifname: &str) -> Result<Self, UplinkError> {
        let sock = PacketSocket::open(ifname).map_err(|source| UplinkError {
            ifname: ifname.to_string(),
            source,
        })?;
        Ok(Self {
            sock,
            ifname: ifname.to_string(),
            readable: true,
            out: vec![0u8; BUF_LEN].into_boxed_slice(),
        })
    }

    /// The interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// What the worker should watch.
    pub fn watched(&self, out: &mut Vec<Watched>) {
        out.push((self.sock.as_raw_fd(), Watch::Connection));
    }

    /// The socket became readable.
    pub fn on_readable(&mut self) {
        self.readable = true;
    }

    /// Reads one frame into `buf` (at least [`BUF_LEN`] bytes).
    pub fn read(&mut self, buf: &mut [u8]) -> Option<Read> {
        if !self.readable {
            return None;
        }
        // Leave room in front to re-insert a stripped tag.
        let (n, tci) = match self.sock.recv(&mut buf[4..]) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return self.read(buf),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Some(Read::Unsupported),
            Err(_) => {
                self.readable = false;
                return None;
            }
        };
        if n < HDR_LEN + 14 {
            return Some(Read::Frame { start: 4, len: n });
        }
        match tci {
            Some(tci) => {
                // [hdr][dst src] moves 4 bytes forward; the tag goes after the MACs.
                buf.copy_within(4..4 + HDR_LEN + 12, 0);
                buf[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x81, 0x00]);
                buf[HDR_LEN + 14..HDR_LEN + 16].copy_from_slice(&tci.to_be_bytes());
                shift_offload_offsets(&mut buf[..HDR_LEN], 4);
                Some(Read::Frame {
                    start: 0,
                    len: n + 4,
                })
            }
            None => Some(Read::Frame { start: 4, len: n }),
        }
    }

    /// The output buffer a frame is assembled in before [`UplinkPort::send`].
    pub fn out_buf(&mut self) -> &mut [u8] {
        &mut self.out
    }

    /// Sends the first `len` bytes of the output buffer; false when the socket is full or down.
    pub fn send(&mut self, len: usize) -> bool {
        matches!(self.sock.send(&self.out[..len]), Ok(n) if n == len)
    }
}

/// Moves a virtio-net header's offsets (checksum start, GSO header length)
/// by `by` bytes: the kernel counts them in the frame without the tag the
/// driver stripped, and the tag goes back in before them.
fn shift_offload_offsets(h: &mut [u8], by: u16) {
    use crate::wire::virtio_net::{FLAG_NEEDS_CSUM, GSO_NONE};
    let bump = |h: &mut [u8], at: usize| {
        let v = u16::from_le_bytes([h[at], h[at + 1]]).wrapping_add(by);
        h[at..at + 2].copy_from_slice(&v.to_le_bytes());
    };
    if h[0] & FLAG_NEEDS_CSUM != 0 {
        bump(h, 6);
    }
    if h[1] != GSO_NONE {
        bump(h, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_a_reinserted_tag() {
        let mut h = [1u8, 1, 54, 0, 0xa8, 5, 34, 0, 16, 0];
        shift_offload_offsets(&mut h, 4);
        assert_eq!(h, [1, 1, 58, 0, 0xa8, 5, 38, 0, 16, 0]);
        let mut plain = [0u8, 0, 54, 0, 0, 0, 34, 0, 16, 0];
        shift_offload_offsets(&mut plain, 4);
        assert_eq!(plain, [0, 0, 54, 0, 0, 0, 34, 0, 16, 0]);
    }
}
