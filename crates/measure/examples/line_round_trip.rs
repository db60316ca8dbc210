//! How long a cache line takes to go from one CPU to another and back,
//! sampled over time: the instrument that tells which placement the host
//! gave two (virtual) CPUs while a benchmark ran on them
//! (`vnio_measure::placement`, which the lab runs beside its rate
//! workloads with knob `placement_probe`).
//!
//! Every 100 ms both threads wake at the same instant and pass one line
//! back and forth 500 times; each sample prints its time since the start
//! and the mean round trip in ns, or `-` when the exchange did not finish
//! within 2 ms (one thread was not running: the other CPU was busy). The
//! median of a second's ten samples is the figure to match to a
//! benchmark's second; at the end, the spread of every sample on stderr.
//!
//! `cargo run --release -p vnio-measure --example line_round_trip -- [SECS] [CPU_A] [CPU_B]`
//! (defaults: 20 s, CPUs 0 and 1).

use vnio_measure::placement::{LineProbe, PERIOD};

/// Argument `name` as a `T`, or `default` when absent; exits with a
/// message when it does not parse.
fn arg<T: std::str::FromStr>(value: Option<String>, name: &str, default: T) -> T {
    match value {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!(
                "line_round_trip: {name} {v:?} is not a number (usage: [SECS] [CPU_A] [CPU_B])"
            );
            std::process::exit(2);
        }),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = arg(args.next(), "SECS", 20.0);
    let a: usize = arg(args.next(), "CPU_A", 0);
    let b: usize = arg(args.next(), "CPU_B", 1);
    if !(secs.is_finite() && secs >= 0.0) {
        eprintln!("line_round_trip: SECS must be a length in seconds, not {secs}");
        std::process::exit(2);
    }
    let samples = (secs / PERIOD.as_secs_f64()) as u32;
    let probe = LineProbe::start_with(a, b, |s| match s.round_trip_ns {
        Some(ns) => println!("{:.2} {ns:.0}", s.at.as_secs_f64()),
        None => println!("{:.2} -", s.at.as_secs_f64()),
    })
    .unwrap_or_else(|e| {
        eprintln!("line_round_trip: {e}");
        std::process::exit(2);
    });
    // Sample k is taken k periods after the start: stopping half a period
    // after the last one wanted takes exactly `samples` of them.
    std::thread::sleep(PERIOD * samples + PERIOD / 2);
    let taken = probe.stop();
    let mut all: Vec<f64> = taken.iter().filter_map(|s| s.round_trip_ns).collect();
    if all.is_empty() {
        eprintln!("CPUs {a} and {b}: no sample completed (the other CPU never ran the probe)");
        return;
    }
    all.sort_by(f64::total_cmp);
    let q = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    eprintln!(
        "CPUs {a} and {b}: round trip p10 {:.0} ns, median {:.0} ns, p90 {:.0} ns over {} of {} samples",
        q(0.1),
        q(0.5),
        q(0.9),
        all.len(),
        taken.len()
    );
}
