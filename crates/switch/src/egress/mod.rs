//! Shares, limits and reservations per port on an uplink's egress (the
//! studies' Network I/O Control). Pure logic, time as an input.
//!
//! - A limit caps a port's rate toward the uplink whether or not the link
//!   is busy (a token bucket at the limit).
//! - Shares split the uplink's capacity between ports only while it is
//!   contended, that is while some port's frame had to wait for the link:
//!   each polling round the capacity that arrived is handed to the ports
//!   that waited, as deficits in proportion to their shares (deficit round
//!   robin over the rounds). Uncontended, a frame leaves as soon as the
//!   link bucket has tokens (work-conserving: a port alone gets the link).
//! - A reservation is a floor: a port below its reserved rate sends ahead
//!   of the shares (its own token bucket), still counted against the link.
//!
//! A frame that may not leave is not dropped: the data path leaves it in
//! the guest's transmit ring and stops reading that port for the round, so
//! the guest sees backpressure, as from a busy NIC.
//!
//! Buckets may go negative by one frame: a frame is admitted while tokens
//! remain and then charged in full, so frames larger than a bucket (64 KiB
//! GSO frames) pass, and the average rate still holds.

use crate::PortId;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

mod bucket;
use bucket::Bucket;

/// A port's egress policy on the uplinks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EgressPolicy {
    /// Relative weight while the uplink is contended (1 to 10000; default 100).
    pub share: u32,
    /// Hard cap in bits per second.
    pub limit_bps: Option<u64>,
    /// Guaranteed floor in bits per second.
    pub reserve_bps: Option<u64>,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        Self {
            share: DEFAULT_SHARE,
            limit_bps: None,
            reserve_bps: None,
        }
    }
}

/// The share a port has unless configured.
pub const DEFAULT_SHARE: u32 = 100;
/// The largest share.
pub const MAX_SHARE: u32 = 10_000;

/// The link's bucket saves up longer: a NIC goes on draining its queue
/// while the host deschedules the worker, so a stall of up to this long
/// costs the link no capacity.
const LINK_BURST_TIME: Duration = Duration::from_millis(100);
/// Contention ends after this long without a port waiting for the link.
const QUIET: Duration = Duration::from_millis(5);
/// How soon a held frame is tried again: a fraction of a bucket's time.
const RETRY: Duration = Duration::from_micros(50);
/// The longest pause between rounds a backlogged port is credited for in
/// full. A worker the host deschedules while a port's frames wait does not
/// cost the port its rate: what the bucket could not save up during the
/// pause is added beyond its depth, and leaves as soon as the worker runs.
/// An idle port is not credited (its bucket only fills to its depth): a
/// limit still caps bursts after idle time.
const MAX_CATCH_UP: Duration = Duration::from_secs(1);

/// Why a frame waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The port is at its limit.
    Limit,
    /// The uplink is at its capacity and the port used its share.
    Link,
}

#[derive(Debug, Clone)]
struct Flow {
    port: PortId,
    policy: EgressPolicy,
    limit: Option<Bucket>,
    reserve: Option<Bucket>,
    /// Bytes the port may still send this contended stretch.
    deficit: f64,
    /// A frame of the port waited for the link this round.
    waiting: bool,
    /// The port had frames left this round (held, or its round budget ran
    /// out): a pause before the next round is the worker's, not the port's.
    backlogged: bool,
    /// Bytes admitted (for tests and counters).
    sent: u64,
}

impl Flow {
    fn new(port: PortId, policy: EgressPolicy) -> Self {
        Self {
            port,
            policy,
            limit: policy.limit_bps.map(Bucket::new),
            reserve: policy.reserve_bps.map(Bucket::new),
            deficit: 0.0,
            waiting: false,
            backlogged: false,
            sent: 0,
        }
    }
}

/// The egress scheduler of one uplink.
#[derive(Debug, Clone)]
pub struct Scheduler {
    link: Option<Bucket>,
    flows: Vec<Flow>,
    contended: bool,
    last: Option<Instant>,
    /// Frames that waited for the link, in all (a contention counter).
    pub link_waits: u64,
    /// A frame waited this round (for the limit or the link).
    held: bool,
    /// Since when no port has waited for the link.
    quiet_since: Option<Instant>,
    /// Link capacity taken by reservations, not yet taken out of what the
    /// shares divide.
    reserved_debt: f64,
}

