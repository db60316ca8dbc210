//! `vnio tune measure`: probes that turn a profile's effect into numbers.
//! - the cost of reading `CLOCK_MONOTONIC` (median of batches);
//! - the wake-up lateness of a thread sleeping to absolute deadlines
//!   (`clock_nanosleep(TIMER_ABSTIME)`, as cyclictest does, with timer
//!   slack set to 1 ns but without real-time priority);
//! - a UDP request-response round trip on 127.0.0.1 between two threads.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Result, TuneError};
use crate::stats::Distribution;
use crate::sys::{monotonic_ns, sleep_until_ns};

/// Schema id of measure documents.
pub const MEASURE_SCHEMA: &str = "vnio.tune.measure/1";

/// Cost of one clock read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClockCost {
    /// Batches timed.
    pub batches: usize,
    /// Reads per batch.
    pub reads_per_batch: usize,
    /// Median over batches of the mean cost of one read.
    pub median_ns: f64,
    /// Cheapest batch.
    pub min_ns: f64,
}

/// Times `batches` batches of `per_batch` `clock_gettime(CLOCK_MONOTONIC)`.
pub fn clock_cost(batches: usize, per_batch: usize) -> ClockCost {
    let (batches, per_batch) = (batches.max(1), per_batch.max(1));
    let mut costs: Vec<f64> = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = monotonic_ns();
        let mut last = start;
        for _ in 0..per_batch {
            last = std::hint::black_box(monotonic_ns());
        }
        costs.push(last.saturating_sub(start) as f64 / per_batch as f64);
    }
    costs.sort_by(f64::total_cmp);
    ClockCost {
        batches,
        reads_per_batch: per_batch,
        median_ns: costs[costs.len() / 2],
        min_ns: costs[0],
    }
}

/// Wake-up lateness of a sleeping thread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Wakeup {
    /// Period between deadlines, µs.
    pub interval_us: u64,
    /// `SCHED_FIFO` priority of the sleeping thread, `None` for the normal
    /// policy.
    pub fifo_priority: Option<i32>,
    /// Lateness after each deadline.
    pub lateness: Distribution,
}

/// Sleeps to absolute deadlines `interval` apart for `duration`, and
/// measures how late each wake-up is; with `fifo`, as a `SCHED_FIFO`
/// thread of that priority (as `cyclictest -p`), restored afterwards.
pub fn wakeup(duration: Duration, interval: Duration, fifo: Option<i32>) -> Result<Wakeup> {
    let interval_ns = (interval.as_nanos() as u64).max(10_000);
    // Timer slack (50 us by default) would be measured as lateness: take it
    // away for the probe, as a real-time thread has none.
    let err = |source| TuneError::Probe {
        probe: "wakeup",
        source,
    };
    let old_slack = crate::sys::set_timer_slack_ns(1).map_err(err)?;
    let old_policy = match fifo {
        Some(prio) => {
            let old = crate::sys::sched_policy().map_err(err)?;
            let fifo = crate::sys::SchedPolicy {
                policy: libc::SCHED_FIFO,
                priority: prio.clamp(1, 99),
            };
            if let Err(e) = crate::sys::set_sched_policy(fifo) {
                let _ = crate::sys::set_timer_slack_ns(old_slack);
                return Err(err(e));
            }
            Some(old)
        }
        None => None,
    };
    let run = || -> Result<Vec<u64>> {
        let end = monotonic_ns().saturating_add(duration.as_nanos() as u64);
        let mut samples = Vec::new();
        let mut deadline = monotonic_ns() + interval_ns;
        while deadline < end {
            sleep_until_ns(deadline).map_err(err)?;
            let now = monotonic_ns();
            samples.push(now.saturating_sub(deadline));
            deadline += interval_ns;
            // After a long stall, skip missed periods rather than wake at once.
            while deadline <= now {
                deadline += interval_ns;
            }
        }
        Ok(samples)
    };
    let samples = run();
    // Best effort: the measurement does not depend on restoring them.
    let _ = crate::sys::set_timer_slack_ns(old_slack);
    if let Some(old) = old_policy {
        let _ = crate::sys::set_sched_policy(old);
    }
    let samples = samples?;
    let lateness = Distribution::from_samples(samples).ok_or_else(|| TuneError::Probe {
        probe: "wakeup",
        source: std::io::Error::other("duration shorter than one interval"),
    })?;
    Ok(Wakeup {
        interval_us: interval_ns / 1000,
        fifo_priority: fifo.map(|p| p.clamp(1, 99)),
        lateness,
    })
}

/// UDP round trips on loopback.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RoundTrip {
    /// Payload bytes.
    pub size: usize,
    /// Requests that got no answer within 100 ms.
    pub lost: u64,
    /// Round-trip times.
    pub rtt: Distribution,
}

