//! The line probe on the real CPUs 0 and 1: about ten samples a second,
//! each a plausible round trip (or none when a CPU was busy), classified
//! near or far. Skipped with the reason on a machine without two CPUs.

use std::time::Duration;

use nix::sched::{sched_getaffinity, CpuSet};
use nix::unistd::Pid;
use vnio_measure::placement::{per_second_medians, LineProbe, Placement};

/// Whether this process may run on CPUs 0 and 1.
fn two_cpus() -> bool {
    let set = sched_getaffinity(Pid::from_raw(0)).unwrap_or_else(|_| CpuSet::new());
    set.is_set(0).unwrap_or(false) && set.is_set(1).unwrap_or(false)
}

#[test]
fn the_probe_samples_cpus_0_and_1_ten_times_a_second() {
    if !two_cpus() {
        eprintln!("skip: the probe needs CPUs 0 and 1, this process may not run on both");
        return;
    }
    let probe = LineProbe::start(0, 1).unwrap();
    std::thread::sleep(Duration::from_millis(1050));
    let samples = probe.stop();
    // Samples at 0.1 s to 1.0 s; a loaded machine may start one late.
    assert!(
        (9..=11).contains(&samples.len()),
        "{} samples: {samples:?}",
        samples.len()
    );
    for w in samples.windows(2) {
        assert!(w[0].at < w[1].at, "{samples:?}");
    }
    let done: Vec<f64> = samples.iter().filter_map(|s| s.round_trip_ns).collect();
    assert!(!done.is_empty(), "no sample completed: {samples:?}");
    // A cache line's round trip between two CPUs: tens of ns (shared
    // cache) to a few µs (another socket, a busy hypervisor).
    for ns in &done {
        assert!((10.0..20_000.0).contains(ns), "{ns} ns: {samples:?}");
    }
    let m = per_second_medians(&samples, Duration::ZERO, 1);
    if let Some(ns) = m[0] {
        eprintln!("CPUs 0 and 1: {ns:.0} ns, {}", Placement::of(ns).as_str());
    }
}

#[test]
fn a_cpu_the_process_cannot_use_is_refused() {
    let e = LineProbe::start(0, 4095)
        .err()
        .expect("CPU 4095 cannot be used");
    assert!(e.to_string().contains("CPU 4095"), "{e}");
}
