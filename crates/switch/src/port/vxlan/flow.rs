//! The outer UDP source port a VXLAN port gives each inner flow (RFC 7348
//! §5): a hash over the inner frame's headers. Separate from the port:
//! pure over bytes, tested on its own.

/// The outer UDP source port for an inner frame: a hash of its addresses
/// and, for TCP and UDP over IPv4 or IPv6, its ports, folded into the
/// dynamic range 49152-65535 (§5). Frames of one flow always get the same
/// port (no reordering across underlay paths); different flows spread.
pub fn flow_port(inner: &[u8]) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: &[u8]| {
        for &x in b {
            h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    };
    let at = |a: usize, b: usize| inner.get(a..b).unwrap_or(&[]);
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([
        inner.get(12).copied().unwrap_or(0),
        inner.get(13).copied().unwrap_or(0),
    ]);
    if et == 0x8100 {
        l3 = 18;
        et = u16::from_be_bytes([
            inner.get(16).copied().unwrap_or(0),
            inner.get(17).copied().unwrap_or(0),
        ]);
    }
    let l4 = match et {
        0x0800 => {
            mix(at(l3 + 12, l3 + 20));
            let proto = inner.get(l3 + 9).copied().unwrap_or(0);
            mix(&[proto]);
            let ihl = usize::from(inner.get(l3).copied().unwrap_or(0) & 0x0f) * 4;
            // Fragments after the first have no ports.
            let frag = u16::from_be_bytes([
                inner.get(l3 + 6).copied().unwrap_or(0),
                inner.get(l3 + 7).copied().unwrap_or(0),
            ]) & 0x1fff;
            (matches!(proto, 6 | 17) && frag == 0).then_some(l3 + ihl)
        }
        0x86dd => {
            mix(at(l3 + 8, l3 + 40));
            let next = inner.get(l3 + 6).copied().unwrap_or(0);
            mix(&[next]);
            matches!(next, 6 | 17).then_some(l3 + 40)
        }
        _ => {
            mix(at(0, 12));
            None
        }
    };
    if let Some(p) = l4 {
        mix(at(p, p + 4));
    }
    let h = (h ^ (h >> 32)) as u32;
    49152 + (h % 16384) as u16
}

#[cfg(test)]
mod tests {
    use super::flow_port;
    use crate::wire::testing::TcpFrame as Tcp;

    #[test]
    fn flows_keep_their_port_and_spread() {
        let mut seen = std::collections::HashSet::new();
        for sport in 0..64u16 {
            let t = Tcp {
                ports: (1000 + sport, 5001),
                ..Tcp::default()
            };
            let f = t.build(false);
            let p = flow_port(&f);
            assert!(p >= 49152);
            assert_eq!(p, flow_port(&f), "the same flow, the same port");
            seen.insert(p);
        }
        assert!(seen.len() > 48, "64 flows over {} ports", seen.len());
        // Anything at all: no panic, always in range.
        for n in 0..80 {
            assert!(flow_port(&vec![0x45; n]) >= 49152);
        }
    }
}
