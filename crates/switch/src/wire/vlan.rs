//! 802.1Q VLAN tags: the 4 bytes after the 0x8100 EtherType
//! (tag control information, then the inner EtherType).

use super::{be16, put_be16, Error, EtherType, Result};

/// Length of the tag that follows the 0x8100 TPID (TCI + inner EtherType).
pub const HEADER_LEN: usize = 4;

/// A checked view of an 802.1Q tag (starting at the TCI).
#[derive(Debug, Clone)]
pub struct VlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VlanHeader<T> {
    /// Wraps `buffer` after checking it holds a whole tag.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// Priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        self.buffer.as_ref()[0] >> 5
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        self.buffer.as_ref()[0] & 0x10 != 0
    }

    /// VLAN identifier (12 bits).
    pub fn vid(&self) -> u16 {
        be16(self.buffer.as_ref(), 0) & 0x0fff
    }

    /// EtherType of the encapsulated payload.
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), 2))
    }

    /// Bytes after the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// The validated meaning of an 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanRepr {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id, 1..=4094 (0 means priority-tagged only, 4095 is reserved).
    pub vid: u16,
    /// Inner EtherType.
    pub ethertype: EtherType,
}

impl VlanRepr {
    /// Reads a checked tag; the reserved VID 4095 is malformed.
    pub fn parse<T: AsRef<[u8]>>(h: &VlanHeader<T>) -> Result<Self> {
        if h.vid() == 0x0fff {
            return Err(Error::Malformed);
        }
        Ok(Self {
            pcp: h.pcp(),
            dei: h.dei(),
            vid: h.vid(),
            ethertype: h.ethertype(),
        })
    }

    /// Writes the tag into the first 4 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.pcp > 7 || self.vid > 0x0ffe {
            return Err(Error::Malformed);
        }
        let tci = (u16::from(self.pcp) << 13) | (u16::from(self.dei) << 12) | self.vid;
        put_be16(buf, 0, tci);
        put_be16(buf, 2, self.ethertype.into());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = VlanRepr {
            pcp: 5,
            dei: true,
            vid: 100,
            ethertype: EtherType::Ipv4,
        };
        let mut b = [0u8; 4];
        r.emit(&mut b).unwrap();
        assert_eq!(b, [0xb0, 0x64, 0x08, 0x00]);
        let h = VlanHeader::new_checked(&b[..]).unwrap();
        assert_eq!(VlanRepr::parse(&h).unwrap(), r);
    }

    #[test]
    fn reserved_vid_and_truncation() {
        let b = [0x0f, 0xff, 0x08, 0x00];
        let h = VlanHeader::new_checked(&b[..]).unwrap();
        assert_eq!(VlanRepr::parse(&h), Err(Error::Malformed));
        assert_eq!(
            VlanHeader::new_checked(&b[..3]).unwrap_err(),
            Error::Truncated
        );
        let bad = VlanRepr {
            pcp: 8,
            dei: false,
            vid: 1,
            ethertype: EtherType::Arp,
        };
        assert_eq!(bad.emit(&mut [0u8; 4]), Err(Error::Malformed));
    }
}
