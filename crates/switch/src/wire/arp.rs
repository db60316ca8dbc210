//! ARP for IPv4 over Ethernet (RFC 826).

use super::{be16, put_be16, Error, EthernetAddress, Ipv4Address, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOperation {
    /// Who has `target_ip`?
    Request,
    /// `source_ip` is at `source_mac`.
    Reply,
}

/// A checked view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buffer` after checking it holds a whole Ethernet/IPv4 ARP packet.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Hardware type (1 = Ethernet).
    pub fn hardware_type(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Protocol type (0x0800 = IPv4).
    pub fn protocol_type(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.b()[4]
    }

    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.b()[5]
    }

    /// Operation code.
    pub fn operation(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// Sender hardware address.
    pub fn source_mac(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.b()[8..14])
    }

    /// Sender protocol address.
    pub fn source_ip(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.b()[14..18])
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.b()[18..24])
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(&self.b()[24..28])
    }
}

/// The validated meaning of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub source_mac: EthernetAddress,
    /// Sender IPv4 address.
    pub source_ip: Ipv4Address,
    /// Target MAC (zero in requests).
    pub target_mac: EthernetAddress,
    /// Target IPv4 address.
    pub target_ip: Ipv4Address,
}

impl ArpRepr {
    /// Reads a checked packet; anything but Ethernet/IPv4 request or reply is unsupported.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<Self> {
        if p.hardware_type() != 1
            || p.protocol_type() != 0x0800
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        let operation = match p.operation() {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            _ => return Err(Error::Unsupported),
        };
        Ok(Self {
            operation,
            source_mac: p.source_mac(),
            source_ip: p.source_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    /// Writes the packet into the first 28 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        put_be16(buf, 0, 1);
        put_be16(buf, 2, 0x0800);
        buf[4] = 6;
        buf[5] = 4;
        put_be16(
            buf,
            6,
            match self.operation {
                ArpOperation::Request => 1,
                ArpOperation::Reply => 2,
            },
        );
        buf[8..14].copy_from_slice(&self.source_mac.0);
        buf[14..18].copy_from_slice(&self.source_ip.0);
        buf[18..24].copy_from_slice(&self.target_mac.0);
        buf[24..28].copy_from_slice(&self.target_ip.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = ArpRepr {
            operation: ArpOperation::Request,
            source_mac: "02:00:00:00:00:01".parse().unwrap(),
            source_ip: Ipv4Address([10, 0, 0, 1]),
            target_mac: EthernetAddress::default(),
            target_ip: Ipv4Address([10, 0, 0, 2]),
        };
        let mut b = [0u8; 28];
        r.emit(&mut b).unwrap();
        assert_eq!(&b[..8], &[0, 1, 8, 0, 6, 4, 0, 1]);
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
    }

    #[test]
    fn rejects_other_hardware_and_ops() {
        let mut b = [0u8; 28];
        ArpRepr {
            operation: ArpOperation::Reply,
            source_mac: EthernetAddress::default(),
            source_ip: Ipv4Address([0; 4]),
            target_mac: EthernetAddress::default(),
            target_ip: Ipv4Address([0; 4]),
        }
        .emit(&mut b)
        .unwrap();
        let mut bad_op = b;
        bad_op[7] = 3;
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&bad_op[..]).unwrap()),
            Err(Error::Unsupported)
        );
        b[1] = 6;
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()),
            Err(Error::Unsupported)
        );
        assert_eq!(
            ArpPacket::new_checked(&b[..27]).unwrap_err(),
            Error::Truncated
        );
    }
}
