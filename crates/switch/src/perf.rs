//! Where a worker's time goes, measured by the worker itself: cycles in
//! polling rounds that moved frames (busy) and in rounds that found
//! nothing (idle polling), the rest (sleeping in epoll, control commands),
//! frames per burst taken from a guest's transmit queue, how many
//! chains were waiting in that queue when it was polled, and how long the
//! worker held off polling to do other work after a wake-up or a look at
//! its descriptors (a *hold*: control commands, front-end messages,
//! timers; the time asleep in epoll is not one). The counterpart
//! of OVS's `dpif-netdev/pmd-perf-show`, cheap enough to stay on: one
//! counter read per round (a round costs the time since the previous
//! one ended) and a few single-writer stores (no atomic read-modify-write),
//! see `examples/perf_cost.rs`.
//!
//! The worker writes, the control plane reads ([`WorkerPerf::snapshot`]);
//! [`PerfSnapshot::since`] turns two snapshots into the figures of the
//! interval between them.

use crate::stats::bump;
use crate::sys::tsc;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

pub use hold::{hold_bucket, hold_bucket_label, hold_bucket_span, HOLD_BUCKETS, HOLD_LIMIT_NS};

mod hold;

/// Burst sizes counted exactly up to this; larger ones in the last bucket.
pub const BURST_BUCKETS: usize = 33;
/// Queue depths in powers of two: 0, 1, 2-3, 4-7, ... , 512 and more.
pub const DEPTH_BUCKETS: usize = 11;

/// One worker's counters (written by the worker only).
#[derive(Debug)]
pub struct WorkerPerf {
    start: (u64, Instant),
    busy_cycles: AtomicU64,
    idle_cycles: AtomicU64,
    busy_rounds: AtomicU64,
    idle_rounds: AtomicU64,
    frames: AtomicU64,
    fast: AtomicU64,
    read_ahead: AtomicU64,
    bursts: [AtomicU64; BURST_BUCKETS],
    depth: [AtomicU64; DEPTH_BUCKETS],
    holds: [AtomicU64; HOLD_BUCKETS],
    hold_nanos: AtomicU64,
    holds_over_1ms: AtomicU64,
    longest_hold: AtomicU64,
    commands: AtomicU64,
    command_holds: AtomicU64,
    command_cpu_nanos: AtomicU64,
    command_holds_over_1ms_cpu: AtomicU64,
}

impl Default for WorkerPerf {
    fn default() -> Self {
        Self {
            start: tsc::pair(),
            busy_cycles: AtomicU64::new(0),
            idle_cycles: AtomicU64::new(0),
            busy_rounds: AtomicU64::new(0),
            idle_rounds: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            fast: AtomicU64::new(0),
            read_ahead: AtomicU64::new(0),
            bursts: std::array::from_fn(|_| AtomicU64::new(0)),
            depth: std::array::from_fn(|_| AtomicU64::new(0)),
            holds: std::array::from_fn(|_| AtomicU64::new(0)),
            hold_nanos: AtomicU64::new(0),
            holds_over_1ms: AtomicU64::new(0),
            longest_hold: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            command_holds: AtomicU64::new(0),
            command_cpu_nanos: AtomicU64::new(0),
            command_holds_over_1ms_cpu: AtomicU64::new(0),
        }
    }
}

/// The counter the accounting reads (cycles on x86-64): public so the
/// accounting's own cost can be measured (`examples/perf_cost.rs`).
#[inline]
pub fn clock() -> u64 {
    tsc::now()
}

/// The bucket of a queue depth.
#[inline]
pub fn depth_bucket(pending: u16) -> usize {
    ((u16::BITS - pending.leading_zeros()) as usize).min(DEPTH_BUCKETS - 1)
}

impl WorkerPerf {
    /// A polling round of `cycles` that forwarded or dropped `frames`,
    /// its transmit bursts read ahead or not (`datapath/read_ahead.rs`).
    #[inline]
    pub fn round(&self, cycles: u64, frames: usize, read_ahead: bool) {
        if frames > 0 {
            bump(&self.busy_cycles, cycles);
            bump(&self.busy_rounds, 1);
            bump(&self.frames, frames as u64);
            if read_ahead {
                bump(&self.read_ahead, 1);
            }
        } else {
            bump(&self.idle_cycles, cycles);
            bump(&self.idle_rounds, 1);
        }
    }

