//! Wire formats, in two layers (the smoltcp shape).
//!
//! Each format has a zero-copy view `Foo<T: AsRef<[u8]>>` whose constructor
//! `new_checked` verifies the length once, after which no accessor can panic,
//! and a `FooRepr` value that is the validated, owned meaning of the header,
//! with `parse` (view -> repr) and `emit` (repr -> bytes).

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
#[doc(hidden)]
pub mod testing;
pub mod udp;
pub mod virtio_net;
pub mod vlan;
pub mod vxlan;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
pub use icmp::{IcmpPacket, IcmpRepr};
pub use ipv4::{IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr};
pub use ipv6::Ipv6Packet;
pub use tcp::TcpSegment;
pub use udp::{UdpPacket, UdpRepr};
pub use virtio_net::{VirtioNetHdr, VirtioNetHdrRepr};
pub use vlan::{VlanHeader, VlanRepr};
pub use vxlan::{VxlanPacket, VxlanRepr};

/// Why a buffer is not a valid instance of a wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header or than a length field claims.
    #[error("truncated packet")]
    Truncated,
    /// A field holds a value the format forbids (bad version, bad checksum, ...).
    #[error("malformed packet")]
    Malformed,
    /// The packet is valid but uses a variant this code does not handle.
    #[error("unsupported packet variant")]
    Unsupported,
}

/// Result of wire parsing.
pub type Result<T> = std::result::Result<T, Error>;

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn put_be16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
