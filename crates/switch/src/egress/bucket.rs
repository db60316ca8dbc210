//! The token bucket that limits, reservations and the link's capacity are
//! built from: bytes at a rate, saved up to a depth. Separate from the
//! scheduler because it is a mechanism the scheduler uses three ways,
//! with its own rule for pauses (a backlogged port keeps what a stalled
//! worker could not send).

use std::time::Duration;

/// How much time a limit or reservation bucket may save up: a worker the
/// host deschedules for that long still holds the rate afterwards.
const BURST_TIME: Duration = Duration::from_millis(100);
/// A bucket holds at least this many bytes (two full-size GSO frames).
const MIN_BURST: f64 = 131_072.0;

/// A token bucket in bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    /// Bytes per second.
    pub(super) rate: f64,
    /// Depth in bytes.
    pub(super) burst: f64,
    /// Bytes that may leave now (negative by at most one frame).
    pub(super) tokens: f64,
}

impl Bucket {
    pub(super) fn new(bps: u64) -> Self {
        Self::with_burst(bps, BURST_TIME)
    }

    pub(super) fn with_burst(bps: u64, time: Duration) -> Self {
        let rate = bps as f64 / 8.0;
        let burst = (rate * time.as_secs_f64()).max(MIN_BURST);
        // Buckets start nearly empty: the long burst is for a descheduled
        // worker to catch up, not a free-for-all when a policy starts.
        Self {
            rate,
            burst,
            tokens: MIN_BURST,
        }
    }

    /// Adds `dt` seconds of tokens, up to the bucket's depth. A bucket
    /// whose port had frames waiting (`backlogged`) also keeps what arrived
    /// beyond the depth during a pause longer than the depth's time (the
    /// worker did not run; the port did not idle), until the port has
    /// nothing left to send. Returns the bytes that arrived.
    pub(super) fn refill(&mut self, dt: f64, backlogged: bool) -> f64 {
        let add = self.rate * dt;
        let (beyond, cap) = if backlogged {
            let depth_time = self.burst / self.rate;
            (
                self.rate * (dt - depth_time).max(0.0),
                self.burst.max(self.tokens),
            )
        } else {
            (0.0, self.burst)
        };
        self.tokens = (self.tokens + add - beyond).min(cap) + beyond;
        add
    }

    pub(super) fn has(&self) -> bool {
        self.tokens > 0.0
    }
}
