//! TCP segment headers (RFC 9293): what software segmentation (TSO) and
//! receive aggregation (LRO) read and rewrite. Options are carried as bytes.

use super::{be16, put_be16, Error, Result};

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// Header flags (the low byte of the flags field).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// The urgent pointer is significant.
    pub const URG: u8 = 0x20;
    /// ECN echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;
}

/// A checked view of a TCP segment: the buffer holds at least the header
/// with its options (the data offset is in range).
#[derive(Debug, Clone)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Wraps `buffer` after checking the data offset against its length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }

    /// Header length with options.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// Flags ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }

    /// The reserved bits next to the data offset (must be zero to aggregate).
    pub fn reserved(&self) -> u8 {
        self.b()[12] & 0x0f
    }

    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.b(), 18)
    }

    /// The options bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.m()[4..8].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the acknowledgment number.
    pub fn set_ack(&mut self, v: u32) {
        self.m()[8..12].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, f: u8) {
        self.m()[13] = f;
    }

    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        put_be16(self.m(), 14, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        put_be16(self.m(), 16, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_rewrites_fields() {
        let mut b = [0u8; 40];
        b[0..2].copy_from_slice(&1234u16.to_be_bytes());
        b[2..4].copy_from_slice(&80u16.to_be_bytes());
        b[12] = 6 << 4; // 24-byte header
        b[13] = flags::ACK | flags::PSH;
        b[20..24].copy_from_slice(&[1, 1, 4, 2]);
        let mut t = TcpSegment::new_checked(&mut b[..]).unwrap();
        t.set_seq(0x0102_0304);
        t.set_ack(7);
        t.set_window(512);
        t.set_checksum(0xbeef);
        assert_eq!((t.src_port(), t.dst_port()), (1234, 80));
        assert_eq!((t.seq(), t.ack(), t.window()), (0x0102_0304, 7, 512));
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.options(), &[1, 1, 4, 2]);
        assert_eq!(t.payload().len(), 16);
        assert_eq!(t.flags(), flags::ACK | flags::PSH);
        assert_eq!(t.checksum(), 0xbeef);
    }

    #[test]
    fn rejects_bad_offsets() {
        let mut b = [0u8; 20];
        b[12] = 4 << 4;
        assert_eq!(
            TcpSegment::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        b[12] = 6 << 4;
        assert_eq!(
            TcpSegment::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            TcpSegment::new_checked(&b[..19]).unwrap_err(),
            Error::Truncated
        );
    }
}
