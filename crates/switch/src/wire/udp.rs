//! UDP datagrams (RFC 768) over IPv4.

use super::{be16, checksum, put_be16, Error, IpProtocol, Ipv4Address, Result};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A checked view of a UDP datagram: the buffer holds at least `len` bytes.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` after checking the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = usize::from(be16(b, 4));
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Length field (header + payload).
    pub fn len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 4))
    }

    /// True when the datagram carries no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    /// Checksum field (0 = not computed).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }

    /// True when the checksum is absent or verifies against the pseudo-header.
    pub fn verify_checksum(&self, src: Ipv4Address, dst: Ipv4Address) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len();
        let acc = checksum::pseudo_header(src.0, dst.0, IpProtocol::Udp.into(), len as u16)
            .wrapping_add(checksum::sum(&self.buffer.as_ref()[..len]));
        checksum::fold(acc) == 0
    }
}

/// The validated meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads a checked datagram, verifying its checksum against the addresses.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        src: Ipv4Address,
        dst: Ipv4Address,
    ) -> Result<Self> {
        if !p.verify_checksum(src, dst) {
            return Err(Error::Malformed);
        }
        Ok(Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// Writes header and `payload` into `buf` with a checksum over the pseudo-header.
    pub fn emit(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        src: Ipv4Address,
        dst: Ipv4Address,
    ) -> Result<()> {
        let len = HEADER_LEN + payload.len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let len16 = u16::try_from(len).map_err(|_| Error::Malformed)?;
        put_be16(buf, 0, self.src_port);
        put_be16(buf, 2, self.dst_port);
        put_be16(buf, 4, len16);
        put_be16(buf, 6, 0);
        buf[HEADER_LEN..len].copy_from_slice(payload);
        let acc = checksum::pseudo_header(src.0, dst.0, IpProtocol::Udp.into(), len16)
            .wrapping_add(checksum::sum(&buf[..len]));
        let c = match checksum::fold(acc) {
            0 => 0xffff,
            c => c,
        };
        put_be16(buf, 6, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Address = Ipv4Address([10, 0, 0, 1]);
    const B: Ipv4Address = Ipv4Address([10, 0, 0, 2]);

    #[test]
    fn round_trip() {
        let r = UdpRepr {
            src_port: 4000,
            dst_port: 7,
        };
        let mut b = [0u8; 13];
        r.emit(&mut b, b"hello", A, B).unwrap();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(UdpRepr::parse(&p, A, B).unwrap(), r);
        // The checksum covers the addresses.
        let c = Ipv4Address([10, 0, 0, 3]);
        assert_eq!(UdpRepr::parse(&p, A, c).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn length_field_checked() {
        let mut b = [0u8; 13];
        UdpRepr {
            src_port: 1,
            dst_port: 2,
        }
        .emit(&mut b, b"hello", A, B)
        .unwrap();
        assert_eq!(
            UdpPacket::new_checked(&b[..12]).unwrap_err(),
            Error::Truncated
        );
        b[5] = 3;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
    }
}
