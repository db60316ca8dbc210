//! The flow hash: which flow a frame belongs to, and a keyed hash of it.
//! One mechanism for the two places that spread flows: a multiqueue vNIC's
//! receive queues (`vhost_user/steer.rs`) and a VXLAN port's outer UDP
//! source port (`vxlan/flow.rs`, RFC 7348 §5), so that both see the same
//! flows in the same headers.
//!
//! A flow is read with the `wire` views, from the frame's first bytes: one
//! VLAN tag (802.1Q or 802.1ad) is skipped; an IPv4 or IPv6 packet's
//! protocol and addresses are the flow, with the ports of TCP, UDP and
//! SCTP when the packet carries them. An IPv4 fragment, first or not,
//! hashes on its addresses alone: a later fragment has no ports, and a
//! datagram's fragments must not be reordered against each other (on
//! queues or underlay paths). Extension headers are not walked. Anything
//! else is not a flow here (each user says what it does with it).
//!
//! The hash is keyed ([`SteerKey`]): foldhash (already a dependency of the
//! switch), its quality variant: two or three folded 64x64-bit multiplies
//! for an IPv4 flow, where keyed SipHash-1-3 runs a round of 14 operations
//! per 8 bytes of input and 3 more to finish, and a software Toeplitz hash
//! a step per bit. (The fast variant, one multiply fewer, leaves a queue
//! pick uneven: the pick reads the hash's top bits.) Why a vNIC's key is
//! secret is in `vhost_user/steer.rs`.

use crate::wire::ethernet::{EtherType, EthernetFrame};
use crate::wire::ipv4::Ipv4Header;
use crate::wire::ipv6::Ipv6Header;
use crate::wire::vlan::VlanHeader;
use std::hash::{BuildHasher, Hasher};

/// The 802.1ad (QinQ) service tag's EtherType.
const ETH_QINQ: u16 = 0x88a8;
/// TCP, UDP and SCTP: transport protocols whose first four bytes are the ports.
const PORTED: [u8; 3] = [6, 17, 132];

/// A key for the flow hash.
#[derive(Clone)]
pub struct SteerKey {
    seed: u64,
    shared: foldhash::SharedSeed,
}

impl std::fmt::Debug for SteerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs and debug output.
        f.write_str("SteerKey(..)")
    }
}

impl SteerKey {
    /// A fresh random key: 128 bits from std's `RandomState`, whose
    /// SipHash keys come from the operating system's random source.
    pub fn random() -> Self {
        let r = std::collections::hash_map::RandomState::new();
        Self::from_seeds(r.hash_one(1u64), r.hash_one(2u64))
    }

    /// The key made of two 64-bit seeds (tests, and a key known in advance).
    pub const fn from_seeds(seed: u64, shared: u64) -> Self {
        Self {
            seed,
            shared: foldhash::SharedSeed::from_u64(shared),
        }
    }
}

/// What a frame's flow is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow<'a> {
    /// The IP protocol (next header).
    pub proto: u8,
    /// Source then destination address (8 bytes for IPv4, 32 for IPv6).
    pub addrs: &'a [u8],
    /// Source then destination port, for TCP, UDP and SCTP when the
    /// packet carries them (not in a fragment).
    pub ports: Option<[u8; 4]>,
}

impl<'a> Flow<'a> {
    /// The flow of a frame whose bytes from the destination MAC on are
    /// `l2` (its first bytes may do); `None` for a frame that is not IPv4
    /// or IPv6, or is truncated before its addresses.
    pub fn parse(l2: &'a [u8]) -> Option<Self> {
        let eth = EthernetFrame::new_checked(l2).ok()?;
        let (ethertype, l3) = match eth.ethertype() {
            EtherType::Vlan | EtherType::Unknown(ETH_QINQ) => {
                let tag = VlanHeader::new_checked(eth.payload()).ok()?;
                (tag.ethertype(), &l2[18..])
            }
            et => (et, &l2[14..]),
        };
        let ports = |proto: u8, l4: &[u8]| -> Option<[u8; 4]> {
            if !PORTED.contains(&proto) {
                return None;
            }
            l4.get(..4).map(|p| [p[0], p[1], p[2], p[3]])
        };
        match ethertype {
            EtherType::Ipv4 => {
                let ip = Ipv4Header::new_checked(l3).ok()?;
                let proto = ip.protocol();
                // More fragments, or an offset: the addresses only.
                let ports = if ip.is_fragment() {
                    None
                } else {
                    ports(proto, ip.rest())
                };
                // (The view checked the header is there.)
                Some(Self {
                    proto,
                    addrs: &l3[12..20],
                    ports,
                })
            }
            EtherType::Ipv6 => {
                let ip = Ipv6Header::new_checked(l3).ok()?;
                let proto = ip.next_header();
                Some(Self {
                    proto,
                    addrs: &l3[8..40],
                    ports: ports(proto, ip.rest()),
                })
            }
            _ => None,
        }
    }

    /// The flow's hash under `key`.
    pub fn hash(&self, key: &SteerKey) -> u32 {
        let mut h = foldhash::quality::FoldHasher::with_seed(key.seed, &key.shared);
        h.write_u8(self.proto);
        for w in self.addrs.chunks(8) {
            let mut b = [0u8; 8];
            b[..w.len()].copy_from_slice(w);
            h.write_u64(u64::from_ne_bytes(b));
        }
        if let Some(p) = self.ports {
            h.write_u32(u32::from_ne_bytes(p));
        }
        let x = h.finish();
        (x >> 32) as u32 ^ x as u32
    }
}

/// The flow hash under `key` of a frame whose bytes (from the destination
/// MAC on) are `l2`; `None` for a frame that is not IPv4 or IPv6 (or is
/// truncated).
pub fn flow_hash(key: &SteerKey, l2: &[u8]) -> Option<u32> {
    Flow::parse(l2).map(|f| f.hash(key))
}

#[cfg(test)]
mod tests;
