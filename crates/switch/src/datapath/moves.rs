//! What the FDB's rule for moves (`crate::fdb::moves`) did with a
//! frame's source: a refusal counted on the sending port, a flap counted
//! on the port that had taken the address and said in one line naming
//! both ports (at most one line a second per worker: an attacker who
//! keeps flapping addresses shows in the counters, not in a flooded log).

use super::{Datapath, FrameCtx};
use crate::events::{Kind, Name};
use crate::fdb::Learned;
use crate::forward::L2Header;
use crate::stats::{bump, DropReason};
use std::time::Duration;

/// Least time between two lines about flaps.
const SAY_EVERY: Duration = Duration::from_secs(1);

impl Datapath {
    /// Counts what learning the source of a frame from slot `i` (header
    /// `l2`) did, when it was not a plain refresh or addition.
    pub(super) fn count_learned(&mut self, cx: FrameCtx, l2: &L2Header, learned: Learned) {
        let (i, now) = (cx.from, cx.now);
        let Some(me) = self.slots[i].as_ref() else {
            return;
        };
        match learned {
            Learned::PortLimit => me.stats.tx.drop(DropReason::FdbLimit),
            Learned::Kept => bump(&me.stats.tx.mac_kept, 1),
            Learned::Flapped { from } => {
                let taker = self.slots.iter().flatten().find(|s| s.id == from);
                if let Some(t) = taker {
                    bump(&t.stats.tx.mac_flaps, 1);
                }
                // Every flap is an event (the queue bounds a storm of them).
                if let Some(q) = &self.events {
                    q.push(me.id, &me.name, || Kind::MacFlap {
                        mac: l2.src.0,
                        from: taker.map_or_else(
                            || Name::display(&format_args!("port {}", from.0)),
                            |t| Name::new(&t.name),
                        ),
                    });
                }
                if self.flap_said.is_some_and(|t| now < t + SAY_EVERY) {
                    return;
                }
                self.flap_said = Some(now);
                let taker = taker.map_or_else(|| format!("port {}", from.0), |t| t.name.clone());
                let vtep = cx
                    .from_vtep
                    .map(|v| format!(" behind VTEP {v}"))
                    .unwrap_or_default();
                log::warn!(
                    "switch: address {} flapped: {taker} took it while {}{vtep} was sending from it; \
                     it stays with {} for the hold time (counter mac_flaps on {taker})",
                    l2.src,
                    me.name,
                    me.name,
                );
            }
            _ => {}
        }
    }
}
