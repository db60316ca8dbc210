//! ICMPv4 echo request and reply (RFC 792). Other types are unsupported.

use super::{be16, checksum, put_be16, Error, Result};

/// Length of the echo header (type, code, checksum, identifier, sequence).
pub const HEADER_LEN: usize = 8;

/// A checked view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps `buffer` after checking it holds an 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Echo identifier.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number.
    pub fn seq(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Echo data.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// True when the checksum over the whole message verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }
}

/// The validated meaning of an ICMP echo message; `data` borrows the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpRepr<'a> {
    /// Type 8.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Data echoed back by the peer.
        data: &'a [u8],
    },
    /// Type 0.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Data from the request.
        data: &'a [u8],
    },
}

impl<'a> IcmpRepr<'a> {
    /// Reads a checked message.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &'a IcmpPacket<&'a T>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Malformed);
        }
        let data = &p.buffer.as_ref()[HEADER_LEN..];
        match (p.msg_type(), p.code()) {
            (8, 0) => Ok(Self::EchoRequest {
                ident: p.ident(),
                seq: p.seq(),
                data,
            }),
            (0, 0) => Ok(Self::EchoReply {
                ident: p.ident(),
                seq: p.seq(),
                data,
            }),
            _ => Err(Error::Unsupported),
        }
    }

    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::EchoRequest { data, .. } | Self::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
        }
    }

    /// Writes the message with a valid checksum into `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let (ty, ident, seq, data) = match *self {
            Self::EchoRequest { ident, seq, data } => (8, ident, seq, data),
            Self::EchoReply { ident, seq, data } => (0, ident, seq, data),
        };
        buf[0] = ty;
        buf[1] = 0;
        put_be16(buf, 2, 0);
        put_be16(buf, 4, ident);
        put_be16(buf, 6, seq);
        buf[HEADER_LEN..len].copy_from_slice(data);
        let c = checksum::checksum(&buf[..len]);
        put_be16(buf, 2, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_round_trip() {
        let r = IcmpRepr::EchoRequest {
            ident: 0x1234,
            seq: 9,
            data: b"ping",
        };
        let mut b = [0u8; 12];
        r.emit(&mut b).unwrap();
        let p = IcmpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(IcmpRepr::parse(&p).unwrap(), r);
    }

    #[test]
    fn bad_checksum_and_type() {
        let mut b = [0u8; 12];
        IcmpRepr::EchoReply {
            ident: 1,
            seq: 2,
            data: b"abcd",
        }
        .emit(&mut b)
        .unwrap();
        let mut bad = b;
        bad[9] ^= 1;
        assert_eq!(
            IcmpRepr::parse(&IcmpPacket::new_checked(&bad[..]).unwrap()),
            Err(Error::Malformed)
        );
        let mut unreach = [3u8, 1, 0, 0, 0, 0, 0, 0];
        let c = checksum::checksum(&unreach);
        unreach[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            IcmpRepr::parse(&IcmpPacket::new_checked(&unreach[..]).unwrap()),
            Err(Error::Unsupported)
        );
    }
}