impl Scheduler {
    /// A scheduler for an uplink of `capacity_bps` (None: no known
    /// capacity, so only limits and reservations apply).
    pub fn new(capacity_bps: Option<u64>) -> Self {
        Self {
            link: capacity_bps.map(|c| Bucket::with_burst(c, LINK_BURST_TIME)),
            // Ports come and go rarely; room for many without reallocating.
            flows: Vec::with_capacity(64),
            contended: false,
            last: None,
            link_waits: 0,
            held: false,
            quiet_since: None,
            reserved_debt: 0.0,
        }
    }

    /// The capacity in bits per second.
    pub fn capacity_bps(&self) -> Option<u64> {
        self.link.map(|b| (b.rate * 8.0) as u64)
    }

    /// Whether the link is contended (shares in force).
    pub fn contended(&self) -> bool {
        self.contended
    }

    /// Sets a port's policy (new or changed); its buckets start nearly empty.
    pub fn set_policy(&mut self, port: PortId, policy: EgressPolicy) {
        match self.flows.iter_mut().find(|f| f.port == port) {
            Some(f) if f.policy == policy => {}
            Some(f) => *f = Flow::new(port, policy),
            None => self.flows.push(Flow::new(port, policy)),
        }
    }

    /// Forgets a port.
    pub fn remove(&mut self, port: PortId) {
        self.flows.retain(|f| f.port != port);
    }

    /// Bytes admitted for `port` so far.
    pub fn sent(&self, port: PortId) -> u64 {
        self.flows
            .iter()
            .find(|f| f.port == port)
            .map_or(0, |f| f.sent)
    }

    /// Starts a polling round at `now`: refills the buckets and, while
    /// contended, hands the capacity that arrived to the ports that waited,
    /// by share.
    pub fn begin_round(&mut self, now: Instant) {
        let dt = match self.last {
            Some(l) => now
                .saturating_duration_since(l)
                .min(MAX_CATCH_UP)
                .as_secs_f64(),
            None => 0.0,
        };
        self.last = Some(now);
        self.held = false;
        // A pause longer than the link's bucket saves up, with ports
        // holding frames: the worker was not running. What the link could
        // have carried meanwhile is handed to those ports by share (not left
        // in the link's bucket, where the first ports polled would take it).
        let stalled = self.link.is_some_and(|l| dt * l.rate > l.burst);
        for f in &mut self.flows {
            let backlogged = std::mem::take(&mut f.backlogged);
            f.waiting |= backlogged && stalled;
            if let Some(b) = &mut f.limit {
                b.refill(dt, backlogged);
            }
            if let Some(b) = &mut f.reserve {
                b.refill(dt, backlogged);
            }
        }
        let Some(link) = &mut self.link else {
            return;
        };
        // What reservations took comes off what the shares divide.
        let mut arrived = link.refill(dt, false) - self.reserved_debt;
        self.reserved_debt = (-arrived).max(0.0);
        arrived = arrived.max(0.0);
        // A port may save up its part of a bucket, or of what a pause
        // longer than the bucket's time brought while it waited.
        let burst = link.burst.max(arrived);
        let total: u64 = self
            .flows
            .iter()
            .filter(|f| f.waiting)
            .map(|f| u64::from(f.policy.share))
            .sum();
        if total > 0 {
            self.quiet_since = None;
            self.contended = true;
            // Each port may save up only its part of that: a common cap
            // would favour small shares.
            for f in &mut self.flows {
                if f.waiting {
                    let frac = f64::from(f.policy.share) / total as f64;
                    let cap = (burst * frac).max(f.deficit);
                    f.deficit = (f.deficit + arrived * frac).min(cap);
                    f.waiting = false;
                }
            }
            return;
        }
        // Nobody waited for the link: contention is over once that lasts
        // (a round without waiting is common inside a contended stretch).
        // Unspent deficits go; debts stay, so a port that overdrew pays.
        let quiet = *self.quiet_since.get_or_insert(now);
        if self.contended && now.saturating_duration_since(quiet) >= QUIET {
            self.contended = false;
            for f in &mut self.flows {
                f.deficit = f.deficit.min(0.0);
            }
        }
    }