    /// A burst of `n` chains taken from a transmit queue where `pending` were waiting.
    #[inline]
    pub fn burst(&self, n: usize, pending: u16) {
        bump(&self.bursts[n.min(BURST_BUCKETS - 1)], 1);
        bump(&self.depth[depth_bucket(pending)], 1);
    }

    /// Frames forwarded on the fast case (`datapath/fast.rs`).
    #[inline]
    pub fn fast_frames(&self, n: u64) {
        bump(&self.fast, n);
    }

    /// The worker held off polling for `ns` nanoseconds (from its return
    /// from epoll to its next round), handling `commands` control commands
    /// among other work. Once per look at its event sources, never per round.
    pub fn hold(&self, ns: u64, commands: u64) {
        bump(&self.holds[hold_bucket(ns)], 1);
        bump(&self.hold_nanos, ns);
        if ns >= HOLD_LIMIT_NS {
            bump(&self.holds_over_1ms, 1);
        }
        if ns > self.longest_hold.load(Relaxed) {
            self.longest_hold.store(ns, Relaxed);
        }
        if commands > 0 {
            bump(&self.commands, commands);
            bump(&self.command_holds, 1);
        }
    }

    /// A hold that handled control commands spent `ns` nanoseconds on a
    /// CPU (the rest of it the host ran something else).
    pub fn command_cpu(&self, ns: u64) {
        bump(&self.command_cpu_nanos, ns);
        if ns >= HOLD_LIMIT_NS {
            bump(&self.command_holds_over_1ms_cpu, 1);
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> PerfSnapshot {
        let now = tsc::pair();
        PerfSnapshot {
            worker: 0,
            core: None,
            cycles: now.0.wrapping_sub(self.start.0),
            nanos: now.1.duration_since(self.start.1).as_nanos() as u64,
            busy_cycles: self.busy_cycles.load(Relaxed),
            idle_cycles: self.idle_cycles.load(Relaxed),
            busy_rounds: self.busy_rounds.load(Relaxed),
            idle_rounds: self.idle_rounds.load(Relaxed),
            frames: self.frames.load(Relaxed),
            fast_frames: self.fast.load(Relaxed),
            read_ahead_rounds: self.read_ahead.load(Relaxed),
            bursts: self.bursts.iter().map(|c| c.load(Relaxed)).collect(),
            depth: self.depth.iter().map(|c| c.load(Relaxed)).collect(),
            holds: self.holds.iter().map(|c| c.load(Relaxed)).collect(),
            hold_nanos: self.hold_nanos.load(Relaxed),
            holds_over_1ms: self.holds_over_1ms.load(Relaxed),
            longest_hold_ns: self.longest_hold.load(Relaxed),
            commands: self.commands.load(Relaxed),
            command_holds: self.command_holds.load(Relaxed),
            command_cpu_nanos: self.command_cpu_nanos.load(Relaxed),
            command_holds_over_1ms_cpu: self.command_holds_over_1ms_cpu.load(Relaxed),
        }
    }
}

/// A worker's counters at one instant (or over an interval, [`PerfSnapshot::since`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PerfSnapshot {
    /// The worker (0 is the shared one).
    pub worker: u32,
    /// Its dedicated core, if any.
    pub core: Option<usize>,
    /// Counter ticks elapsed (cycles on x86-64).
    pub cycles: u64,
    /// Nanoseconds elapsed.
    pub nanos: u64,
    /// Ticks in rounds that moved frames.
    pub busy_cycles: u64,
    /// Ticks in rounds that found nothing.
    pub idle_cycles: u64,
    /// Rounds that moved frames.
    pub busy_rounds: u64,
    /// Rounds that found nothing.
    pub idle_rounds: u64,
    /// Frames forwarded or dropped.
    pub frames: u64,
    /// Frames that took the fast case: plain frames from a guest to a guest
    /// on the same worker (the rest took the full path).
    #[serde(default)]
    pub fast_frames: u64,
    /// Busy rounds that read their transmit bursts ahead (what the worker's
    /// read-ahead setting chose, `[switch] read_ahead`).
    #[serde(default)]
    pub read_ahead_rounds: u64,
    /// Bursts from guests' transmit queues by size: index n counts bursts
    /// of n chains (the last, n and more).
    pub bursts: Vec<u64>,
    /// Chains waiting in a guest's transmit queue when polled, by power of
    /// two: index 0 counts 0, index k counts 2^(k-1) to 2^k - 1.
    pub depth: Vec<u64>,
    /// Holds (the worker away from polling after a wake-up or a look at
    /// its event sources, until its next round) by length in powers of two
    /// of microseconds ([`hold_bucket_span`]); their sum is the number of holds.
    #[serde(default)]
    pub holds: Vec<u64>,
    /// Nanoseconds in holds.
    #[serde(default)]
    pub hold_nanos: u64,
    /// Holds of 1 ms or longer.
    #[serde(default)]
    pub holds_over_1ms: u64,
    /// The longest hold since the worker started, in nanoseconds: a
    /// maximum, which [`PerfSnapshot::since`] cannot take apart, so an
    /// interval keeps its later snapshot's (the interval's own longest
    /// is in its highest non-empty `holds` bucket).
    #[serde(default)]
    pub longest_hold_ns: u64,
    /// Control commands the worker handled.
    #[serde(default)]
    pub commands: u64,
    /// Holds in which it handled control commands.
    #[serde(default)]
    pub command_holds: u64,
    /// Nanoseconds those holds ran on a CPU (the thread's CPU time): their
    /// own work, without the time the host ran something else.
    #[serde(default)]
    pub command_cpu_nanos: u64,
    /// Holds with control commands that ran 1 ms or more on a CPU.
    #[serde(default)]
    pub command_holds_over_1ms_cpu: u64,
}

/// What a snapshot says, in the units a reader wants.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PerfFigures {
    /// Counter ticks per nanosecond (the CPU's TSC rate on x86-64).
    pub ticks_per_ns: f64,
    /// Share of the time in rounds that moved frames.
    pub busy_share: f64,
    /// Share of the time polling rounds that found nothing.
    pub idle_poll_share: f64,
    /// Share of the time elsewhere (sleeping, control commands).
    pub other_share: f64,
    /// Frames per second over the span.
    pub frames_per_sec: f64,
    /// Busy ticks per frame (cycles on x86-64).
    pub cycles_per_frame: Option<f64>,
    /// Busy nanoseconds per frame.
    pub ns_per_frame: Option<f64>,
    /// Mean chains per transmit burst (empty polls excluded).
    pub mean_burst: Option<f64>,
    /// Share of the frames that took the fast case.
    pub fast_share: Option<f64>,
    /// Share of the busy rounds that read their transmit bursts ahead.
    #[serde(default)]
    pub read_ahead_share: Option<f64>,
    /// Share of the time in holds (part of `other_share`).
    #[serde(default)]
    pub hold_share: f64,
    /// Mean hold in nanoseconds.
    #[serde(default)]
    pub mean_hold_ns: Option<f64>,
}

