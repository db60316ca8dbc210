//! Open-loop arrival processes, and a sample of the gaps the sends really
//! had, so the result can say whether the load was the one asked for.
//!
//! - `fixed` (the default): one send every 1/rate seconds, on the absolute
//!   schedule of [`crate::pace::Schedule`] (sessions spread over a period).
//! - `poisson`: exponential gaps of mean 1/rate, drawn from a generator
//!   seeded per session (reproducible), as independent clients arrive; the
//!   arrival process open-loop latency studies assume (Lancet, mutilate).
//!
//! A sender that falls behind (a loaded host, a slow wake-up) sends its due
//! requests back to back: the latency is still counted from each intended
//! instant, but the load the system saw was not the intended one. The
//! [`GapSample`] keeps every k-th actual gap of the measured window, and
//! how late that send left (a few thousand, allocated before the run,
//! thinned so consecutive samples do not share a wake-up), for
//! [`crate::checks::arrivals`].

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use crate::pace::Schedule;

/// How open-loop sends are spaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Evenly, 1/rate apart.
    #[default]
    Fixed,
    /// Exponential gaps of mean 1/rate.
    Poisson,
}

impl std::str::FromStr for Arrival {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(Arrival::Fixed),
            "poisson" => Ok(Arrival::Poisson),
            _ => Err(format!(
                "arrivals: {s:?} is neither \"fixed\" nor \"poisson\""
            )),
        }
    }
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arrival::Fixed => "fixed",
            Arrival::Poisson => "poisson",
        })
    }
}

/// The intended instants of one session's sends, in order.
pub struct Arrivals {
    process: Process,
    /// The instant of the next send.
    next_ns: u64,
}

enum Process {
    Fixed { schedule: Schedule, n: u64 },
    // Boxed: the generator's state is ten times the schedule's; made once
    // per session, before the run.
    Poisson { rng: Box<StdRng>, gap: Exp<f64> },
}

impl Arrivals {
    /// Fixed arrivals: `schedule`'s instants.
    pub fn fixed(schedule: Schedule) -> Arrivals {
        Arrivals {
            next_ns: schedule.send_at(0),
            process: Process::Fixed { schedule, n: 0 },
        }
    }

    /// Poisson arrivals at `rate_per_s` from `start_ns` (the first send one
    /// gap after it), from a generator seeded with `seed`.
    pub fn poisson(start_ns: u64, rate_per_s: u64, seed: u64) -> Arrivals {
        let gap = Exp::new(rate_per_s.max(1) as f64 / 1e9).expect("a positive rate");
        let mut rng = StdRng::seed_from_u64(seed);
        let first = gap.sample(&mut rng) as u64;
        Arrivals {
            next_ns: start_ns + first,
            process: Process::Poisson {
                rng: Box::new(rng),
                gap,
            },
        }
    }

    /// When the next send is due.
    #[inline]
    pub fn next_at(&self) -> u64 {
        self.next_ns
    }

    /// Takes the next send: returns its instant and moves to the one after.
    #[inline]
    pub fn take(&mut self) -> u64 {
        let at = self.next_ns;
        self.next_ns = match &mut self.process {
            Process::Fixed { schedule, n } => {
                *n += 1;
                schedule.send_at(*n)
            }
            Process::Poisson { rng, gap } => at + gap.sample(rng.as_mut()) as u64,
        };
        at
    }
}

/// Gaps kept per session: enough for the test's power, few enough to keep
/// in the result's memory and to sort.
pub const GAPS_PER_SESSION: usize = 2_000;

/// A thinned sample of the gaps between a session's actual sends.
#[derive(Clone, Debug, Default)]
pub struct GapSample {
    /// The process asked for and its rate per session.
    pub arrival: Arrival,
    pub rate_per_s: u64,
    /// Keep every `stride`-th gap.
    stride: u64,
    since_kept: u64,
    last_ns: u64,
    measure_ns: u64,
    pub gaps_ns: Vec<u64>,
    /// How late each kept send left (its instant to the sender's clock).
    pub lags_ns: Vec<u64>,
}

impl GapSample {
    /// For a session sending `rate_per_s` from `measure_ns` for `measure_s`
    /// seconds.
    pub fn new(arrival: Arrival, rate_per_s: u64, measure_ns: u64, measure_s: f64) -> GapSample {
        let expected = (rate_per_s as f64 * measure_s).max(1.0) as u64;
        GapSample {
            arrival,
            rate_per_s,
            // At least 2: a kept gap never follows another kept one, whose
            // end it shares.
            stride: (expected / GAPS_PER_SESSION as u64).max(2),
            since_kept: 0,
            last_ns: 0,
            measure_ns,
            gaps_ns: Vec::with_capacity(GAPS_PER_SESSION),
            lags_ns: Vec::with_capacity(GAPS_PER_SESSION),
        }
    }

    /// The send due at `at_ns` left at `t_ns`.
    #[inline]
    pub fn sent(&mut self, t_ns: u64, at_ns: u64) {
        if t_ns >= self.measure_ns && self.last_ns >= self.measure_ns {
            self.since_kept += 1;
            if self.since_kept >= self.stride && self.gaps_ns.len() < GAPS_PER_SESSION {
                self.since_kept = 0;
                self.gaps_ns.push(t_ns - self.last_ns);
                self.lags_ns.push(t_ns.saturating_sub(at_ns));
            }
        }
        self.last_ns = t_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_arrivals_follow_the_schedule() {
        let s = Schedule::new(1_000, 1_000, 1);
        let mut a = Arrivals::fixed(s);
        for n in 0..10 {
            assert_eq!(a.next_at(), s.send_at(n));
            assert_eq!(a.take(), s.send_at(n));
        }
    }

    #[test]
    fn poisson_arrivals_keep_the_mean_rate_and_are_reproducible() {
        let mut a = Arrivals::poisson(0, 10_000, 7);
        let mut b = Arrivals::poisson(0, 10_000, 7);
        let mut last = 0;
        for _ in 0..100_000 {
            let t = a.take();
            assert!(t >= last);
            assert_eq!(t, b.take());
            last = t;
        }
        // 100 000 sends at 10 000/s take 10 s, within a few standard
        // deviations (sqrt(n)/rate = 32 ms).
        assert!((last as f64 / 1e9 - 10.0).abs() < 0.15, "{last}");
        assert_ne!(
            Arrivals::poisson(0, 10_000, 8).take(),
            Arrivals::poisson(0, 10_000, 7).take()
        );
    }

    #[test]
    fn the_sample_is_thinned_bounded_and_skips_the_warm_up() {
        let mut g = GapSample::new(Arrival::Fixed, 1_000, 1_000_000_000, 100.0);
        // Warm-up sends are not gaps of the measured window.
        for k in 0..1_000u64 {
            g.sent(k * 1_000_000, k * 1_000_000);
        }
        assert!(g.gaps_ns.is_empty());
        for k in 1_000..200_000u64 {
            g.sent(k * 1_000_000 + 5, k * 1_000_000);
        }
        assert!(g.lags_ns.iter().all(|&d| d == 5));
        assert_eq!(g.gaps_ns.len(), GAPS_PER_SESSION);
        assert!(g.gaps_ns.iter().all(|&d| d == 1_000_000));
        assert_eq!(g.gaps_ns.capacity(), GAPS_PER_SESSION);
    }
}
