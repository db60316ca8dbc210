//! Drops and waits where they happen, as counts and rates over a span:
//! each vhost-user receive queue's drops for want of buffers (a guest not
//! keeping up), and each source's frames held in its transmit ring because
//! a destination could not take them (back-pressure). Computed from two
//! readings of the ports' counters ([`PortStatsSnapshot`]), as
//! `vnio switch perf` computes the workers' rates from two readings.

use super::PortStatsSnapshot;
use serde::{Deserialize, Serialize};

/// A count over a span and its rate.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Rate {
    /// Events over the span.
    pub count: u64,
    /// Per second over the span.
    pub per_sec: f64,
}

impl Rate {
    fn over(count: u64, span_ns: u64) -> Self {
        Rate {
            count,
            per_sec: count as f64 * 1e9 / span_ns.max(1) as f64,
        }
    }
}

/// One receive queue's drops for want of buffers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueRate {
    /// The queue pair whose receive queue it is.
    pub queue: usize,
    /// Frames dropped.
    pub ring_full: Rate,
}

/// One port's drops and waits over a span.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortPressure {
    /// The port.
    pub port: String,
    /// Nanoseconds the counts cover.
    pub span_ns: u64,
    /// Its receive queues (a vhost-user port's; empty for others).
    pub rx_ring_full: Vec<QueueRate>,
    /// Frames left in its transmit ring because a destination could not
    /// take them (once per round they wait).
    pub held_frames: Rate,
    /// Rounds it was held back (by an uplink's egress).
    pub egress_waits: Rate,
    /// Of those, rounds whose destination's ring was full.
    pub held_dest_full: Rate,
}

impl PortPressure {
    /// Whether anything was dropped or held over the span.
    pub fn any(&self) -> bool {
        self.held_frames.count > 0
            || self.egress_waits.count > 0
            || self.rx_ring_full.iter().any(|q| q.ring_full.count > 0)
    }
}

/// Each port of `now` over the span since `before` (the same port in an
/// earlier reading), or since it was added when `before` does not have it
/// (or has an older port of that name).
pub fn pressure(
    now: &[(String, PortStatsSnapshot)],
    before: &[(String, PortStatsSnapshot)],
) -> Vec<PortPressure> {
    now.iter()
        .map(|(name, s)| {
            let earlier = before
                .iter()
                .find(|(n, b)| n == name && b.age_ns <= s.age_ns)
                .map(|(_, b)| b);
            between(name, s, earlier)
        })
        .collect()
}

fn between(name: &str, s: &PortStatsSnapshot, earlier: Option<&PortStatsSnapshot>) -> PortPressure {
    let span_ns = s.age_ns - earlier.map_or(0, |b| b.age_ns);
    let delta = |f: fn(&PortStatsSnapshot) -> u64| {
        Rate::over(f(s).saturating_sub(earlier.map_or(0, f)), span_ns)
    };
    PortPressure {
        port: name.to_string(),
        span_ns,
        rx_ring_full: s
            .rx_queues
            .iter()
            .map(|q| {
                let was = earlier
                    .and_then(|b| b.rx_queues.iter().find(|e| e.queue == q.queue))
                    .map_or(0, |e| e.ring_full);
                QueueRate {
                    queue: q.queue,
                    ring_full: Rate::over(q.ring_full.saturating_sub(was), span_ns),
                }
            })
            .collect(),
        held_frames: delta(|s| s.tx.held_frames),
        egress_waits: delta(|s| s.tx.egress_waits),
        held_dest_full: delta(|s| s.tx.held_dest_full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{DropReason, PortStats};
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn counts_and_rates_over_the_span_between_two_readings() {
        let s = PortStats::default();
        s.queue_pairs.store(2, Relaxed);
        crate::stats::bump(&s.pair(1).rx_ring_full, 5);
        let mut a = s.snapshot();
        a.age_ns = 1_000_000_000;
        crate::stats::bump(&s.pair(1).rx_ring_full, 30);
        crate::stats::bump(&s.tx.held_frames, 64);
        crate::stats::bump(&s.tx.egress_waits, 2);
        let mut b = s.snapshot();
        b.age_ns = 3_000_000_000;
        let p = pressure(&[("vm".into(), b.clone())], &[("vm".into(), a)]);
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(p.span_ns, 2_000_000_000);
        assert_eq!(p.rx_ring_full.len(), 2);
        assert_eq!(p.rx_ring_full[0].ring_full.count, 0);
        assert_eq!(p.rx_ring_full[1].ring_full.count, 30);
        assert_eq!(p.rx_ring_full[1].ring_full.per_sec, 15.0);
        assert_eq!((p.held_frames.count, p.held_frames.per_sec), (64, 32.0));
        assert_eq!(p.egress_waits.count, 2);
        assert!(p.any());
        // Without an earlier reading: since the port was added.
        let whole = pressure(&[("vm".into(), b)], &[]);
        assert_eq!(whole[0].rx_ring_full[1].ring_full.count, 35);
        assert_eq!(whole[0].span_ns, 3_000_000_000);
    }

    #[test]
    fn a_single_queue_port_counts_its_ring_full_drops_on_queue_0() {
        let s = PortStats::default();
        s.queue_pairs.store(1, Relaxed);
        s.rx.drops_n(DropReason::RingFull, 7);
        let snap = s.snapshot();
        assert_eq!(snap.rx_queues.len(), 1);
        assert_eq!(snap.rx_queues[0].ring_full, 7);
        // Not a vhost-user port: no receive queues.
        assert!(PortStats::default().snapshot().rx_queues.is_empty());
        let p = pressure(&[("one".into(), snap)], &[]);
        assert_eq!(p[0].rx_ring_full[0].ring_full.count, 7);
    }
}
