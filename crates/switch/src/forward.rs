//! The forwarding decision: from a frame's Ethernet header and its ingress
//! port to a destination (one port, or a flood within the frame's VLAN).
//!
//! Pure logic over the FDB and the ports' VLAN and guard policies; the data
//! path does the copying. Time is an input.

use crate::fdb::{Fdb, Learned, Limits, Place};
use crate::stats::DropReason;
use crate::vlan::{Tagging, VlanMode};
use crate::wire::{ethernet, vlan, EtherType, EthernetAddress};
use crate::PortId;
use std::time::Instant;

/// The L2 facts the decision needs, read from the first bytes of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2Header {
    /// Destination MAC.
    pub dst: EthernetAddress,
    /// Source MAC.
    pub src: EthernetAddress,
    /// The 802.1Q VLAN id when the frame is tagged.
    pub tag: Option<u16>,
    /// An ARP or RARP frame: what a VM sends to announce where it is
    /// (after a live migration); it may move its source at once (see
    /// [`crate::fdb::moves`]).
    pub announce: bool,
}

/// RARP's EtherType (QEMU's self-announce after a migration).
const ETH_RARP: u16 = 0x8035;

/// Whether a frame of this (inner) EtherType announces its source.
pub fn is_announce(ethertype: EtherType) -> bool {
    matches!(ethertype, EtherType::Arp | EtherType::Unknown(ETH_RARP))
}

impl L2Header {
    /// Bytes of the frame [`L2Header::parse`] needs at most.
    pub const MAX_LEN: usize = ethernet::HEADER_LEN + vlan::HEADER_LEN;

    /// Reads the header from the start of a frame.
    pub fn parse(frame: &[u8]) -> Result<Self, DropReason> {
        let eth = ethernet::EthernetFrame::new_checked(frame).map_err(|_| DropReason::Malformed)?;
        let (tag, inner) = if eth.ethertype() == EtherType::Vlan {
            let h =
                vlan::VlanHeader::new_checked(eth.payload()).map_err(|_| DropReason::Malformed)?;
            (Some(h.vid()), h.ethertype())
        } else {
            (None, eth.ethertype())
        };
        Ok(Self {
            dst: eth.dst(),
            src: eth.src(),
            tag,
            announce: is_announce(inner),
        })
    }
}

/// A port's forwarding policy.
#[derive(Debug, Clone, Default)]
pub struct PortPolicy {
    /// VLAN membership.
    pub vlan: VlanMode,
    /// When set, frames from the port must carry this source MAC.
    pub spoof_guard: Option<EthernetAddress>,
    /// The port's configured MAC (a vNIC's uplink queue follows it).
    pub mac: Option<EthernetAddress>,
    /// The uplink receive queue a vNIC asks for.
    pub uplink_queue: crate::netqueue::QueueRequest,
    /// Share, limit and reservation on the uplinks' egress.
    pub egress: crate::egress::EgressPolicy,
    /// Direct mode: the uplink this vNIC is bound to, bypassing switching.
    pub direct: Option<String>,
    /// Cross-connected with this port: frames go to it as they are.
    pub cross_connect: Option<String>,
    /// Addresses the port may have learned in its worker's FDB (`None`:
    /// the switch's default, see [`crate::fdb`]).
    pub fdb_limit: Option<u32>,
    /// A VXLAN port: addresses each remote VTEP may have learned.
    pub vtep_fdb_limit: Option<u32>,
    /// A VXLAN port in EVPN mode: its sources are not learned (the
    /// control plane places remote addresses).
    pub evpn: bool,
}

impl PortPolicy {
    /// The FDB limits of the port's sources.
    pub fn fdb_limits(&self) -> Limits {
        Limits {
            port: self.fdb_limit,
            vtep: self.vtep_fdb_limit,
        }
    }
}

/// Where a frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// To one port, with this tagging.
    Port(PortId, Tagging),
    /// To every other member of the VLAN.
    Flood,
}

/// The decision for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The frame's VLAN.
    pub vid: u16,
    /// Where it goes.
    pub dest: Destination,
    /// What became of the frame's source address in the FDB.
    pub learned: Learned,
}

