//! What every measuring session shares: the time window of the run, the stop
//! flag, and a recorder that times transactions into histograms and a
//! per-second series without locking or allocating per transaction.

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock;
use crate::env::Placement;
use crate::stats::Latency;

/// The run's time window on CLOCK_MONOTONIC.
#[derive(Clone)]
pub struct Window {
    /// When sessions begin (warm-up starts).
    pub start_ns: u64,
    /// When recording starts (warm-up ends).
    pub measure_ns: u64,
    /// When sessions stop.
    pub end_ns: u64,
    pub stop: Arc<AtomicBool>,
}

impl Window {
    pub fn new(start_ns: u64, warmup_ns: u64, duration_ns: u64, stop: Arc<AtomicBool>) -> Window {
        Window {
            start_ns,
            measure_ns: start_ns + warmup_ns,
            end_ns: start_ns + warmup_ns + duration_ns,
            stop,
        }
    }

    /// True once the run is over: time is up or the user interrupted.
    #[inline]
    pub fn over(&self, now_ns: u64) -> bool {
        now_ns >= self.end_ns || self.stop.load(Ordering::Relaxed)
    }

    pub fn interrupted(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Per-second histograms merged across sessions (coarse, 2 digits, so a long
/// run keeps its series in little memory).
#[derive(Default)]
pub struct Intervals {
    seconds: Mutex<Vec<Latency>>,
}

impl Intervals {
    fn add(&self, second: usize, h: &Latency) {
        if let Ok(mut v) = self.seconds.lock() {
            while v.len() <= second {
                v.push(Latency::coarse());
            }
            v[second].merge(h);
        }
    }

    /// The series: one point per second of the measured window.
    pub fn points(&self) -> Vec<crate::result::IntervalPoint> {
        let v = self.seconds.lock().map(|v| v.clone()).unwrap_or_default();
        v.iter()
            .enumerate()
            .map(|(i, h)| {
                // The few figures of a point, without the summary's
                // confidence intervals (a second's are not reported).
                let hist = h.histogram();
                let empty = hist.is_empty();
                crate::result::IntervalPoint {
                    t_s: i as u64,
                    ops: h.count(),
                    mean_ns: if empty { 0.0 } else { hist.mean() },
                    p50_ns: if empty { 0 } else { h.quantile(0.5) },
                    p99_ns: if empty { 0 } else { h.quantile(0.99) },
                    max_ns: if empty { 0 } else { hist.max() },
                }
            })
            .collect()
    }
}

/// One session's recorder.
pub struct Recorder {
    window_measure_ns: u64,
    pub latency: Latency,
    second: usize,
    current: Latency,
    intervals: Arc<Intervals>,
    /// Transactions completed in the measured window.
    pub ops: u64,
    /// Transactions completed including warm-up (for CPU per transaction).
    pub ops_total: u64,
}

impl Recorder {
    pub fn new(window: &Window, intervals: Arc<Intervals>) -> Recorder {
        Recorder {
            window_measure_ns: window.measure_ns,
            latency: Latency::new(),
            second: 0,
            current: Latency::coarse(),
            intervals,
            ops: 0,
            ops_total: 0,
        }
    }

    /// Records a transaction that completed at `done_ns` after `rtt_ns`.
    #[inline]
    pub fn record(&mut self, done_ns: u64, rtt_ns: u64) {
        self.ops_total += 1;
        if done_ns < self.window_measure_ns {
            return;
        }
        self.ops += 1;
        self.latency.record(rtt_ns);
        let second = ((done_ns - self.window_measure_ns) / 1_000_000_000) as usize;
        if second != self.second {
            self.flush();
            self.second = second;
        }
        self.current.record(rtt_ns);
    }

    /// Hands the current second to the shared series (once a second at most).
    pub fn flush(&mut self) {
        if self.current.count() > 0 {
            self.intervals.add(self.second, &self.current);
            self.current.reset();
        }
    }
}

/// What one session measured.
#[derive(Default)]
pub struct Outcome {
    pub target: usize,
    pub latency: Latency,
    pub ops: u64,
    pub ops_total: u64,
    pub sent: u64,
    pub lost: u64,
    pub bytes: u64,
    /// Sends that left later than their scheduled instant (open loop, pacing).
    pub late: u64,
    /// Open loop: the gaps the sends really had.
    pub gaps: Option<crate::arrivals::GapSample>,
    pub placement: Placement,
    pub error: Option<String>,
}

impl Outcome {
    pub fn from_recorder(mut rec: Recorder, target: usize, placement: Placement) -> Outcome {
        rec.flush();
        Outcome {
            target,
            latency: rec.latency,
            ops: rec.ops,
            ops_total: rec.ops_total,
            placement,
            ..Default::default()
        }
    }
}

/// Sums the outcomes of one target's sessions into its figures, its
/// histogram and its transaction count including warm-up; notes their errors
/// and placement in the iteration.
pub fn sum_target(
    mine: &[&Outcome],
    target: String,
    it: &mut crate::result::Iteration,
) -> (crate::result::Measured, Latency, u64) {
    let mut m = crate::result::Measured {
        target,
        ..Default::default()
    };
    let mut lat = Latency::new();
    let mut ops_total = 0;
    for o in mine {
        lat.merge(&o.latency);
        m.ops += o.ops;
        m.sent += o.sent;
        m.lost += o.lost;
        m.late += o.late;
        m.bytes += o.bytes;
        ops_total += o.ops_total;
        if let Some(e) = &o.error {
            if !it.errors.contains(e) {
                it.errors.push(e.clone());
            }
        }
        it.placement.push(o.placement.clone());
    }
    (m, lat, ops_total)
}

/// A timeout or interruption: look at the clock and stop flag, then retry.
pub(crate) fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Why a blocking transfer ended early.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The run is over (time or stop flag).
    Stopped,
    /// The peer closed the connection.
    Closed,
    /// A socket error.
    Failed(String),
}

/// Fills `buf` from a stream with a read timeout, looking at `over` on each
/// timeout so a stalled peer never holds the session past the run.
pub fn read_full<R: Read>(r: &mut R, buf: &mut [u8], over: impl Fn() -> bool) -> Result<(), Ended> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Err(Ended::Closed),
            Ok(n) => got += n,
            Err(e) if would_block(&e) => {
                if over() {
                    return Err(Ended::Stopped);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Err(Ended::Closed)
            }
            Err(e) => return Err(Ended::Failed(e.to_string())),
        }
    }
    Ok(())
}

