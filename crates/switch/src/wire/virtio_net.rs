//! The virtio-net header that precedes every frame on a virtio-net queue
//! (VIRTIO 1.2, 5.1.6). With VIRTIO_F_VERSION_1 or VIRTIO_NET_F_MRG_RXBUF it
//! is 12 bytes (with `num_buffers`); legacy devices without either use 10.
//! All fields are little-endian.

use super::{Error, Result};

/// Header length with `num_buffers` (VERSION_1 or MRG_RXBUF negotiated).
pub const HEADER_LEN: usize = 12;
/// Header length of a legacy device without MRG_RXBUF.
pub const LEGACY_HEADER_LEN: usize = 10;

/// `flags`: checksum needed from `csum_start` at `csum_offset`.
pub const FLAG_NEEDS_CSUM: u8 = 1;
/// `flags`: checksum already validated.
pub const FLAG_DATA_VALID: u8 = 2;
/// `gso_type`: not a GSO frame.
pub const GSO_NONE: u8 = virtio_bindings::virtio_net::VIRTIO_NET_HDR_GSO_NONE as u8;
/// `gso_type`: TCP over IPv4 (TSO).
pub const GSO_TCPV4: u8 = virtio_bindings::virtio_net::VIRTIO_NET_HDR_GSO_TCPV4 as u8;
/// `gso_type`: UDP fragmentation offload (not offered).
pub const GSO_UDP: u8 = virtio_bindings::virtio_net::VIRTIO_NET_HDR_GSO_UDP as u8;
/// `gso_type`: TCP over IPv6 (TSO).
pub const GSO_TCPV6: u8 = virtio_bindings::virtio_net::VIRTIO_NET_HDR_GSO_TCPV6 as u8;
/// `gso_type` bit: the frame has CWR set and segments must keep ECN semantics.
pub const GSO_ECN: u8 = virtio_bindings::virtio_net::VIRTIO_NET_HDR_GSO_ECN as u8;

/// A checked view of a virtio-net header of `len` bytes (10 or 12).
#[derive(Debug, Clone)]
pub struct VirtioNetHdr<T: AsRef<[u8]>> {
    buffer: T,
    len: usize,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl<T: AsRef<[u8]>> VirtioNetHdr<T> {
    /// Wraps `buffer` after checking it holds a header of `len` bytes (10 or 12).
    pub fn new_checked(buffer: T, len: usize) -> Result<Self> {
        if len != HEADER_LEN && len != LEGACY_HEADER_LEN {
            return Err(Error::Unsupported);
        }
        if buffer.as_ref().len() < len {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer, len })
    }

    /// `flags`.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// `gso_type`.
    pub fn gso_type(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// `hdr_len`.
    pub fn hdr_len(&self) -> u16 {
        le16(self.buffer.as_ref(), 2)
    }

    /// `gso_size`.
    pub fn gso_size(&self) -> u16 {
        le16(self.buffer.as_ref(), 4)
    }

    /// `csum_start`.
    pub fn csum_start(&self) -> u16 {
        le16(self.buffer.as_ref(), 6)
    }

    /// `csum_offset`.
    pub fn csum_offset(&self) -> u16 {
        le16(self.buffer.as_ref(), 8)
    }

    /// `num_buffers` (1 for a legacy 10-byte header).
    pub fn num_buffers(&self) -> u16 {
        if self.len == HEADER_LEN {
            le16(self.buffer.as_ref(), 10)
        } else {
            1
        }
    }
}

/// The validated meaning of a virtio-net header: the offload metadata the
/// switch carries unchanged between virtio ports, plus `num_buffers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VirtioNetHdrRepr {
    /// `flags` (NEEDS_CSUM, DATA_VALID).
    pub flags: u8,
    /// `gso_type` (NONE, TCPV4, UDP, TCPV6, with the ECN bit).
    pub gso_type: u8,
    /// Length of the headers to replicate per segment.
    pub hdr_len: u16,
    /// Segment size for GSO.
    pub gso_size: u16,
    /// Where checksumming starts.
    pub csum_start: u16,
    /// Where the checksum goes, from `csum_start`.
    pub csum_offset: u16,
    /// Buffers this frame spans on a mergeable receive queue.
    pub num_buffers: u16,
}

impl VirtioNetHdrRepr {
    /// Reads a checked header.
    pub fn parse<T: AsRef<[u8]>>(h: &VirtioNetHdr<T>) -> Result<Self> {
        if h.flags() & !(FLAG_NEEDS_CSUM | FLAG_DATA_VALID | 4) != 0 {
            return Err(Error::Malformed);
        }
        Ok(Self {
            flags: h.flags(),
            gso_type: h.gso_type(),
            hdr_len: h.hdr_len(),
            gso_size: h.gso_size(),
            csum_start: h.csum_start(),
            csum_offset: h.csum_offset(),
            num_buffers: h.num_buffers(),
        })
    }

    /// Writes a header of `len` bytes (10 or 12) into `buf`.
    pub fn emit(&self, buf: &mut [u8], len: usize) -> Result<()> {
        if len != HEADER_LEN && len != LEGACY_HEADER_LEN {
            return Err(Error::Unsupported);
        }
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        buf[0] = self.flags;
        buf[1] = self.gso_type;
        buf[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        buf[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        buf[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        buf[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        if len == HEADER_LEN {
            buf[10..12].copy_from_slice(&self.num_buffers.to_le_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_both_lengths() {
        let r = VirtioNetHdrRepr {
            flags: FLAG_NEEDS_CSUM,
            gso_type: 1,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
            num_buffers: 3,
        };
        let mut b = [0u8; 12];
        r.emit(&mut b, HEADER_LEN).unwrap();
        assert_eq!(
            VirtioNetHdrRepr::parse(&VirtioNetHdr::new_checked(&b[..], 12).unwrap()).unwrap(),
            r
        );
        let mut l = [0u8; 10];
        r.emit(&mut l, LEGACY_HEADER_LEN).unwrap();
        let legacy =
            VirtioNetHdrRepr::parse(&VirtioNetHdr::new_checked(&l[..], 10).unwrap()).unwrap();
        assert_eq!(
            legacy,
            VirtioNetHdrRepr {
                num_buffers: 1,
                ..r
            }
        );
    }

    #[test]
    fn rejects_bad_lengths_and_flags() {
        assert_eq!(
            VirtioNetHdr::new_checked(&[0u8; 12][..], 11).unwrap_err(),
            Error::Unsupported
        );
        assert_eq!(
            VirtioNetHdr::new_checked(&[0u8; 11][..], 12).unwrap_err(),
            Error::Truncated
        );
        let h =
            VirtioNetHdr::new_checked(&[0x80u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0][..], 12).unwrap();
        assert_eq!(VirtioNetHdrRepr::parse(&h), Err(Error::Malformed));
    }
}