/// Decides for one frame from `from` (a port, with policy `policy`, and the
/// VTEP it came from behind a VXLAN port), learning its source address. `egress_tagging(port, vid)` tells how (and whether) a
/// frame of `vid` leaves `port`; flood destinations are expanded by the
/// caller with the same rule on every other port.
pub fn decide(
    fdb: &mut Fdb,
    from: Place,
    policy: &PortPolicy,
    l2: &L2Header,
    now: Instant,
    egress_tagging: impl Fn(PortId, u16) -> Option<Tagging>,
) -> Result<Decision, DropReason> {
    if l2.src.is_multicast() {
        return Err(DropReason::Spoof);
    }
    if let Some(mac) = policy.spoof_guard {
        if l2.src != mac {
            return Err(DropReason::Spoof);
        }
    }
    let vid = policy.vlan.ingress(l2.tag).ok_or(DropReason::Vlan)?;
    let ingress = from.port;
    let learned = match policy.evpn {
        true => Learned::Off,
        false => fdb.learn_at(vid, l2.src, from, l2.announce, policy.fdb_limits(), now),
    };
    if l2.dst.is_multicast() {
        return Ok(Decision {
            vid,
            dest: Destination::Flood,
            learned,
        });
    }
    match fdb.lookup(vid, l2.dst, now) {
        Some(p) if p == ingress => Err(DropReason::NoRoute),
        Some(p) => match egress_tagging(p, vid) {
            Some(t) => Ok(Decision {
                vid,
                dest: Destination::Port(p, t),
                learned,
            }),
            // The FDB points at a port that left the VLAN or the switch: flood.
            None => Ok(Decision {
                vid,
                dest: Destination::Flood,
                learned,
            }),
        },
        None => Ok(Decision {
            vid,
            dest: Destination::Flood,
            learned,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vlan::VlanSet;
    use std::time::Duration;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    fn hdr(src: u8, dst: EthernetAddress, tag: Option<u16>) -> L2Header {
        L2Header {
            src: mac(src),
            dst,
            tag,
            announce: false,
        }
    }

    struct Topo {
        fdb: Fdb,
        policies: Vec<PortPolicy>,
    }

    impl Topo {
        fn new() -> Self {
            let trunk = VlanMode::Trunk {
                allowed: VlanSet::from_ids(&[10, 20]),
                native: None,
            };
            Self {
                fdb: Fdb::new(64, Duration::from_secs(300)),
                policies: vec![
                    PortPolicy {
                        vlan: VlanMode::Access { vid: 10 },
                        spoof_guard: None,
                        ..Default::default()
                    },
                    PortPolicy {
                        vlan: VlanMode::Access { vid: 10 },
                        spoof_guard: Some(mac(2)),
                        ..Default::default()
                    },
                    PortPolicy {
                        vlan: VlanMode::Access { vid: 20 },
                        spoof_guard: None,
                        ..Default::default()
                    },
                    PortPolicy {
                        vlan: trunk,
                        spoof_guard: None,
                        ..Default::default()
                    },
                ],
            }
        }

        fn decide(
            &mut self,
            port: u32,
            l2: L2Header,
            now: Instant,
        ) -> Result<Decision, DropReason> {
            let policies = &self.policies;
            decide(
                &mut self.fdb,
                Place::port(PortId(port)),
                &policies[port as usize],
                &l2,
                now,
                |p, vid| policies.get(p.0 as usize).and_then(|x| x.vlan.egress(vid)),
            )
        }
    }

    #[test]
    fn unknown_floods_then_learned_unicasts() {
        let now = Instant::now();
        let mut t = Topo::new();
        let d = t.decide(0, hdr(1, mac(2), None), now).unwrap();
        assert_eq!(
            d,
            Decision {
                vid: 10,
                dest: Destination::Flood,
                learned: Learned::Changed,
            }
        );
        let d = t.decide(1, hdr(2, mac(1), None), now).unwrap();
        assert_eq!(d.dest, Destination::Port(PortId(0), Tagging::Untagged));
        let d = t.decide(0, hdr(1, mac(2), None), now).unwrap();
        assert_eq!(d.dest, Destination::Port(PortId(1), Tagging::Untagged));
        let d = t
            .decide(0, hdr(1, EthernetAddress::BROADCAST, None), now)
            .unwrap();
        assert_eq!(d.dest, Destination::Flood);
    }

    #[test]
    fn trunk_tags_and_access_strips() {
        let now = Instant::now();
        let mut t = Topo::new();
        // A host behind the trunk on VLAN 20 is learned there.
        t.decide(3, hdr(9, EthernetAddress::BROADCAST, Some(20)), now)
            .unwrap();
        let d = t.decide(2, hdr(3, mac(9), None), now).unwrap();
        assert_eq!(
            d,
            Decision {
                vid: 20,
                dest: Destination::Port(PortId(3), Tagging::Tagged(20)),
                learned: Learned::Changed,
            }
        );
        let d = t.decide(3, hdr(9, mac(3), Some(20)), now).unwrap();
        assert_eq!(d.dest, Destination::Port(PortId(2), Tagging::Untagged));
        // Same MAC on another VLAN is another entry: unknown there.
        let d = t.decide(0, hdr(1, mac(9), None), now).unwrap();
        assert_eq!(d.dest, Destination::Flood);
    }

    #[test]
    fn drops_by_reason() {
        let now = Instant::now();
        let mut t = Topo::new();
        assert_eq!(
            t.decide(1, hdr(7, mac(1), None), now),
            Err(DropReason::Spoof),
            "guarded port, wrong MAC"
        );
        assert!(t.decide(1, hdr(2, mac(1), None), now).is_ok());
        let mut group_src = hdr(1, mac(2), None);
        group_src.src = EthernetAddress::BROADCAST;
        assert_eq!(t.decide(0, group_src, now), Err(DropReason::Spoof));
        assert_eq!(
            t.decide(0, hdr(1, mac(2), Some(10)), now),
            Err(DropReason::Vlan),
            "tagged on access"
        );
        assert_eq!(
            t.decide(3, hdr(5, mac(2), Some(30)), now),
            Err(DropReason::Vlan),
            "VLAN not on trunk"
        );
        assert_eq!(
            t.decide(3, hdr(5, mac(2), None), now),
            Err(DropReason::Vlan),
            "no native VLAN"
        );
        // Hairpin: destination learned on the ingress port.
        t.decide(0, hdr(4, mac(1), None), now).unwrap();
        assert_eq!(
            t.decide(0, hdr(1, mac(4), None), now),
            Err(DropReason::NoRoute)
        );
    }

    #[test]
    fn parses_tagged_and_untagged_headers() {
        let mut f = [0u8; 18];
        f[0..6].copy_from_slice(&mac(2).0);
        f[6..12].copy_from_slice(&mac(1).0);
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&[0x00, 0x14]);
        f[16..18].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(L2Header::parse(&f).unwrap(), hdr(1, mac(2), Some(20)));
        assert_eq!(L2Header::parse(&f[..16]), Err(DropReason::Malformed));
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(L2Header::parse(&f[..14]).unwrap(), hdr(1, mac(2), None));
    }
}
