//! Which placement the host gave two (virtual) CPUs while a benchmark ran
//! on them, told by how long a cache line takes to go from one to the other
//! and back.
//!
//! On a virtual machine the host may move two vCPUs between physical cores
//! that share a cache and cores that do not, and back, in stretches of
//! seconds to minutes. A switch and its endpoints on those two CPUs pass
//! every frame's lines between them, so their rate follows the placement.
//! [`LineProbe`] runs beside a benchmark (it costs about a quarter of a
//! millisecond per 100 ms on each CPU) and its samples are matched to the
//! benchmark's seconds ([`per_second_medians`]).
//!
//! Every [`PERIOD`] both threads wake at the same instant and pass one line
//! back and forth [`EXCHANGES`] times; a sample is the mean round trip, or
//! none when the exchange did not finish within [`GIVE_UP`] (one thread was
//! not running: its CPU was busy), so the probe never spins longer than
//! that. A sample well above the others still means one thread ran late:
//! the median of a second's samples is the figure to use.
//!
//! Not to be confused with [`crate::env::Placement`], where one thread was
//! asked to run and did: this module's [`Placement`] is where the host put
//! the two CPUs relative to each other.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::stats::median;

/// Round trips per sample: enough to average out one slow exchange, few
/// enough (about 50-250 µs) not to disturb the benchmark.
pub const EXCHANGES: u64 = 500;
/// Time between two samples: ten per second of the benchmark.
pub const PERIOD: Duration = Duration::from_millis(100);
/// How long after its instant a sample may take: a CPU busy with a
/// benchmark may not run the probe's thread for a while, and the other
/// thread would spin all that time.
pub const GIVE_UP: Duration = Duration::from_millis(2);
/// Round trips below this are [`Placement::Near`], at or above it
/// [`Placement::Far`]. On the hosts measured (docs/results.md,
/// "Environments") the round trip sits in one of two modes, up to about a
/// hundred ns (cores sharing a cache) or several hundred (cores that do
/// not), with almost nothing between; 250 ns lies between the modes, far
/// from both, so a second's median is classified the same whichever side
/// of the mode its jitter falls.
pub const NEAR_FAR_NS: f64 = 250.0;
/// Completed samples a second needs for a median: with one or two, a
/// thread that ran late could be the whole figure.
pub const MIN_PER_SECOND: usize = 3;

/// One sample of the probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineSample {
    /// When its exchanges started, from the probe's start.
    pub at: Duration,
    /// Mean round trip, ns; none when the exchange did not finish within
    /// [`GIVE_UP`].
    pub round_trip_ns: Option<f64>,
}

/// Where the host put the two CPUs, as the round trip tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Cores that share a cache (about 100 ns on the host measured).
    Near,
    /// Cores that do not (about 450 ns).
    Far,
}

impl Placement {
    /// Both, in the order shown.
    pub const ALL: [Placement; 2] = [Placement::Near, Placement::Far];

    /// The placement a round trip of `ns` says ([`NEAR_FAR_NS`]).
    pub fn of(ns: f64) -> Placement {
        if ns < NEAR_FAR_NS {
            Placement::Near
        } else {
            Placement::Far
        }
    }

    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Near => "near",
            Placement::Far => "far",
        }
    }
}

/// The line passed between the CPUs, alone in its cache line.
#[repr(align(64))]
struct Line(AtomicU64);

/// What both threads share.
struct Shared {
    line: Line,
    stop: AtomicBool,
}

/// The probe's two threads, running until [`LineProbe::stop`].
pub struct LineProbe {
    shared: Arc<Shared>,
    started: Instant,
    near: JoinHandle<Vec<LineSample>>,
    far: JoinHandle<()>,
}

impl LineProbe {
    /// Starts the probe between `cpu_a` and `cpu_b` (a thread pinned on
    /// each); fails when a thread cannot be made or pinned.
    pub fn start(cpu_a: usize, cpu_b: usize) -> io::Result<LineProbe> {
        LineProbe::start_with(cpu_a, cpu_b, |_| {})
    }

