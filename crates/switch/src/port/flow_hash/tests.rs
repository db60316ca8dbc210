//! The flow hash's flows, and its two users seeing the same ones.

use super::{flow_hash, Flow, SteerKey};
use crate::port::vhost_user::pick_pair;
use crate::port::vxlan::flow_port;

fn key() -> SteerKey {
    SteerKey::from_seeds(3, 4)
}

/// An Ethernet + IPv4 header of protocol `proto` with ports, `frag` in
/// the fragment field.
fn ip4(proto: u8, sport: u16, dport: u16, frag: u16) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&28u16.to_be_bytes());
    f[20..22].copy_from_slice(&frag.to_be_bytes());
    f[23] = proto;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f
}

/// An Ethernet + IPv6 header of next header `next` with ports.
fn ip6(next: u8, sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + 8];
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[20] = next;
    f[22..38].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f[38..54].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f[54..56].copy_from_slice(&sport.to_be_bytes());
    f[56..58].copy_from_slice(&443u16.to_be_bytes());
    f
}

/// `f` with a tag of EtherType `tpid` after the MACs.
fn tagged(f: &[u8], tpid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&tpid.to_be_bytes());
    t.extend_from_slice(&[0x00, 0x05]);
    t.extend_from_slice(&f[12..]);
    t
}

#[test]
fn a_flow_is_its_protocol_addresses_and_ports() {
    let f = ip4(6, 1000, 80, 0);
    let flow = Flow::parse(&f).unwrap();
    assert_eq!(flow.proto, 6);
    assert_eq!(flow.addrs, [10, 0, 0, 1, 10, 0, 0, 2]);
    assert_eq!(flow.ports, Some([0x03, 0xe8, 0, 80]));
    let f = ip6(17, 1000);
    let flow = Flow::parse(&f).unwrap();
    assert_eq!((flow.proto, flow.addrs.len()), (17, 32));
    assert_eq!(flow.ports, Some([0x03, 0xe8, 0x01, 0xbb]));
    // ICMP: addresses only.
    assert_eq!(Flow::parse(&ip4(1, 1, 2, 0)).unwrap().ports, None);
    // Not IP, not a flow; nor a header cut before its addresses.
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(Flow::parse(&arp), None);
    assert_eq!(Flow::parse(&ip4(6, 1, 2, 0)[..30]), None);
    // Anything at all: no panic.
    for n in 0..80 {
        let _ = Flow::parse(&vec![0x45; n]);
        let _ = Flow::parse(&tagged(&vec![0x08; n.max(12)], 0x8100));
    }
}

#[test]
fn tags_fragments_and_sctp_are_read_alike() {
    let plain = ip4(17, 5, 6, 0);
    for tpid in [0x8100, 0x88a8] {
        let t = tagged(&plain, tpid);
        assert_eq!(Flow::parse(&t), Flow::parse(&plain), "tag {tpid:#x}");
    }
    // Every fragment of a datagram, the first too: addresses only.
    let (a, b) = (ip4(17, 5, 6, 0x2000), ip4(17, 0, 0, 0x00b9));
    let first = Flow::parse(&a).unwrap();
    let later = Flow::parse(&b).unwrap();
    assert_eq!(first, later);
    assert_eq!(first.ports, None);
    // SCTP has ports.
    assert_eq!(
        Flow::parse(&ip4(132, 5, 6, 0)).unwrap().ports,
        Some([0, 5, 0, 6])
    );
}

/// Steering and the VXLAN source port put frames in the same flows: two
/// frames share a queue under every key exactly when they share a source
/// port (tags of either kind, fragments, SCTP and IPv6 included).
#[test]
fn steering_and_vxlan_source_ports_see_the_same_flows() {
    let cases: Vec<(Vec<u8>, Vec<u8>, bool)> = vec![
        (ip4(17, 5, 6, 0), tagged(&ip4(17, 5, 6, 0), 0x8100), true),
        (ip4(17, 5, 6, 0), tagged(&ip4(17, 5, 6, 0), 0x88a8), true),
        (ip4(17, 5, 6, 0x2000), ip4(17, 9, 9, 0x00b9), true),
        (ip4(17, 5, 6, 0x2000), ip4(17, 5, 6, 0), false),
        (ip4(132, 5, 6, 0), ip4(132, 5, 7, 0), false),
        (ip6(6, 1000), ip6(6, 1001), false),
        (ip6(6, 1000), tagged(&ip6(6, 1000), 0x88a8), true),
    ];
    let keys: Vec<SteerKey> = (0..8).map(|_| SteerKey::random()).collect();
    for (k, (a, b, same)) in cases.iter().enumerate() {
        assert_eq!(flow_port(a) == flow_port(b), *same, "case {k}: vxlan");
        // Different flows may share a queue under one key, not under all.
        let together = keys.iter().all(|key| {
            pick_pair(flow_hash(key, a), 0xffff) == pick_pair(flow_hash(key, b), 0xffff)
        });
        assert_eq!(together, *same, "case {k}: steering");
        assert_eq!(
            flow_hash(&key(), a) == flow_hash(&key(), b),
            *same,
            "case {k}"
        );
    }
}
