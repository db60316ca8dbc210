//! The VXLAN header (RFC 7348 §5): 8 bytes in front of the inner Ethernet
//! frame, inside a UDP datagram to port 4789.
//!
//! ```text
//!  0               1               2               3
//! |R|R|R|R|I|R|R|R|            Reserved                           |
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! ```

use super::{Error, Result};

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// The IANA port (RFC 7348 §5).
pub const DEFAULT_PORT: u16 = 4789;
/// The I flag: the VNI is valid. The only flag RFC 7348 defines.
pub const FLAG_VNI: u8 = 0x08;
/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = 0x00ff_ffff;
/// What encapsulation adds in front of the inner frame on the underlay:
/// outer IPv4 (20, no options) + UDP (8) + VXLAN (8). The inner Ethernet
/// header is the inner frame's own: "50 bytes" in the usual telling counts
/// it against the inner IP packet.
pub const OVERHEAD: usize = 20 + 8 + HEADER_LEN;

/// A checked view of a VXLAN header and the inner frame behind it.
#[derive(Debug, Clone)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Wraps `buffer` after checking it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The 24-bit VNI field (meaningful when the I flag is set).
    pub fn vni(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([0, b[4], b[5], b[6]])
    }

    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// The validated meaning of a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VxlanRepr {
    /// The segment the inner frame belongs to.
    pub vni: u32,
}

impl VxlanRepr {
    /// Reads a checked header: the I flag must be set. The reserved bits
    /// are ignored on receipt, as §5 says (a sender may use them for
    /// extensions such as GPE or GBP; the VNI still means what it says).
    pub fn parse<T: AsRef<[u8]>>(p: &VxlanPacket<T>) -> Result<Self> {
        if p.flags() & FLAG_VNI == 0 {
            return Err(Error::Malformed);
        }
        Ok(Self { vni: p.vni() })
    }

    /// Writes the header (I flag, reserved bits zero) into `buf[..8]`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.vni > MAX_VNI {
            return Err(Error::Malformed);
        }
        let h = buf.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        let v = self.vni.to_be_bytes();
        h.copy_from_slice(&[FLAG_VNI, 0, 0, 0, v[1], v[2], v[3], 0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_the_fields_rfc_7348_shows() {
        let mut b = [0xaau8; 20];
        VxlanRepr { vni: 0x123456 }.emit(&mut b).unwrap();
        assert_eq!(&b[..8], &[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0]);
        let p = VxlanPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload(), &[0xaa; 12]);
        assert_eq!(VxlanRepr::parse(&p).unwrap(), VxlanRepr { vni: 0x123456 });
        assert_eq!(
            VxlanRepr { vni: MAX_VNI + 1 }.emit(&mut b),
            Err(Error::Malformed)
        );
        assert_eq!(
            VxlanRepr { vni: 1 }.emit(&mut b[..7]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn i_flag_required_reserved_bits_ignored() {
        let mut b = [0u8; 8];
        b[4..7].copy_from_slice(&[0, 0, 42]);
        let p = VxlanPacket::new_checked(&b[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&p), Err(Error::Malformed), "no I flag");
        b[0] = 0xff;
        b[1..4].copy_from_slice(&[1, 2, 3]);
        b[7] = 9;
        let p = VxlanPacket::new_checked(&b[..]).unwrap();
        assert_eq!(VxlanRepr::parse(&p), Ok(VxlanRepr { vni: 42 }));
        assert_eq!(
            VxlanPacket::new_checked(&b[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    /// Fuzz-style: any bytes either fail to parse or parse to a header that
    /// emits back to the same VNI with the I flag, and no input panics.
    #[test]
    fn arbitrary_bytes_never_panic_and_reparse() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 12) as usize;
            let bytes = x.to_le_bytes();
            let mut buf = [0u8; 12];
            buf[..8].copy_from_slice(&bytes);
            buf[8..].copy_from_slice(&bytes[..4]);
            let Ok(p) = VxlanPacket::new_checked(&buf[..len]) else {
                assert!(len < HEADER_LEN);
                continue;
            };
            let _ = p.payload();
            match VxlanRepr::parse(&p) {
                Ok(r) => {
                    assert!(r.vni <= MAX_VNI);
                    let mut out = [0u8; 8];
                    r.emit(&mut out).unwrap();
                    let q = VxlanPacket::new_checked(&out[..]).unwrap();
                    assert_eq!(VxlanRepr::parse(&q), Ok(r));
                    assert_eq!(q.flags(), FLAG_VNI);
                }
                Err(e) => {
                    assert_eq!(e, Error::Malformed);
                    assert_eq!(buf[0] & FLAG_VNI, 0);
                }
            }
        }
    }
}