    /// As [`LineProbe::start`], calling `each` with every sample as it is
    /// taken (on the probe's thread on `cpu_a`, after the timed part).
    pub fn start_with(
        cpu_a: usize,
        cpu_b: usize,
        each: impl FnMut(&LineSample) + Send + 'static,
    ) -> io::Result<LineProbe> {
        let shared = Arc::new(Shared {
            line: Line(AtomicU64::new(0)),
            stop: AtomicBool::new(false),
        });
        let (ready_tx, ready) = mpsc::channel::<Result<(), usize>>();
        let (go_near, near_go) = mpsc::channel::<Option<Instant>>();
        let (go_far, far_go) = mpsc::channel::<Option<Instant>>();
        let (sh, tx) = (shared.clone(), ready_tx.clone());
        let far = std::thread::Builder::new()
            .name(format!("line-probe-{cpu_b}"))
            .spawn(move || {
                if let Some(start) = ready_up(cpu_b, tx, &far_go) {
                    serve(&sh, start);
                }
            })?;
        let sh = shared.clone();
        let near = std::thread::Builder::new()
            .name(format!("line-probe-{cpu_a}"))
            .spawn(move || match ready_up(cpu_a, ready_tx, &near_go) {
                Some(start) => time(&sh, start, each),
                None => Vec::new(),
            });
        let near = match near {
            Ok(n) => n,
            Err(e) => {
                let _ = go_far.send(None);
                let _ = far.join();
                return Err(e);
            }
        };
        // Both pinned (or not): a thread that died before saying so drops
        // its sender, which ends the wait too.
        let mut refused = None;
        for _ in 0..2 {
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(cpu)) => refused = Some(format!("cannot run the line probe on CPU {cpu}")),
                Err(_) => refused = Some("a line probe thread ended before it was pinned".into()),
            }
        }
        let started = Instant::now();
        let go = refused.is_none().then_some(started);
        let _ = go_near.send(go);
        let _ = go_far.send(go);
        if let Some(why) = refused {
            let _ = near.join();
            let _ = far.join();
            return Err(io::Error::other(why));
        }
        Ok(LineProbe {
            shared,
            started,
            near,
            far,
        })
    }

    /// The instant sample offsets count from.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Stops both threads (at most one sample later) and returns every
    /// sample taken, in order.
    pub fn stop(self) -> Vec<LineSample> {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.near.thread().unpark();
        self.far.thread().unpark();
        let samples = self.near.join().unwrap_or_default();
        let _ = self.far.join();
        samples
    }
}

/// Pins the calling thread to `cpu`, says whether it could, and waits for
/// the common start (None: give up, the other thread could not pin).
fn ready_up(
    cpu: usize,
    ready: mpsc::Sender<Result<(), usize>>,
    go: &mpsc::Receiver<Option<Instant>>,
) -> Option<Instant> {
    let pinned = crate::pin::enter(format!("line probe on CPU {cpu}"), Some(cpu)).pinned;
    let _ = ready.send(if pinned { Ok(()) } else { Err(cpu) });
    // Dropped before the wait: a sibling that dies unpinned must not leave
    // the starter waiting on this sender.
    drop(ready);
    go.recv().ok().flatten()
}

/// The value sent out and the one expected back for exchange `i` of
/// sample `k`.
fn ball(k: u32, i: u64) -> (u64, u64) {
    let base = u64::from(k) << 32;
    (base | i, base | (i + 1))
}

/// Spins until `line` holds `v`; false once `give_up` has passed.
fn wait_for(line: &Line, v: u64, give_up: Instant) -> bool {
    let mut n = 0u32;
    while line.0.load(Ordering::Acquire) != v {
        std::hint::spin_loop();
        n = n.wrapping_add(1);
        // The clock only now and then: reading it costs more than a miss.
        if n.is_multiple_of(1024) && Instant::now() > give_up {
            return false;
        }
    }
    true
}

/// Sleeps until `at`; false when the probe was stopped first. Parked, so
/// [`LineProbe::stop`] need not wait out a period.
fn until(shared: &Shared, at: Instant) -> bool {
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        match at.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => std::thread::park_timeout(d),
            _ => return true,
        }
    }
}

/// The far side: returns each odd value as the next even one. Values
/// carry the sample's number in their high half, so a side that gave up on
/// one sample (its partner was not running) starts the next one clean.
fn serve(shared: &Shared, start: Instant) {
    for k in 1u32.. {
        let at = start + PERIOD * k;
        if !until(shared, at) {
            return;
        }
        let give_up = at + GIVE_UP;
        for i in 0..EXCHANGES {
            let (serve, back) = ball(k, 2 * i + 1);
            if !wait_for(&shared.line, serve, give_up) {
                break;
            }
            shared.line.0.store(back, Ordering::Release);
        }
    }
}

/// The timing side: sends each odd value and waits for the even one back.
fn time(shared: &Shared, start: Instant, mut each: impl FnMut(&LineSample)) -> Vec<LineSample> {
    let mut out = Vec::new();
    for k in 1u32.. {
        let at = start + PERIOD * k;
        if !until(shared, at) {
            break;
        }
        let give_up = at + GIVE_UP;
        let t = Instant::now();
        let mut done = true;
        for i in 0..EXCHANGES {
            let (serve, back) = ball(k, 2 * i + 1);
            shared.line.0.store(serve, Ordering::Release);
            if !wait_for(&shared.line, back, give_up) {
                done = false;
                break;
            }
        }
        // The other CPU was busy: no figure, rather than a wrong one.
        let round_trip_ns = done.then(|| t.elapsed().as_nanos() as f64 / EXCHANGES as f64);
        let sample = LineSample {
            at: t - start,
            round_trip_ns,
        };
        each(&sample);
        out.push(sample);
    }
    out
}

