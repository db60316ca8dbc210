//! How long a worker held off polling: the buckets its holds are counted
//! in ([`super::WorkerPerf::hold`]) and their Prometheus families.

use super::PerfSnapshot;

/// Holds in powers of two of microseconds: under 1 µs, 1-2 µs, 2-4 µs,
/// ..., 8.192-16.384 ms, and 16.384 ms or more.
pub const HOLD_BUCKETS: usize = 16;
/// A hold this long or longer counts in [`PerfSnapshot::holds_over_1ms`].
pub const HOLD_LIMIT_NS: u64 = 1_000_000;

/// The bucket of a hold of `ns` nanoseconds: 0 under 1 µs, k for
/// 2^(k-1) to 2^k - 1 µs, the last for longer.
#[inline]
pub fn hold_bucket(ns: u64) -> usize {
    let us = ns / 1_000;
    ((u64::BITS - us.leading_zeros()) as usize).min(HOLD_BUCKETS - 1)
}

/// The microseconds hold bucket `k` spans: from, and to (excluded; None
/// for the last, open one).
pub fn hold_bucket_span(k: usize) -> (u64, Option<u64>) {
    let from = if k == 0 { 0 } else { 1u64 << (k - 1) };
    (from, (k + 1 < HOLD_BUCKETS).then_some(1u64 << k))
}

/// "<1 µs", "64-128 µs", "8.192-16.384 ms", ">=16.384 ms": hold bucket `k`.
pub fn hold_bucket_label(k: usize) -> String {
    let us = |v: u64| {
        if v >= 1_000 {
            format!("{}.{:03} ms", v / 1_000, v % 1_000)
        } else {
            format!("{v} µs")
        }
    };
    match hold_bucket_span(k) {
        (0, Some(to)) => format!("<{}", us(to)),
        (from, Some(to)) if to < 1_000 => format!("{from}-{}", us(to)),
        (from, Some(to)) => format!("{}-{}", us(from).trim_end_matches(" ms"), us(to)),
        (from, None) => format!(">={}", us(from)),
    }
}

/// A family of one value per worker: name, help, type, the value.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PerfSnapshot) -> String,
);

/// The workers' holds: a histogram in seconds, the count of holds of 1 ms
/// or more, the longest as a gauge, and the control commands.
pub(super) fn prometheus(out: &mut String, workers: &[PerfSnapshot]) {
    use std::fmt::Write as _;
    let name = "vnio_switch_worker_hold_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time the worker held off polling after a wake-up or a look at its event sources (control commands, front-end messages, timers), until its next round.\n# TYPE {name} histogram"
    );
    for w in workers {
        let mut cum = 0;
        for (k, n) in w.holds.iter().enumerate() {
            cum += n;
            if let (_, Some(to_us)) = hold_bucket_span(k) {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{worker=\"{}\",le=\"{}\"}} {cum}",
                    w.worker,
                    to_us as f64 / 1e6
                );
            }
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{worker=\"{}\",le=\"+Inf\"}} {cum}\n{name}_sum{{worker=\"{}\"}} {}\n{name}_count{{worker=\"{}\"}} {cum}",
            w.worker,
            w.worker,
            w.hold_nanos as f64 / 1e9,
            w.worker
        );
    }
    let rows: [Family; 6] = [
        (
            "holds_over_1ms_total",
            "Holds of 1 ms or longer.",
            "counter",
            |w| w.holds_over_1ms.to_string(),
        ),
        (
            "longest_hold_seconds",
            "The longest hold since the worker started.",
            "gauge",
            |w| (w.longest_hold_ns as f64 / 1e9).to_string(),
        ),
        (
            "commands_total",
            "Control commands the worker handled.",
            "counter",
            |w| w.commands.to_string(),
        ),
        (
            "command_holds_total",
            "Holds in which the worker handled control commands.",
            "counter",
            |w| w.command_holds.to_string(),
        ),
        (
            "command_cpu_seconds_total",
            "CPU time of the holds with control commands (without the time the host ran something else).",
            "counter",
            |w| (w.command_cpu_nanos as f64 / 1e9).to_string(),
        ),
        (
            "command_holds_over_1ms_cpu_total",
            "Holds with control commands that ran 1 ms or more on a CPU.",
            "counter",
            |w| w.command_holds_over_1ms_cpu.to_string(),
        ),
    ];
    for (name, help, kind, value) in rows {
        super::write_family(out, workers, name, help, kind, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_buckets_are_powers_of_two_of_microseconds() {
        let b: Vec<usize> = [
            0u64, 999, 1_000, 1_999, 2_000, 999_999, 1_000_000, 16_383_999,
        ]
        .iter()
        .map(|&ns| hold_bucket(ns))
        .collect();
        assert_eq!(b, [0, 0, 1, 1, 2, 10, 10, 14]);
        assert_eq!(hold_bucket(16_384_000), HOLD_BUCKETS - 1);
        assert_eq!(hold_bucket(u64::MAX), HOLD_BUCKETS - 1);
        for k in 0..HOLD_BUCKETS {
            let (from, to) = hold_bucket_span(k);
            assert_eq!(hold_bucket(from * 1_000), k);
            if let Some(to) = to {
                assert_eq!(hold_bucket(to * 1_000 - 1), k);
            }
        }
        assert_eq!(hold_bucket_label(0), "<1 µs");
        assert_eq!(hold_bucket_label(8), "128-256 µs");
        assert_eq!(hold_bucket_label(12), "2.048-4.096 ms");
        assert_eq!(hold_bucket_label(15), ">=16.384 ms");
    }
}
