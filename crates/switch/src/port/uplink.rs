//! An uplink port: a host interface through an AF_PACKET socket (one
//! recvmsg or send per frame; a TPACKET ring or AF_XDP can replace the
//! socket behind the same shape). VLAN tags the interface's driver stripped
//! are put back in the frame, so a trunk uplink sees its tags; partially
//! checksummed frames from the host stack are completed here, since no port
//! negotiates checksum offload yet.

use super::{Watch, Watched};
use crate::sys::packet::PacketSocket;
use crate::wire::checksum;
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
    /// A frame this port cannot carry yet (GSO from the host stack).
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
        let (flags, gso_type) = (buf[4], buf[5]);
        if gso_type != crate::wire::virtio_net::GSO_NONE {
            return Some(Read::Unsupported);
        }
        if flags & crate::wire::virtio_net::FLAG_NEEDS_CSUM != 0 {
            complete_checksum(&mut buf[4..4 + n]);
        }
        match tci {
            Some(tci) => {
                // [hdr][dst src] moves 4 bytes forward; the tag goes after the MACs.
                buf.copy_within(4..4 + HDR_LEN + 12, 0);
                buf[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x81, 0x00]);
                buf[HDR_LEN + 14..HDR_LEN + 16].copy_from_slice(&tci.to_be_bytes());
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

/// Computes the checksum a NEEDS_CSUM frame leaves to the device, and clears the flag.
pub(crate) fn complete_checksum(f: &mut [u8]) {
    if f.len() < HDR_LEN {
        return;
    }
    let start = HDR_LEN + usize::from(u16::from_le_bytes([f[6], f[7]]));
    let at = start + usize::from(u16::from_le_bytes([f[8], f[9]]));
    if at + 2 > f.len() || start > f.len() {
        return;
    }
    let c = checksum::fold(checksum::sum(&f[start..]));
    // The pseudo-header sum the stack left in the field is part of the sum above.
    f[at..at + 2].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    f[0] &= !crate::wire::virtio_net::FLAG_NEEDS_CSUM;
    f[0] |= crate::wire::virtio_net::FLAG_DATA_VALID;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{udp::UdpPacket, Ipv4Address};

    #[test]
    fn completes_a_partial_udp_checksum() {
        // A UDP datagram as the stack hands it over with CHECKSUM_PARTIAL:
        // the checksum field holds the folded pseudo-header sum, not complemented.
        let (src, dst) = (Ipv4Address([10, 0, 0, 1]), Ipv4Address([10, 0, 0, 2]));
        let payload = b"partial";
        let udp_len = 8 + payload.len();
        let mut f = vec![0u8; HDR_LEN + 14 + 20 + udp_len];
        let l4 = HDR_LEN + 14 + 20;
        f[l4..l4 + 2].copy_from_slice(&1000u16.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&2000u16.to_be_bytes());
        f[l4 + 4..l4 + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        f[l4 + 8..].copy_from_slice(payload);
        let pseudo = checksum::pseudo_header(src.0, dst.0, 17, udp_len as u16);
        let mut p = pseudo;
        while p > 0xffff {
            p = (p & 0xffff) + (p >> 16);
        }
        f[l4 + 6..l4 + 8].copy_from_slice(&(p as u16).to_be_bytes());
        f[0] = crate::wire::virtio_net::FLAG_NEEDS_CSUM;
        f[6..8].copy_from_slice(&((14 + 20) as u16).to_le_bytes());
        f[8..10].copy_from_slice(&6u16.to_le_bytes());
        complete_checksum(&mut f);
        let u = UdpPacket::new_checked(&f[l4..]).unwrap();
        assert!(u.verify_checksum(src, dst));
        assert_eq!(f[0], crate::wire::virtio_net::FLAG_DATA_VALID);
    }
}