/// Writes all of `buf`, with the same rules as [`read_full`].
pub fn write_full<W: Write>(w: &mut W, buf: &[u8], over: impl Fn() -> bool) -> Result<(), Ended> {
    let mut off = 0;
    while off < buf.len() {
        match w.write(&buf[off..]) {
            Ok(0) => return Err(Ended::Closed),
            Ok(n) => off += n,
            Err(e) if would_block(&e) => {
                if over() {
                    return Err(Ended::Stopped);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Err(Ended::Closed)
            }
            Err(e) => return Err(Ended::Failed(e.to_string())),
        }
    }
    Ok(())
}

/// Touches every byte, as netperf's dirty buffers do: data that was written
/// by the CPU before sending and read after receiving, not cold in memory.
#[inline]
pub fn dirty_write(buf: &mut [u8], round: u64) {
    let b = round as u8;
    buf.iter_mut().for_each(|x| *x = x.wrapping_add(b));
}

#[inline]
pub fn dirty_read(buf: &[u8]) -> u64 {
    std::hint::black_box(buf.iter().fold(0u64, |a, &x| a.wrapping_add(u64::from(x))))
}

/// Now on the monotonic clock, for session code.
#[inline]
pub fn now() -> u64 {
    clock::now_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_is_not_recorded_and_seconds_split() {
        let w = Window::new(1_000, 500, 3_000_000_000, Arc::new(AtomicBool::new(false)));
        let iv = Arc::new(Intervals::default());
        let mut r = Recorder::new(&w, iv.clone());
        r.record(1_200, 100); // warm-up
        r.record(1_500, 200); // second 0
        r.record(1_500 + 999_999_999, 300); // second 0
        r.record(1_500 + 1_000_000_000, 400); // second 1
        r.record(1_500 + 2_500_000_000, 500); // second 2
        r.flush();
        assert_eq!((r.ops, r.ops_total), (4, 5));
        assert_eq!(r.latency.count(), 4);
        let p = iv.points();
        assert_eq!(p.iter().map(|x| x.ops).collect::<Vec<_>>(), vec![2, 1, 1]);
        assert!(
            (500..=505).contains(&p[2].max_ns),
            "coarse series keep 1%: {}",
            p[2].max_ns
        );
    }

    #[test]
    fn read_full_reassembles_and_reports_close() {
        let data = [1u8, 2, 3, 4, 5];
        let mut r: &[u8] = &data;
        let mut buf = [0u8; 3];
        read_full(&mut r, &mut buf, || false).unwrap();
        assert_eq!(buf, [1, 2, 3]);
        assert_eq!(read_full(&mut r, &mut buf, || false), Err(Ended::Closed));
    }
}