    /// May a frame of `bytes` from `port` leave now? Admitted frames are
    /// charged; a port without a policy has the default one.
    pub fn admit(&mut self, port: PortId, bytes: usize) -> Result<(), Wait> {
        let i = match self.flows.iter().position(|f| f.port == port) {
            Some(i) => i,
            None => {
                self.flows.push(Flow::new(port, EgressPolicy::default()));
                self.flows.len() - 1
            }
        };
        let bytes_f = bytes as f64;
        let f = &mut self.flows[i];
        if f.limit.is_some_and(|b| !b.has()) {
            self.held = true;
            f.backlogged = true;
            return Err(Wait::Limit);
        }
        let reserved = f.reserve.is_some_and(|b| b.has());
        if !reserved {
            if let Some(link) = &self.link {
                // Contended, the deficits (handed out from the link's
                // refills) decide; otherwise the link's own tokens.
                let fits = if self.contended {
                    f.deficit > 0.0
                } else {
                    link.has()
                };
                if !fits {
                    f.waiting = true;
                    f.backlogged = true;
                    self.held = true;
                    self.contended = true;
                    self.link_waits += 1;
                    return Err(Wait::Link);
                }
            }
        }
        if let Some(b) = &mut f.limit {
            b.tokens -= bytes_f;
        }
        if reserved {
            if let Some(b) = &mut f.reserve {
                b.tokens -= bytes_f;
            }
            if self.contended {
                self.reserved_debt += bytes_f;
            }
        } else if self.contended {
            f.deficit -= bytes_f;
        }
        if let Some(link) = &mut self.link {
            link.tokens -= bytes_f;
        }
        f.sent += bytes as u64;
        Ok(())
    }

    /// `port` had frames left when its round's budget ran out: it counts
    /// as waiting for the link (else a port that sends many frames a round
    /// would miss its share of the next refill to one that sends few).
    pub fn backlogged(&mut self, port: PortId) {
        let contended = self.contended;
        if let Some(f) = self.flows.iter_mut().find(|f| f.port == port) {
            f.backlogged = true;
            f.waiting |= contended;
        }
    }

    /// `port`'s frame waits for room in the uplink's transmit ring: it is
    /// backlogged, and held (the worker polls again on its timer).
    pub fn ring_full(&mut self, port: PortId) {
        self.held = true;
        self.backlogged(port);
    }

    /// When the data path must poll again though nothing else happens: a
    /// frame waits in a guest's ring (the guest will not kick). When every
    /// port held back waits for its limit, that is when the first limit's
    /// bucket has tokens again; otherwise soon (the link's capacity is
    /// handed out round by round).
    pub fn wake_at(&self, now: Instant) -> Option<Instant> {
        if !self.held {
            return None;
        }
        let wait = self
            .flows
            .iter()
            .filter(|f| f.backlogged)
            .map(|f| match f.limit {
                Some(b) if !b.has() => {
                    Duration::from_secs_f64((1.0 - b.tokens) / b.rate).max(RETRY)
                }
                _ => RETRY,
            })
            .min()
            .unwrap_or(RETRY);
        Some(now + wait)
    }

    /// Charges a flood of `bytes` (all its copies: a VXLAN port's head-end
    /// replication sends one per VTEP) from `port`. A flood cannot wait for
    /// one destination, so only the port's limit refuses it (`false`: it
    /// does not go to this port); the link is charged as by
    /// [`Scheduler::charge`].
    pub fn charge_flood(&mut self, port: PortId, bytes: usize) -> bool {
        if let Some(f) = self.flows.iter_mut().find(|f| f.port == port) {
            if let Some(b) = &mut f.limit {
                if !b.has() {
                    return false;
                }
                b.tokens -= bytes as f64;
            }
            f.sent += bytes as u64;
        }
        self.charge(bytes);
        true
    }

    /// Charges a frame that leaves whatever the verdict (from a port that
    /// cannot wait: tap, another uplink, a flood).
    pub fn charge(&mut self, bytes: usize) {
        if let Some(link) = &mut self.link {
            link.tokens -= bytes as f64;
        }
    }
}

#[cfg(test)]
mod tests;
