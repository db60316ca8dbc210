//! Ethernet II frames.

use super::{be16, put_be16, Error, Result};
use std::fmt;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// Reads an address from the first six bytes of `b` (which must hold six).
    pub fn from_bytes(b: &[u8]) -> Self {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        Self(a)
    }

    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the group bit is set (multicast, including broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True for an individual (unicast) address.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The address as a u64 (upper 16 bits zero), handy as a hash key.
    pub fn to_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        b[2..].copy_from_slice(&self.0);
        u64::from_be_bytes(b)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for EthernetAddress {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut a = [0u8; 6];
        let mut n = 0;
        for part in s.split(':') {
            if n == 6 || part.len() != 2 {
                return Err(Error::Malformed);
            }
            a[n] = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
            n += 1;
        }
        if n != 6 {
            return Err(Error::Malformed);
        }
        Ok(Self(a))
    }
}

/// The EtherType field values this crate knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x8100, an 802.1Q tag follows.
    Vlan,
    /// 0x86dd.
    Ipv6,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => Self::Ipv4,
            0x0806 => Self::Arp,
            0x8100 => Self::Vlan,
            0x86dd => Self::Ipv6,
            other => Self::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> Self {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = 14;

/// A checked view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` after checking it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// Destination address.
    pub fn dst(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[0..6])
    }

    /// Source address.
    pub fn src(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[6..12])
    }

    /// EtherType (0x8100 when the frame carries an 802.1Q tag).
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), 12))
    }

    /// Bytes after the 14-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Mutable bytes after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The validated meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source address.
    pub src: EthernetAddress,
    /// Destination address.
    pub dst: EthernetAddress,
    /// EtherType.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<Self> {
        Ok(Self {
            src: frame.src(),
            dst: frame.dst(),
            ethertype: frame.ethertype(),
        })
    }

    /// Header length in bytes.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 14 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        put_be16(buf, 12, self.ethertype.into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x08, 0x06, 0xaa, 0xbb,
    ];

    #[test]
    fn parse_and_emit_round_trip() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert!(r.dst.is_broadcast());
        assert_eq!(r.src, "02:00:00:00:00:01".parse().unwrap());
        assert_eq!(r.ethertype, EtherType::Arp);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
        let mut out = [0u8; 14];
        r.emit(&mut out).unwrap();
        assert_eq!(out, FRAME[..14]);
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn address_classes() {
        let m: EthernetAddress = "01:00:5e:00:00:01".parse().unwrap();
        assert!(m.is_multicast() && !m.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        assert!("02:00:00:00:00:01"
            .parse::<EthernetAddress>()
            .unwrap()
            .is_unicast());
        assert!("02:00:00:00:00".parse::<EthernetAddress>().is_err());
        assert!("02:00:00:00:00:01:03".parse::<EthernetAddress>().is_err());
        assert_eq!(format!("{m}"), "01:00:5e:00:00:01");
    }
}
