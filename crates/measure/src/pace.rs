//! Pacing schedules: when the k-th send is due. Computed from the start
//! instant each time (never by adding periods), so rounding never drifts and
//! any rate is honoured exactly over a run, not only multiples of a timer tick.

/// Bursts of `burst` sends, one burst every `burst / rate` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    start_ns: u64,
    rate_per_s: u64,
    burst: u64,
}

impl Schedule {
    /// `rate_per_s` sends per second in bursts of `burst`; both at least 1.
    pub fn new(start_ns: u64, rate_per_s: u64, burst: u64) -> Schedule {
        Schedule {
            start_ns,
            rate_per_s: rate_per_s.max(1),
            burst: burst.max(1),
        }
    }

    /// The instant burst `k` (0-based) is due.
    #[inline]
    pub fn burst_at(&self, k: u64) -> u64 {
        let offset =
            u128::from(k) * u128::from(self.burst) * 1_000_000_000 / u128::from(self.rate_per_s);
        self.start_ns + offset as u64
    }

    /// The instant the n-th individual send (0-based) is due, for open-loop
    /// latency accounting: every send of a burst is due at the burst instant.
    #[inline]
    pub fn send_at(&self, n: u64) -> u64 {
        self.burst_at(n / self.burst)
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// How many sends were due by `now_ns` (inclusive).
    pub fn due_by(&self, now_ns: u64) -> u64 {
        if now_ns < self.start_ns {
            return 0;
        }
        let elapsed = u128::from(now_ns - self.start_ns);
        let bursts =
            elapsed * u128::from(self.rate_per_s) / (u128::from(self.burst) * 1_000_000_000) + 1;
        (bursts * u128::from(self.burst)).min(u128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_drift_over_a_long_run() {
        // 3 per second cannot be expressed in whole nanoseconds per period.
        let s = Schedule::new(1_000, 3, 1);
        assert_eq!(s.burst_at(0), 1_000);
        assert_eq!(s.burst_at(1), 1_000 + 333_333_333);
        assert_eq!(s.burst_at(2), 1_000 + 666_666_666);
        assert_eq!(s.burst_at(3), 1_000 + 1_000_000_000);
        assert_eq!(s.burst_at(3 * 3600), 1_000 + 3600 * 1_000_000_000);
    }

    #[test]
    fn bursts_share_an_instant_and_keep_the_rate() {
        // 1M packets/s in bursts of 32: one burst every 32 us.
        let s = Schedule::new(0, 1_000_000, 32);
        assert_eq!(s.send_at(0), 0);
        assert_eq!(s.send_at(31), 0);
        assert_eq!(s.send_at(32), 32_000);
        assert_eq!(s.burst_at(31_250), 1_000_000_000);
    }

    #[test]
    fn due_counts_sends_whose_instant_has_passed() {
        let s = Schedule::new(100, 1_000, 10); // a burst of 10 every 10 ms
        assert_eq!(s.due_by(99), 0);
        assert_eq!(s.due_by(100), 10);
        assert_eq!(s.due_by(100 + 9_999_999), 10);
        assert_eq!(s.due_by(100 + 10_000_000), 20);
        // Consistency with burst_at over many instants.
        for k in 0..1000u64 {
            assert_eq!(s.due_by(s.burst_at(k)), (k + 1) * 10);
            assert_eq!(s.due_by(s.burst_at(k + 1) - 1), (k + 1) * 10);
        }
    }

    #[test]
    fn zero_rate_and_burst_are_clamped_not_divided_by() {
        let s = Schedule::new(0, 0, 0);
        assert_eq!(s.burst_at(1), 1_000_000_000);
    }
}
