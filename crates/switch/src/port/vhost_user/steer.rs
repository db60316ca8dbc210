//! Steering toward a multiqueue vNIC: which of the guest's receive queues
//! a frame goes to.
//!
//! A flow (IPv4 or IPv6 addresses, protocol, TCP/UDP/SCTP ports) hashes to
//! one of the queue pairs the guest enabled, so its frames stay in order;
//! different flows spread over the pairs. IP fragments hash on the addresses
//! alone (a non-first fragment has no ports, and a datagram's fragments
//! must not be reordered against each other); frames that are not IP go to
//! the first enabled pair (pair 0 in practice: front-ends never disable it).
//! A single-pair port never gets here (see [`super::VhostUserPort::deliver`]).

use crate::datapath::Frame;

/// Bytes of a frame the hash may look at: a tagged Ethernet header, an
/// IPv4 header with its longest options, and the ports.
const HASH_PEEK: usize = 18 + 60 + 4;

/// The flow hash of a frame whose bytes (from the destination MAC on) are
/// `l2`; `None` for a frame that is not IPv4 or IPv6 (or is truncated).
pub fn flow_hash(l2: &[u8]) -> Option<u32> {
    let be16 = |at: usize| l2.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut l3 = 14;
    let mut ethertype = be16(12)?;
    if matches!(ethertype, 0x8100 | 0x88a8) {
        ethertype = be16(16)?;
        l3 = 18;
    }
    let (proto, addrs, l4) = match ethertype {
        0x0800 => {
            let ihl = usize::from(*l2.get(l3)? & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            // More fragments, or an offset: the addresses only.
            let fragment = be16(l3 + 6)? & 0x3fff != 0;
            let l4 = (!fragment).then_some(l3 + ihl);
            (*l2.get(l3 + 9)?, l2.get(l3 + 12..l3 + 20)?, l4)
        }
        0x86dd => (*l2.get(l3 + 6)?, l2.get(l3 + 8..l3 + 40)?, Some(l3 + 40)),
        _ => return None,
    };
    let mut h = mix(0, u64::from(proto));
    for w in addrs.chunks(8) {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        h = mix(h, u64::from_ne_bytes(b));
    }
    // TCP, UDP, SCTP: the ports, when the frame carries them.
    if let (Some(at), 6 | 17 | 132) = (l4, proto) {
        if let Some(p) = l2.get(at..at + 4) {
            h = mix(h, u64::from(u32::from_ne_bytes([p[0], p[1], p[2], p[3]])));
        }
    }
    Some((h >> 32) as u32 ^ h as u32)
}

/// One step of a multiply-rotate hash (good enough spread for picking one
/// of a few queues; not meant to resist chosen inputs: a guest choosing its
/// flows can at worst put them all on one of its own queues).
#[inline]
fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

/// The pair a frame with flow hash `hash` goes to, among the pairs whose
/// bits are set in `ready` (bit k: pair k); non-IP (`None`) goes to the
/// lowest. 0 when none is ready (the delivery then finds no queue).
pub fn pick_pair(hash: Option<u32>, ready: u32) -> usize {
    let n = ready.count_ones();
    if n == 0 {
        return 0;
    }
    // The k-th ready pair, k spread evenly over 0..n.
    let k = hash.map_or(0, |h| ((u64::from(h) * u64::from(n)) >> 32) as u32);
    let mut m = ready;
    for _ in 0..k {
        m &= m - 1;
    }
    m.trailing_zeros() as usize
}

/// The pair frame `f` goes to among `ready`: its headers are read once
/// (from what forwarding already read when that is enough).
pub(super) fn pair_for(f: &Frame<'_>, ready: u32) -> usize {
    if ready.count_ones() <= 1 {
        return pick_pair(None, ready);
    }
    let want = (f.frame_len as usize).min(HASH_PEEK);
    let hash = if f.head.len() >= want {
        flow_hash(f.head)
    } else {
        let mut b = [0u8; HASH_PEEK];
        let n = f.src.read(f.hdr_len as u64, &mut b[..want]);
        flow_hash(&b[..n])
    };
    pick_pair(hash, ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP header of a flow, with `frag` in the
    /// fragment field.
    fn udp4(src: [u8; 4], sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = 17;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn one_flow_one_queue_many_flows_every_queue() {
        let ready = 0b1111;
        let mut per_pair = [0u32; 4];
        for sport in 0..4000u16 {
            let f = udp4([10, 0, 0, 1], 1024 + sport, 7, 0);
            let h = flow_hash(&f);
            assert!(h.is_some());
            let p = pick_pair(h, ready);
            // The same flow again (and again): the same pair.
            assert_eq!(pick_pair(flow_hash(&f), ready), p);
            per_pair[p] += 1;
        }
        // 4000 flows over 4 pairs: each gets its share, roughly.
        for n in per_pair {
            assert!((700..1300).contains(&n), "{per_pair:?}");
        }
    }

    #[test]
    fn only_ready_pairs_are_picked() {
        for sport in 0..500u16 {
            let h = flow_hash(&udp4([10, 0, 0, 1], sport, 7, 0));
            assert!(matches!(pick_pair(h, 0b1010), 1 | 3));
            assert_eq!(pick_pair(h, 0b0100), 2);
        }
        assert_eq!(pick_pair(Some(7), 0), 0);
    }

    #[test]
    fn non_ip_goes_to_the_first_pair_and_fragments_ignore_ports() {
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(flow_hash(&arp), None);
        assert_eq!(pick_pair(None, 0b1111), 0);
        assert_eq!(pick_pair(None, 0b1100), 2);
        // A datagram's fragments: the same hash whatever the ports say.
        let first = flow_hash(&udp4([10, 0, 0, 1], 5, 6, 0x2000));
        let later = flow_hash(&udp4([10, 0, 0, 1], 0, 0, 0x00b9));
        assert_eq!(first, later);
        assert_ne!(first, flow_hash(&udp4([10, 0, 0, 1], 5, 6, 0)));
        // A VLAN tag in front changes nothing of the flow.
        let plain = udp4([10, 0, 0, 1], 5, 6, 0);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(flow_hash(&tagged), flow_hash(&plain));
        // Truncated headers are not IP as far as steering goes.
        assert_eq!(flow_hash(&plain[..20]), None);
    }
}
