//! What the FDB's rule for moves (`crate::fdb::moves`) did with a
//! frame's source: a refusal counted on the sending port, a flap counted
//! on the port that had taken the address and said in one line naming
//! both ports (at most one line a second per worker: an attacker who
//! keeps flapping addresses shows in the counters, not in a flooded log),
//! a move said as an event (at most [`MOVES_SAID`] a second per worker:
//! the rule lets one address move at most once per quiet time, but many
//! addresses may move at once, and the events' one queue is shared).

use super::{Datapath, FrameCtx};
use crate::events::{Kind, Name};
use crate::fdb::Learned;
use crate::forward::L2Header;
use crate::stats::{bump, DropReason};
use std::time::Duration;

/// Least time between two lines about flaps.
const SAY_EVERY: Duration = Duration::from_secs(1);
/// Most move events one worker says in a second.
pub const MOVES_SAID: u32 = 64;

impl Datapath {
    /// Counts what learning the source of a frame from slot `i` (header
    /// `l2`, VLAN `vid`) did, when it was not a plain refresh or addition.
    pub(super) fn count_learned(
        &mut self,
        cx: FrameCtx,
        l2: &L2Header,
        vid: u16,
        learned: Learned,
    ) {
        let (i, now) = (cx.from, cx.now);
        let Some(me) = self.slots[i].as_ref() else {
            return;
        };
        match learned {
            Learned::PortLimit => me.stats.tx.drop(DropReason::FdbLimit),
            Learned::Kept => bump(&me.stats.tx.mac_kept, 1),
            Learned::Moved { from } => {
                let (since, said) = &mut self.moves_said;
                if since.map_or(true, |t| now >= t + SAY_EVERY) {
                    (*since, *said) = (Some(now), 0);
                }
                if *said >= MOVES_SAID {
                    return;
                }
                *said += 1;
                let Some(q) = &self.events else {
                    return;
                };
                let holder = self.slots.iter().flatten().find(|s| s.id == from);
                q.push(me.id, &me.name, || Kind::MacMoved {
                    mac: l2.src.0,
                    vid,
                    from: holder.map_or_else(
                        || Name::display(&format_args!("port {}", from.0)),
                        |t| Name::new(&t.name),
                    ),
                });
            }
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
