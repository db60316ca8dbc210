//! IPv4 headers (RFC 791). Options are carried but not interpreted;
//! fragments are reported as such and not reassembled.

use super::{be16, checksum, put_be16, Error, Result};
use std::fmt;

/// An IPv4 address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ipv4Address(pub [u8; 4]);

impl Ipv4Address {
    /// 255.255.255.255.
    pub const BROADCAST: Self = Self([255; 4]);

    /// Reads an address from the first four bytes of `b` (which must hold four).
    pub fn from_bytes(b: &[u8]) -> Self {
        Self([b[0], b[1], b[2], b[3]])
    }
}

impl From<std::net::Ipv4Addr> for Ipv4Address {
    fn from(a: std::net::Ipv4Addr) -> Self {
        Self(a.octets())
    }
}

impl From<Ipv4Address> for std::net::Ipv4Addr {
    fn from(a: Ipv4Address) -> Self {
        std::net::Ipv4Addr::from(a.0)
    }
}

impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::net::Ipv4Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The IP protocol numbers this crate knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpProtocol {
    /// 1.
    Icmp,
    /// 6.
    Tcp,
    /// 17.
    Udp,
    /// Any other number.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            1 => Self::Icmp,
            6 => Self::Tcp,
            17 => Self::Udp,
            other => Self::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> Self {
        match v {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Unknown(other) => other,
        }
    }
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// A checked view of an IPv4 packet: the buffer holds the header (with its
/// options) and at least `total_len` bytes.
/// The header length (options included) of the IPv4 header at the start
/// of `b`, after checking that the fixed part is there, the version is 4
/// and the length field is at least the fixed part. Whether the options
/// (or the whole packet) are there is the caller's check.
fn checked_header_len(b: &[u8]) -> Result<usize> {
    if b.len() < HEADER_LEN {
        return Err(Error::Truncated);
    }
    if b[0] >> 4 != 4 {
        return Err(Error::Malformed);
    }
    let ihl = usize::from(b[0] & 0x0f) * 4;
    if ihl < HEADER_LEN {
        return Err(Error::Malformed);
    }
    Ok(ihl)
}

#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` after checking the header length, the total length and the version.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let ihl = checked_header_len(b)?;
        let total = usize::from(be16(b, 2));
        if total < ihl {
            return Err(Error::Malformed);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes (with options).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// Total length field.
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.b(), 2))
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// True when the packet is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        be16(self.b(), 6) & 0x3fff != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// Protocol.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.b()[9])
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.b()[12..16])
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.b()[16..20])
    }

    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.b()[..self.header_len()]) == 0
    }

    /// The payload, up to `total_len` (link-layer padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
}

/// A checked view of an IPv4 header alone: the first bytes of a packet,
/// as far as a flow hash reads them (the packet's payload need not be
/// there). The version and the header length are checked, and the buffer
/// holds the whole header with its options.
#[derive(Debug, Clone)]
pub struct Ipv4Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Header<T> {
    /// Wraps `buffer` after checking the version and that it holds the
    /// header, options included.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < checked_header_len(buffer.as_ref())? {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Header length in bytes (with options).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// True when the packet is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        be16(self.b(), 6) & 0x3fff != 0
    }

    /// The protocol number.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    /// What the buffer holds after the header.
    pub fn rest(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

/// The validated meaning of an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Address,
    /// Destination address.
    pub dst: Ipv4Address,
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// Reads a checked packet; a bad checksum is malformed, fragments are unsupported.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Malformed);
        }
        if p.is_fragment() {
            return Err(Error::Unsupported);
        }
        Ok(Self {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ttl: p.ttl(),
        })
    }

    /// Header length this repr emits.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with a valid checksum into `buf`.
    pub fn emit(&self, buf: &mut [u8], ident: u16) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let total = u16::try_from(HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        buf[0] = 0x45;
        buf[1] = 0;
        put_be16(buf, 2, total);
        put_be16(buf, 4, ident);
        put_be16(buf, 6, 0x4000); // don't fragment
        buf[8] = self.ttl;
        buf[9] = self.protocol.into();
        put_be16(buf, 10, 0);
        buf[12..16].copy_from_slice(&self.src.0);
        buf[16..20].copy_from_slice(&self.dst.0);
        let c = checksum::checksum(&buf[..HEADER_LEN]);
        put_be16(buf, 10, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Address([10, 0, 0, 1]),
            dst: Ipv4Address([10, 0, 0, 2]),
            protocol: IpProtocol::Udp,
            payload_len: 4,
            ttl: 64,
        }
    }

    #[test]
    fn round_trip_with_checksum() {
        let mut b = [0u8; 24];
        sample().emit(&mut b, 7).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.ident(), 7);
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), sample());
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn rejects_bad_packets() {
        let mut b = [0u8; 24];
        sample().emit(&mut b, 1).unwrap();
        assert_eq!(
            Ipv4Packet::new_checked(&b[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut bad_sum = b;
        bad_sum[8] = 1;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&bad_sum[..]).unwrap()),
            Err(Error::Malformed)
        );
        let mut bad_ver = b;
        bad_ver[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&bad_ver[..]).unwrap_err(),
            Error::Malformed
        );
        let mut bad_ihl = b;
        bad_ihl[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&bad_ihl[..]).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn padding_is_not_payload() {
        let mut b = [0u8; 60];
        sample().emit(&mut b, 1).unwrap();
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap().payload().len(), 4);
    }
}
