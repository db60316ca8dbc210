//! IPv6 fixed headers (RFC 8200), as far as segmentation and aggregation
//! of TCP need them: lengths, next header, addresses. Extension headers
//! are not walked.

use super::{be16, put_be16, Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// A checked view of an IPv6 packet: the buffer holds the fixed header and
/// the payload length it announces.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` after checking the version and the payload length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + usize::from(be16(b, 4)) {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Version, traffic class and flow label (the first four bytes).
    pub fn first_word(&self) -> [u8; 4] {
        let b = self.b();
        [b[0], b[1], b[2], b[3]]
    }

    /// Payload length.
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.b(), 4))
    }

    /// Next header (the upper-layer protocol when there are no extension headers).
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        a
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        put_be16(self.buffer.as_mut(), 4, v);
    }
}

/// A checked view of an IPv6 fixed header alone: the first bytes of a
/// packet, as far as a flow hash reads them (the payload need not be
/// there).
#[derive(Debug, Clone)]
pub struct Ipv6Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Header<T> {
    /// Wraps `buffer` after checking the version and that it holds the
    /// fixed header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        Ok(Self { buffer })
    }

    /// Next header (the upper-layer protocol when there are no extension headers).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    /// What the buffer holds after the fixed header.
    pub fn rest(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_version_and_length() {
        let mut b = [0u8; 48];
        b[0] = 0x60;
        b[4..6].copy_from_slice(&8u16.to_be_bytes());
        b[6] = 6;
        b[7] = 64;
        b[8] = 0xfe;
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (8, 6, 64)
        );
        assert_eq!(p.src()[0], 0xfe);
        p.set_payload_len(4);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).map(|_| ()),
            Ok(()),
            "payload 4 fits"
        );
        b[4..6].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        b[0] = 0x40;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
    }
}
