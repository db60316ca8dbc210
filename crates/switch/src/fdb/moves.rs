//! The FDB's rule for moves: who may take an address another port holds.
//!
//! A tenant (or a peer on the underlay) can send with a neighbour's
//! address. On a Linux bridge one such frame moves the address and the
//! neighbour's traffic goes to the sender until the neighbour speaks
//! again. Here an address held by a port that is still sending from it
//! (seen within the rule's `quiet` time, 1 s by default) moves only when:
//!
//! - the claimant is a local port (any kind but VXLAN) and the frame is an
//!   announce (ARP or RARP: what a VM sends when it arrives after a live
//!   migration), or the holder is a remote VTEP (a VM that migrated here);
//! - never to a VTEP: an address held by a local port moves behind a VTEP
//!   only once the local port has been quiet on it for `quiet` (a VM that
//!   migrated away is paused there: its announces and traffic from the new
//!   host take the address at most `quiet` after its last frame here).
//!
//! A refused move forwards the frame but leaves the address where it is
//! ([`super::Learned::Kept`]). A move the old holder contests (it claims the
//! address back while the new holder is sending, within `hold` of the
//! move) is a flap: the address goes back to the old holder and stays
//! there for `hold` (60 s by default) whatever anyone else sends
//! ([`super::Learned::Flapped`]: the caller counts it and names both ports). A
//! quiet holder gives the address up to anyone. `quiet` zero is the
//! plain learning bridge: every frame moves its source.

use super::Entry;
use crate::PortId;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// The rule for moves between ports (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mobility {
    /// A holder that has not sent from an address for this long gives it
    /// up to any claimant; zero: every frame moves its source.
    pub quiet: Duration,
    /// How long a flapping address stays with its holder (and how long
    /// after a move the old holder may contest it).
    pub hold: Duration,
}

impl Default for Mobility {
    fn default() -> Self {
        Self {
            quiet: Duration::from_secs(1),
            hold: Duration::from_secs(60),
        }
    }
}

/// Where an address is: a port, and behind a VXLAN port the VTEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The port.
    pub port: PortId,
    /// The remote VTEP, for a VXLAN port.
    pub remote: Option<Ipv4Addr>,
}

impl Place {
    /// A local port (or a VXLAN port when the VTEP does not matter).
    pub fn port(port: PortId) -> Self {
        Self { port, remote: None }
    }
}

/// What the rule says of a claim on a live address held elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Move,
    Keep,
    Flap,
}

impl Mobility {
    pub(super) fn verdict(&self, e: &Entry, at: Place, announce: bool, now: Instant) -> Verdict {
        let since_move = now.saturating_duration_since(e.moved);
        if e.held && since_move < self.hold {
            return Verdict::Keep;
        }
        let quiet = now.saturating_duration_since(e.seen) >= self.quiet;
        let to_local = at.remote.is_none();
        let from_remote = e.remote.is_some();
        if quiet || (to_local && (announce || from_remote)) {
            Verdict::Move
        } else if e.before == Some(at) && since_move < self.hold {
            Verdict::Flap
        } else {
            Verdict::Keep
        }
    }
}
