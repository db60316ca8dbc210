//! The anchor wires (OVS-DPDK, testpmd): the two poll-mode hosts' ports on
//! an anchor switch instead of vnio's, everything else as for the vnio
//! switch, so the same endpoints measure every switch.

use super::{host_mac, BedError, Testbed};
use crate::anchor_switch::{AnchorSpec, AnchorSwitch};
use crate::scenario::{Knobs, WireKind};

impl Testbed {
    pub(super) fn wire_anchor(
        &mut self,
        kind: WireKind,
        octet: u8,
        ctx: &super::BedContext,
        knobs: &Knobs,
    ) -> Result<(), BedError> {
        let dir = self.scratch.path().to_path_buf();
        let sockets: Vec<_> = (0..self.hosts.len())
            .map(|i| dir.join(format!("h{}.sock", i + 1)))
            .collect();
        let [a, b] = &sockets[..] else {
            return Err(super::setup(
                format!("{} wire", kind.as_str()),
                "needs exactly two poll-mode hosts",
            ));
        };
        let switch = AnchorSwitch::start(&AnchorSpec {
            kind,
            dir: &dir,
            sockets: [a, b],
            cpu: knobs.switch_cpus.as_ref().and_then(|c| c.first().copied()),
            journal: &ctx.journal,
        })?;
        for (i, host) in self.hosts.iter_mut().enumerate() {
            host.vhost_user = Some((sockets[i].clone(), host_mac(octet, i)));
        }
        self.description.notes.push(switch.note.clone());
        self.anchor = Some(switch);
        Ok(())
    }
}

/// True when the endpoints of `wire` listen on their sockets and the
/// switch connects (OVS's `dpdkvhostuserclient` ports); otherwise the
/// switch listens and the endpoints connect.
pub fn endpoints_listen(wire: WireKind) -> bool {
    wire == WireKind::OvsDpdk
}