/// The round trips of the samples that completed in `[from, to)`.
fn completed_in(samples: &[LineSample], from: Duration, to: Duration) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.at >= from && s.at < to)
        .filter_map(|s| s.round_trip_ns)
        .collect()
}

/// The median round trip of each of `seconds` whole seconds from `from`
/// (offsets from the probe's start): second `s` holds the samples taken in
/// `[from + s, from + s + 1)`. None for a second with fewer than
/// [`MIN_PER_SECOND`] completed samples.
pub fn per_second_medians(
    samples: &[LineSample],
    from: Duration,
    seconds: usize,
) -> Vec<Option<f64>> {
    (0..seconds)
        .map(|s| {
            let lo = from + Duration::from_secs(s as u64);
            let mut v = completed_in(samples, lo, lo + Duration::from_secs(1));
            if v.len() < MIN_PER_SECOND {
                return None;
            }
            median(&mut v)
        })
        .collect()
}

/// The probe's record of one measured window, as stored with it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LineRoundTrips {
    /// The two CPUs the line went between.
    pub cpus: [usize; 2],
    /// Median round trip of each whole second of the window, ns, in order
    /// (second `s` of the window at index `s`, as the window's per-second
    /// series); null for a second with too few completed samples.
    pub per_second_ns: Vec<Option<f64>>,
    /// Median over every sample completed in the window, ns.
    pub median_ns: Option<f64>,
    /// Samples taken in the window.
    pub samples: usize,
    /// Of those, the ones that completed.
    pub completed: usize,
}

impl LineRoundTrips {
    /// The record of the window `[from, from + length)` (offsets from the
    /// probe's start) of `samples` taken between `cpus`.
    pub fn over(
        cpus: [usize; 2],
        samples: &[LineSample],
        from: Duration,
        length: Duration,
    ) -> LineRoundTrips {
        let to = from + length;
        let mut all = completed_in(samples, from, to);
        LineRoundTrips {
            cpus,
            per_second_ns: per_second_medians(samples, from, length.as_secs() as usize),
            completed: all.len(),
            samples: samples.iter().filter(|s| s.at >= from && s.at < to).count(),
            median_ns: median(&mut all),
        }
    }

    /// The placement of second `s` of the window, when it has a median.
    pub fn placement_at(&self, s: usize) -> Option<Placement> {
        self.per_second_ns
            .get(s)
            .copied()
            .flatten()
            .map(Placement::of)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, ns: Option<f64>) -> LineSample {
        LineSample {
            at: Duration::from_millis(ms),
            round_trip_ns: ns,
        }
    }

    #[test]
    fn the_threshold_splits_the_two_modes() {
        assert_eq!(Placement::of(100.0), Placement::Near);
        assert_eq!(Placement::of(249.9), Placement::Near);
        assert_eq!(Placement::of(250.0), Placement::Far);
        assert_eq!(Placement::of(450.0), Placement::Far);
        assert_eq!(serde_json::to_string(&Placement::Far).unwrap(), "\"far\"");
    }

    #[test]
    fn medians_per_second_of_a_window() {
        // Window from 0.25 s, two seconds: [0.25, 1.25) near with one
        // late sample, [1.25, 2.25) with two completed samples only.
        let mut s: Vec<LineSample> = (1..=12).map(|k| at(k * 100, Some(100.0))).collect();
        s[4].round_trip_ns = Some(900.0);
        s.extend([at(1300, Some(450.0)), at(1400, None), at(1500, Some(460.0))]);
        s.extend((16..=22).map(|k| at(k * 100, None)));
        let m = per_second_medians(&s, Duration::from_millis(250), 2);
        assert_eq!(m, vec![Some(100.0), None]);
        let r = LineRoundTrips::over(
            [0, 1],
            &s,
            Duration::from_millis(250),
            Duration::from_millis(2000),
        );
        assert_eq!(r.per_second_ns, m);
        assert_eq!(r.samples, 20);
        assert_eq!(r.completed, 12);
        assert_eq!(r.median_ns, Some(100.0));
        assert_eq!(r.placement_at(0), Some(Placement::Near));
        assert_eq!(r.placement_at(1), None);
        assert_eq!(r.placement_at(7), None);
    }
}
