//! The outer UDP source port a VXLAN port gives each inner flow (RFC 7348
//! §5): the crate's flow hash (`port/flow_hash.rs`) of the inner frame.
//! Separate from the port: pure over bytes, tested on its own.

use crate::port::flow_hash::{Flow, SteerKey};

/// The flow hash's key for source ports: fixed (a flow keeps its port
/// across restarts; an underlay path is not a guest's queue to crowd).
const KEY: SteerKey = SteerKey::from_seeds(0x7678_6c61_6e5f_7370, 0x6f72_745f_6b65_7921);

/// The outer UDP source port for an inner frame: its flow's hash (see
/// [`Flow`]), or for a frame that is not IP its MACs', folded into the
/// dynamic range 49152-65535 (§5). Frames of one flow always get the same
/// port (no reordering across underlay paths); different flows spread.
pub fn flow_port(inner: &[u8]) -> u16 {
    let flow = Flow::parse(inner).unwrap_or(Flow {
        proto: 0,
        addrs: inner.get(..12).unwrap_or(inner),
        ports: None,
    });
    49152 + (flow.hash(&KEY) % 16384) as u16
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