impl PerfSnapshot {
    /// The interval from `earlier` to this snapshot.
    pub fn since(&self, earlier: &PerfSnapshot) -> PerfSnapshot {
        let sub = |a: &[u64], b: &[u64]| {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        PerfSnapshot {
            worker: self.worker,
            core: self.core,
            cycles: self.cycles.saturating_sub(earlier.cycles),
            nanos: self.nanos.saturating_sub(earlier.nanos),
            busy_cycles: self.busy_cycles.saturating_sub(earlier.busy_cycles),
            idle_cycles: self.idle_cycles.saturating_sub(earlier.idle_cycles),
            busy_rounds: self.busy_rounds.saturating_sub(earlier.busy_rounds),
            idle_rounds: self.idle_rounds.saturating_sub(earlier.idle_rounds),
            frames: self.frames.saturating_sub(earlier.frames),
            fast_frames: self.fast_frames.saturating_sub(earlier.fast_frames),
            read_ahead_rounds: self
                .read_ahead_rounds
                .saturating_sub(earlier.read_ahead_rounds),
            bursts: sub(&self.bursts, &earlier.bursts),
            depth: sub(&self.depth, &earlier.depth),
            holds: sub(&self.holds, &earlier.holds),
            hold_nanos: self.hold_nanos.saturating_sub(earlier.hold_nanos),
            holds_over_1ms: self.holds_over_1ms.saturating_sub(earlier.holds_over_1ms),
            longest_hold_ns: self.longest_hold_ns,
            commands: self.commands.saturating_sub(earlier.commands),
            command_holds: self.command_holds.saturating_sub(earlier.command_holds),
            command_cpu_nanos: self
                .command_cpu_nanos
                .saturating_sub(earlier.command_cpu_nanos),
            command_holds_over_1ms_cpu: self
                .command_holds_over_1ms_cpu
                .saturating_sub(earlier.command_holds_over_1ms_cpu),
        }
    }

    /// How many holds.
    pub fn hold_count(&self) -> u64 {
        self.holds.iter().sum()
    }

    /// The bucket of the longest hold ([`hold_bucket_span`]), None without holds.
    pub fn longest_hold_bucket(&self) -> Option<usize> {
        self.holds.iter().rposition(|&k| k > 0)
    }

    /// Shares, rates and costs per frame.
    pub fn figures(&self) -> PerfFigures {
        let ticks_per_ns = if self.nanos > 0 && self.cycles > 0 {
            self.cycles as f64 / self.nanos as f64
        } else {
            tsc::calibrated_rate()
        };
        let total = self.cycles.max(1) as f64;
        let busy = self.busy_cycles as f64 / total;
        let idle = self.idle_cycles as f64 / total;
        let per_frame = (self.frames > 0).then(|| self.busy_cycles as f64 / self.frames as f64);
        let (n, chains) = self
            .bursts
            .iter()
            .enumerate()
            .skip(1)
            .fold((0u64, 0u64), |(n, c), (size, k)| {
                (n + k, c + size as u64 * k)
            });
        PerfFigures {
            ticks_per_ns,
            busy_share: busy.min(1.0),
            idle_poll_share: idle.min(1.0),
            other_share: (1.0 - busy - idle).clamp(0.0, 1.0),
            frames_per_sec: self.frames as f64 * 1e9 / self.nanos.max(1) as f64,
            cycles_per_frame: per_frame,
            ns_per_frame: per_frame.map(|c| c / ticks_per_ns),
            mean_burst: (n > 0).then(|| chains as f64 / n as f64),
            fast_share: (self.frames > 0)
                .then(|| (self.fast_frames as f64 / self.frames as f64).min(1.0)),
            read_ahead_share: (self.busy_rounds > 0)
                .then(|| (self.read_ahead_rounds as f64 / self.busy_rounds as f64).min(1.0)),
            hold_share: (self.hold_nanos as f64 / self.nanos.max(1) as f64).min(1.0),
            mean_hold_ns: (self.hold_count() > 0)
                .then(|| self.hold_nanos as f64 / self.hold_count() as f64),
        }
    }
}

/// A Prometheus family `vnio_switch_worker_NAME` of one value per worker:
/// its help and type lines, then each worker's `value`.
pub(super) fn write_family(
    out: &mut String,
    workers: &[PerfSnapshot],
    name: &str,
    help: &str,
    kind: &str,
    value: impl Fn(&PerfSnapshot) -> String,
) {
    let rows = workers
        .iter()
        .map(|w| (format!("worker=\"{}\"", w.worker), value(w)));
    crate::stats::write_family(out, &format!("vnio_switch_worker_{name}"), help, kind, rows);
}

/// The workers' counters in Prometheus text format (cumulative since each
/// worker started; rates and costs per frame come from their differences).
pub fn prometheus(workers: &[PerfSnapshot]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut family = |name: &str, help: &str, kind: &str, value: &dyn Fn(&PerfSnapshot) -> u64| {
        write_family(&mut out, workers, name, help, kind, |w| {
            value(w).to_string()
        });
    };
    family(
        "cycles_total",
        "Counter ticks since the worker started (cycles on x86-64).",
        "counter",
        &|w| w.cycles,
    );
    family(
        "busy_cycles_total",
        "Ticks in polling rounds that moved frames.",
        "counter",
        &|w| w.busy_cycles,
    );
    family(
        "idle_poll_cycles_total",
        "Ticks in polling rounds that found nothing.",
        "counter",
        &|w| w.idle_cycles,
    );
    family(
        "frames_total",
        "Frames forwarded or dropped.",
        "counter",
        &|w| w.frames,
    );
    family(
        "fast_frames_total",
        "Frames that took the fast case (plain, guest to guest on one worker).",
        "counter",
        &|w| w.fast_frames,
    );
    family(
        "read_ahead_rounds_total",
        "Busy rounds that prefetched their transmit bursts' buffers at the pop.",
        "counter",
        &|w| w.read_ahead_rounds,
    );
    family(
        "busy_rounds_total",
        "Polling rounds that moved frames.",
        "counter",
        &|w| w.busy_rounds,
    );
    family(
        "idle_rounds_total",
        "Polling rounds that found nothing.",
        "counter",
        &|w| w.idle_rounds,
    );
    family(
        "nanoseconds_total",
        "Nanoseconds since the worker started.",
        "counter",
        &|w| w.nanos,
    );
    let _ = writeln!(out, "# HELP vnio_switch_worker_tx_burst_chains Bursts taken from guests' transmit queues, by chains in the burst (le: at most).\n# TYPE vnio_switch_worker_tx_burst_chains histogram");
    for w in workers {
        let mut cum = 0;
        let (mut count, mut sum) = (0u64, 0u64);
        for (n, k) in w.bursts.iter().enumerate() {
            cum += k;
            count += k;
            sum += n as u64 * k;
            if n + 1 < w.bursts.len() {
                let _ = writeln!(
                    out,
                    "vnio_switch_worker_tx_burst_chains_bucket{{worker=\"{}\",le=\"{n}\"}} {cum}",
                    w.worker
                );
            }
        }
        let _ = writeln!(
            out,
            "vnio_switch_worker_tx_burst_chains_bucket{{worker=\"{}\",le=\"+Inf\"}} {cum}",
            w.worker
        );
        let _ = writeln!(
            out,
            "vnio_switch_worker_tx_burst_chains_sum{{worker=\"{}\"}} {sum}",
            w.worker
        );
        let _ = writeln!(
            out,
            "vnio_switch_worker_tx_burst_chains_count{{worker=\"{}\"}} {count}",
            w.worker
        );
    }
    hold::prometheus(&mut out, workers);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_buckets_are_powers_of_two() {
        let b: Vec<usize> = [0u16, 1, 2, 3, 4, 7, 8, 255, 256, 511, 512, 4096]
            .iter()
            .map(|&d| depth_bucket(d))
            .collect();
        assert_eq!(b, [0, 1, 2, 2, 3, 3, 4, 8, 9, 9, 10, 10]);
    }

    #[test]
    fn an_interval_gives_shares_costs_and_the_mean_burst() {
        let p = WorkerPerf::default();
        let a = p.snapshot();
        p.round(3_000, 30, false);
        p.round(1_000, 0, false);
        p.burst(32, 40);
        p.burst(28, 28);
        p.burst(0, 0);
        let mut b = p.snapshot();
        // A fixed span, so the shares are exact.
        b.cycles = a.cycles + 10_000;
        b.nanos = a.nanos + 5_000;
        let d = b.since(&a);
        assert_eq!((d.busy_rounds, d.idle_rounds, d.frames), (1, 1, 30));
        assert_eq!((d.bursts[32], d.bursts[28], d.bursts[0]), (1, 1, 1));
        assert_eq!((d.depth[6], d.depth[5], d.depth[0]), (1, 1, 1));
        let f = d.figures();
        assert_eq!(f.ticks_per_ns, 2.0);
        assert!((f.busy_share - 0.3).abs() < 1e-9);
        assert!((f.idle_poll_share - 0.1).abs() < 1e-9);
        assert!((f.other_share - 0.6).abs() < 1e-9);
        assert_eq!(f.cycles_per_frame, Some(100.0));
        assert_eq!(f.ns_per_frame, Some(50.0));
        assert_eq!(f.mean_burst, Some(30.0));
        assert_eq!(f.frames_per_sec, 30.0 * 1e9 / 5_000.0);
    }

    #[test]
    fn holds_are_counted_summed_and_the_longest_kept() {
        let p = WorkerPerf::default();
        p.hold(500, 0);
        let a = p.snapshot();
        p.hold(1_500_000, 2);
        p.hold(3_000, 1);
        p.hold(999_999, 0);
        p.command_cpu(1_200_000);
        p.command_cpu(2_000);
        let d = p.snapshot().since(&a);
        assert_eq!(d.hold_count(), 3);
        assert_eq!((d.holds[11], d.holds[2], d.holds[10]), (1, 1, 1));
        assert_eq!(d.hold_nanos, 1_500_000 + 3_000 + 999_999);
        assert_eq!((d.holds_over_1ms, d.longest_hold_ns), (1, 1_500_000));
        assert_eq!((d.commands, d.command_holds), (3, 2));
        assert_eq!(d.command_cpu_nanos, 1_202_000);
        assert_eq!(d.command_holds_over_1ms_cpu, 1);
        assert_eq!(d.longest_hold_bucket(), Some(11));
        let f = d.figures();
        assert_eq!(f.mean_hold_ns, Some(d.hold_nanos as f64 / 3.0));
        let text = prometheus(&[p.snapshot()]);
        assert!(text.contains("hold_seconds_bucket{worker=\"0\",le=\"0.000001\"} 1"));
        assert!(text.contains("hold_seconds_bucket{worker=\"0\",le=\"0.001024\"} 3"));
        assert!(text.contains("hold_seconds_bucket{worker=\"0\",le=\"+Inf\"} 4"));
        assert!(text.contains("hold_seconds_count{worker=\"0\"} 4"));
        assert!(text.contains("vnio_switch_worker_holds_over_1ms_total{worker=\"0\"} 1"));
        assert!(text.contains("vnio_switch_worker_longest_hold_seconds{worker=\"0\"} 0.0015"));
        assert!(text.contains("# TYPE vnio_switch_worker_longest_hold_seconds gauge"));
        assert!(text.contains("vnio_switch_worker_commands_total{worker=\"0\"} 3"));
    }

    #[test]
    fn no_frames_means_no_cost_per_frame() {
        let f = WorkerPerf::default().snapshot().figures();
        assert_eq!(
            (f.cycles_per_frame, f.ns_per_frame, f.mean_burst),
            (None, None, None)
        );
        assert!(f.ticks_per_ns > 0.0);
    }

    #[test]
    fn prometheus_has_every_family_and_a_cumulative_histogram() {
        let p = WorkerPerf::default();
        p.round(500, 10, false);
        p.burst(4, 4);
        p.burst(32, 64);
        let text = prometheus(&[PerfSnapshot {
            worker: 3,
            ..p.snapshot()
        }]);
        assert!(text.contains("vnio_switch_worker_frames_total{worker=\"3\"} 10"));
        assert!(text.contains("vnio_switch_worker_busy_cycles_total{worker=\"3\"} 500"));
        assert!(text.contains("tx_burst_chains_bucket{worker=\"3\",le=\"3\"} 0"));
        assert!(text.contains("tx_burst_chains_bucket{worker=\"3\",le=\"4\"} 1"));
        assert!(text.contains("tx_burst_chains_bucket{worker=\"3\",le=\"+Inf\"} 2"));
        assert!(text.contains("tx_burst_chains_sum{worker=\"3\"} 36"));
    }
}
