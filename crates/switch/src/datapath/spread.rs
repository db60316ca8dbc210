//! A multiqueue port's pairs lent to other workers and taken back (the
//! owner's and the holder's sides; see `port/vhost_user/spread.rs`).

use super::{Datapath, Port, PortRuntime, Slot};
use crate::port::vhost_user::{LentPair, Returned};
use std::sync::mpsc::Receiver;
use std::time::Instant;

/// The holder's side: pairs other workers' ports lend this worker.
#[derive(Default)]
pub(super) struct HeldPairs {
    /// Where they arrive.
    inbox: Option<Receiver<LentPair>>,
    /// Slots of held pairs whose rings failed here, to give back.
    pub(super) broken: Vec<usize>,
}

impl Datapath {
    /// Where other workers' ports send the pairs they lend this one.
    pub fn set_pair_inbox(&mut self, inbox: Receiver<LentPair>) {
        self.held.inbox = Some(inbox);
    }

    /// Serves the pairs lent to this worker that wait in its inbox (at
    /// each look at the events, and at once when a frame for the port
    /// comes through the mesh first). True when one came.
    pub(super) fn take_held_pairs(&mut self) -> bool {
        let mut came = false;
        while let Some(lp) = self.held.inbox.as_ref().and_then(|r| r.try_recv().ok()) {
            log::debug!("{}: served by this worker", lp.name);
            let slot = self.hold_pair(lp);
            self.table.mark_dirty(slot);
            came = true;
        }
        came
    }

    /// Serves a pair another worker's port lent; returns its slot.
    fn hold_pair(&mut self, lp: LentPair) -> usize {
        let LentPair {
            id,
            name,
            policy,
            policies,
            stats,
            port,
        } = lp;
        let slot = Slot {
            id,
            name,
            mac: policy.mac,
            policy,
            port: Port::VhostUser(port),
            stats,
            rt: PortRuntime::new(&policies),
            policies,
            needs_mac: false,
            direct_to: None,
            routed: true,
        };
        self.attach(slot)
    }

    /// Lent pairs here that failed (their ring errors reset them): to give
    /// back to their owners, who reset their ports.
    pub fn take_broken_pairs(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.held.broken)
    }

    /// The owners' side, when the worker looks at its events: takes back
    /// the pairs holders returned and lends the pairs due. Pushes the
    /// slots whose watched descriptors changed.
    pub fn spread_tick(&mut self, now: Instant, changed: &mut Vec<usize>) {
        self.take_held_pairs();
        for i in 0..self.table.slots.len() {
            let Some(Slot {
                port,
                name,
                policy,
                policies,
                ..
            }) = self.table.slots[i].as_mut()
            else {
                continue;
            };
            let Some(p) = port.vhost_user_mut() else {
                continue;
            };
            if p.spread_state().is_none() {
                continue;
            }
            let mut broken = None;
            if let Some(back) = p.take_returned(now) {
                changed.push(i);
                for r in back {
                    if let Returned::Broken(k, w) = r {
                        broken = Some((k, w));
                    }
                }
            }
            if let Some((k, w)) = broken {
                self.reset(
                    i,
                    now,
                    &format_args!("queue pair {k} failed on worker {w} (see its log)"),
                );
                continue;
            }
            if p.lend_due(now, name, policy, *policies) {
                changed.push(i);
            }
        }
    }
}