/// One client thread (this one) and one echo thread exchange `size`-byte
/// UDP datagrams on 127.0.0.1 for `duration`, one in flight at a time.
pub fn udp_rr(duration: Duration, size: usize) -> Result<RoundTrip> {
    let err = |source| TuneError::Probe {
        probe: "udp rr",
        source,
    };
    let size = size.clamp(1, 65_000);
    let server = UdpSocket::bind("127.0.0.1:0").map_err(err)?;
    server
        .set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(err)?;
    let addr = server.local_addr().map_err(err)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(&buf[..n], from);
            }
        }
    });
    let result = (|| {
        let client = UdpSocket::bind("127.0.0.1:0").map_err(err)?;
        client.connect(addr).map_err(err)?;
        client
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(err)?;
        let msg = vec![0x5au8; size];
        let mut buf = vec![0u8; 65_536];
        let mut samples = Vec::new();
        let mut lost = 0u64;
        let end = monotonic_ns().saturating_add(duration.as_nanos() as u64);
        while monotonic_ns() < end {
            let t0 = monotonic_ns();
            client.send(&msg).map_err(err)?;
            match client.recv(&mut buf) {
                Ok(_) => samples.push(monotonic_ns().saturating_sub(t0)),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    lost += 1
                }
                Err(e) => return Err(err(e)),
            }
        }
        let rtt = Distribution::from_samples(samples)
            .ok_or_else(|| err(std::io::Error::other("no answer at all")))?;
        Ok(RoundTrip { size, lost, rtt })
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    result
}

/// Options of a measurement.
#[derive(Debug, Clone, Copy)]
pub struct MeasureOptions {
    /// Duration of the wake-up probe and of the round-trip probe, each.
    pub duration: Duration,
    /// Wake-up period.
    pub interval: Duration,
    /// Round-trip payload.
    pub size: usize,
    /// Run the wake-up probe as `SCHED_FIFO` with this priority.
    pub fifo: Option<i32>,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            duration: Duration::from_secs(2),
            interval: Duration::from_micros(1000),
            size: 64,
            fifo: None,
        }
    }
}

/// All probes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurement {
    /// [`MEASURE_SCHEMA`].
    pub schema: String,
    /// Seconds each timed probe ran.
    pub duration_s: f64,
    /// Clock read cost.
    pub clock: ClockCost,
    /// Wake-up lateness.
    pub wakeup: Wakeup,
    /// Loopback UDP round trip.
    pub udp_rr: RoundTrip,
}

/// Runs every probe, one after the other.
pub fn measure(opts: MeasureOptions) -> Result<Measurement> {
    Ok(Measurement {
        schema: MEASURE_SCHEMA.to_string(),
        duration_s: opts.duration.as_secs_f64(),
        clock: clock_cost(200, 1_000),
        wakeup: wakeup(opts.duration, opts.interval, opts.fifo)?,
        udp_rr: udp_rr(opts.duration, opts.size)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_cost_is_positive_and_small() {
        let c = clock_cost(20, 500);
        assert_eq!((c.batches, c.reads_per_batch), (20, 500));
        assert!(c.min_ns > 0.0 && c.min_ns <= c.median_ns, "{c:?}");
        assert!(
            c.median_ns < 100_000.0,
            "a clock read under 100 us even on a loaded VM: {c:?}"
        );
    }

    #[test]
    fn wakeup_samples_every_interval_and_restores_slack() {
        let before = crate::sys::set_timer_slack_ns(50_000).expect("prctl");
        let w = wakeup(Duration::from_millis(100), Duration::from_millis(5), None)
            .expect("wakeup probe");
        assert_eq!((w.interval_us, w.fifo_priority), (5_000, None));
        let d = w.lateness;
        assert!(
            (5..=20).contains(&d.samples),
            "about 100 ms / 5 ms wake-ups: {d:?}"
        );
        assert!(
            d.min_ns <= d.p50_ns && d.p50_ns <= d.p99_ns && d.p99_ns <= d.max_ns,
            "{d:?}"
        );
        assert_eq!(
            crate::sys::set_timer_slack_ns(before).expect("prctl"),
            50_000,
            "slack restored"
        );
    }

    #[test]
    fn wakeup_shorter_than_one_interval_is_an_error() {
        let e = wakeup(Duration::from_millis(1), Duration::from_millis(50), None)
            .expect_err("no sample");
        assert!(
            crate::apply::error_chain(&e).contains("shorter than one interval"),
            "{e}"
        );
    }

    #[test]
    fn udp_round_trips_on_loopback() {
        let r = udp_rr(Duration::from_millis(200), 100).expect("udp rr");
        assert_eq!(r.size, 100);
        assert!(r.rtt.samples > 10, "{r:?}");
        assert!(
            r.rtt.min_ns > 0 && r.rtt.min_ns <= r.rtt.p50_ns && r.rtt.p99_ns <= r.rtt.max_ns,
            "{r:?}"
        );
    }

    #[test]
    fn wakeup_as_fifo_restores_the_policy() {
        let before = crate::sys::sched_policy().expect("policy");
        match wakeup(
            Duration::from_millis(50),
            Duration::from_millis(5),
            Some(10),
        ) {
            Ok(w) => assert_eq!(w.fifo_priority, Some(10)),
            // Without CAP_SYS_NICE the probe says why.
            Err(e) => assert!(
                crate::apply::error_chain(&e).starts_with("probe wakeup failed: "),
                "{e}"
            ),
        }
        assert_eq!(crate::sys::sched_policy().expect("policy"), before);
    }
}
