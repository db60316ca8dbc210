//! Clock offsets between the controller and a machine, NTP-style: the
//! controller notes its clock (t0), asks the machine for its own (t1),
//! notes its clock again when the answer arrives (t2). If the machine read
//! its clock in the middle of the exchange, its clock is ahead by
//! `t1 - (t0 + t2) / 2`; it read it somewhere in between, so that offset
//! is known to within half the round trip. Of several exchanges the one
//! with the shortest round trip bounds it best (queueing and scheduling
//! only ever lengthen an exchange).
//!
//! A one-way figure (a delay from a timestamp taken on one machine to one
//! taken on another) is only as good as the offset: [`ClockOffset::one_way`]
//! refuses a figure smaller than the offset's uncertainty.

use serde::{Deserialize, Serialize};

/// One exchange, in nanoseconds of each side's real-time clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Controller's clock when the question left.
    pub t0: i128,
    /// The machine's clock when it answered.
    pub t1: i128,
    /// Controller's clock when the answer arrived.
    pub t2: i128,
}

/// The estimate from a set of exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// How far the machine's clock is ahead of the controller's (ns).
    pub offset_ns: i64,
    /// The offset is within +/- this (half the best round trip, ns).
    pub uncertainty_ns: u64,
    /// The best exchange's round trip (ns).
    pub rtt_ns: u64,
    /// Exchanges made.
    pub samples: u32,
}

impl ClockOffset {
    /// The estimate from `samples` (the shortest round trip's); None
    /// without a usable sample (every one ran backwards).
    pub fn estimate(samples: &[ClockSample]) -> Option<ClockOffset> {
        let best = samples
            .iter()
            .filter(|s| s.t2 >= s.t0)
            .min_by_key(|s| s.t2 - s.t0)?;
        let rtt = best.t2 - best.t0;
        Some(ClockOffset {
            offset_ns: (best.t1 - (best.t0 + best.t2) / 2) as i64,
            uncertainty_ns: (rtt / 2 + rtt % 2) as u64,
            rtt_ns: rtt as u64,
            samples: samples.len() as u32,
        })
    }

    /// Accept a one-way figure of `figure_ns` between the two machines, or
    /// say why it cannot be trusted.
    pub fn one_way(&self, machine: &str, figure_ns: u64) -> Result<u64, String> {
        if figure_ns <= self.uncertainty_ns {
            return Err(format!(
                "one-way figure of {:.1} us refused: the clock offset to {machine} is known only to +/-{:.1} us (best round trip {:.1} us of {} exchanges); synchronise the clocks (PTP) or use round trips",
                figure_ns as f64 / 1e3,
                self.uncertainty_ns as f64 / 1e3,
                self.rtt_ns as f64 / 1e3,
                self.samples
            ));
        }
        Ok(figure_ns)
    }
}

/// This machine's real-time clock, ns since the epoch.
pub fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_round_trip_wins() {
        // The machine is 1000 ns ahead; the slow exchange's reply was late.
        let samples = [
            ClockSample {
                t0: 0,
                t1: 1_900,
                t2: 1_000,
            },
            ClockSample {
                t0: 10_000,
                t1: 11_100,
                t2: 10_200,
            },
        ];
        let o = ClockOffset::estimate(&samples).unwrap();
        assert_eq!(o.offset_ns, 1_000);
        assert_eq!(o.uncertainty_ns, 100);
        assert_eq!(o.rtt_ns, 200);
        assert_eq!(o.samples, 2);
    }

    #[test]
    fn backwards_samples_are_ignored() {
        let bad = ClockSample {
            t0: 10,
            t1: 0,
            t2: 5,
        };
        assert_eq!(ClockOffset::estimate(&[bad]), None);
        assert_eq!(ClockOffset::estimate(&[]), None);
    }

    #[test]
    fn one_way_needs_a_figure_above_the_uncertainty() {
        let o = ClockOffset {
            offset_ns: -5_000,
            uncertainty_ns: 40_000,
            rtt_ns: 80_000,
            samples: 16,
        };
        let err = o.one_way("m1", 25_000).unwrap_err();
        assert!(
            err.contains("refused") && err.contains("+/-40.0 us"),
            "{err}"
        );
        assert_eq!(o.one_way("m1", 50_000), Ok(50_000));
    }
}
