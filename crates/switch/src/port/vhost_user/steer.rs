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
//!
//! The hash is the crate's one flow hash (`port/flow_hash.rs`), keyed
//! per port ([`SteerKey`], drawn from the operating system's randomness
//! when the port is created, kept across reconnects and given to the
//! workers serving its lent pairs): with an unkeyed hash anyone who can
//! send to the guest could compute which flows share a victim flow's queue
//! and crowd it (its ring overflows, its vCPU's interrupts go to the
//! sender's frames). Keyed, the same crafted flows land on unrelated
//! queues of another port, and which flows share a queue on this one
//! cannot be computed without the key. Foldhash is not a cryptographic
//! MAC: a sender who could watch which queue each of many probe flows
//! reached might learn enough to aim again; the receive queue a frame took
//! is visible only inside the guest, and a port's key lives as long as the
//! port.

use crate::datapath::Frame;
pub use crate::port::flow_hash::{flow_hash, SteerKey};

/// Bytes of a frame the hash may look at: a tagged Ethernet header, an
/// IPv4 header with its longest options, and the ports.
const HASH_PEEK: usize = 18 + 60 + 4;

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

/// The pair frame `f` goes to among `ready`, under `key`: its headers are
/// read once (from what forwarding already read when that is enough).
pub(super) fn pair_for(key: &SteerKey, f: &Frame<'_>, ready: u32) -> usize {
    if ready.count_ones() <= 1 {
        return pick_pair(None, ready);
    }
    let want = (f.frame_len as usize).min(HASH_PEEK);
    let hash = if f.head.len() >= want {
        flow_hash(key, f.head)
    } else {
        let mut b = [0u8; HASH_PEEK];
        let n = f.src.read(f.hdr_len as u64, &mut b[..want]);
        flow_hash(key, &b[..n])
    };
    pick_pair(hash, ready)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SteerKey {
        SteerKey::from_seeds(1, 2)
    }

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
        // A fixed key and random ones: every key spreads flows evenly.
        for k in std::iter::once(key()).chain((0..20).map(|_| SteerKey::random())) {
            let mut per_pair = [0u32; 4];
            for sport in 0..4000u16 {
                let f = udp4([10, 0, 0, 1], 1024 + sport, 7, 0);
                let h = flow_hash(&k, &f);
                assert!(h.is_some());
                let p = pick_pair(h, ready);
                // The same flow again (and again): the same pair.
                assert_eq!(pick_pair(flow_hash(&k, &f), ready), p);
                per_pair[p] += 1;
            }
            // 4000 flows over 4 pairs: each gets its share, roughly.
            for n in per_pair {
                assert!((700..1300).contains(&n), "{per_pair:?}");
            }
        }
    }

    #[test]
    fn only_ready_pairs_are_picked() {
        for sport in 0..500u16 {
            let h = flow_hash(&key(), &udp4([10, 0, 0, 1], sport, 7, 0));
            assert!(matches!(pick_pair(h, 0b1010), 1 | 3));
            assert_eq!(pick_pair(h, 0b0100), 2);
        }
        assert_eq!(pick_pair(Some(7), 0), 0);
    }

    #[test]
    fn non_ip_goes_to_the_first_pair_and_fragments_ignore_ports() {
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(flow_hash(&key(), &arp), None);
        assert_eq!(pick_pair(None, 0b1111), 0);
        assert_eq!(pick_pair(None, 0b1100), 2);
        // A datagram's fragments: the same hash whatever the ports say.
        let first = flow_hash(&key(), &udp4([10, 0, 0, 1], 5, 6, 0x2000));
        let later = flow_hash(&key(), &udp4([10, 0, 0, 1], 0, 0, 0x00b9));
        assert_eq!(first, later);
        assert_ne!(first, flow_hash(&key(), &udp4([10, 0, 0, 1], 5, 6, 0)));
        // A VLAN tag in front changes nothing of the flow.
        let plain = udp4([10, 0, 0, 1], 5, 6, 0);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(flow_hash(&key(), &tagged), flow_hash(&key(), &plain));
        // Truncated headers are not IP as far as steering goes.
        assert_eq!(flow_hash(&key(), &plain[..20]), None);
    }

    /// Flows a sender crafts to share a victim flow's queue on one port
    /// (key A) spread over every queue of a port with another key, as
    /// unrelated flows do; on one port, a flow's queue never changes, and
    /// a copy of the key (a lent pair's) steers alike.
    #[test]
    fn crafted_flows_collide_under_one_key_only() {
        let ready = 0b1111;
        let (a, b) = (SteerKey::random(), SteerKey::random());
        let victim = udp4([10, 0, 0, 9], 443, 5000, 0);
        let target = pick_pair(flow_hash(&a, &victim), ready);
        let crafted: Vec<Vec<u8>> = (0..8000u16)
            .map(|sport| udp4([10, 0, 0, 1], 1024 + sport, 5000, 0))
            .filter(|f| pick_pair(flow_hash(&a, f), ready) == target)
            .collect();
        // About a quarter of the flows collide under A.
        assert!((1500..2500).contains(&crafted.len()), "{}", crafted.len());
        let mut per_pair = [0u32; 4];
        for f in &crafted {
            per_pair[pick_pair(flow_hash(&b, f), ready)] += 1;
        }
        let n = crafted.len() as u32;
        for c in per_pair {
            assert!(c > n / 8 && c < n * 3 / 8, "under key B: {per_pair:?}");
        }
        // Stable per port, and for a copy of its key.
        let lent = a.clone();
        for f in crafted.iter().take(500) {
            assert_eq!(pick_pair(flow_hash(&a, f), ready), target);
            assert_eq!(pick_pair(flow_hash(&lent, f), ready), target);
        }
        assert_eq!(format!("{a:?}"), "SteerKey(..)");
    }
}
