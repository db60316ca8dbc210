//! How long a cache line takes to go from one CPU to another and back,
//! sampled over time: the instrument that tells which placement the host
//! gave two (virtual) CPUs while a benchmark ran on them.
//!
//! On a virtual machine the host may move the two vCPUs between physical
//! cores that share a cache and cores that do not, and back, every few
//! seconds. A switch and its endpoints on those two CPUs exchange every
//! frame's lines between them, so their rate follows the placement. Run
//! this beside a benchmark (it costs a quarter of a millisecond per 100 ms
//! on each CPU) and match its samples to the benchmark's seconds.
//!
//! Every 100 ms both threads wake at the same instant and pass one line
//! back and forth 500 times; each sample prints its time since the start
//! and the mean round trip in ns, or `-` when the exchange did not finish
//! within 2 ms (one thread was not running: the other CPU was busy), so
//! the probe never spins longer than that. A sample well above the others
//! still means one thread ran late: the median of a second's ten samples
//! is the figure to use.
//!
//! `cargo run --release -p vnio-measure --example line_round_trip -- [SECS] [CPU_A] [CPU_B]`
//! (defaults: 20 s, CPUs 0 and 1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EXCHANGES: u64 = 500;
const PERIOD: Duration = Duration::from_millis(100);
/// How long after its instant a sample may take: a CPU busy with a
/// benchmark may not run the probe's thread for a while, and the other
/// thread would spin all that time.
const GIVE_UP: Duration = Duration::from_millis(2);

/// The line passed between the CPUs, alone in its cache line.
#[repr(align(64))]
struct Line(AtomicU64);

/// The value sent out and the one expected back for exchange `i` of sample `k`.
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

fn pin(cpu: usize) {
    if !vnio_measure::pin::enter(format!("probe on CPU {cpu}"), Some(cpu)).pinned {
        eprintln!("line_round_trip: cannot run on CPU {cpu}");
        std::process::exit(2);
    }
}

/// Sleeps until sample `k`'s instant.
fn until(start: Instant, k: u32) {
    let at = start + PERIOD * k;
    if let Some(d) = at.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map_or(20.0, |s| s.parse().expect("SECS"));
    let a: usize = args.next().map_or(0, |s| s.parse().expect("CPU_A"));
    let b: usize = args.next().map_or(1, |s| s.parse().expect("CPU_B"));
    let samples = (secs / PERIOD.as_secs_f64()) as u32;
    let line: &'static Line = Box::leak(Box::new(Line(AtomicU64::new(0))));
    let start = Instant::now();
    // The far side returns each odd value as the next even one. Values carry
    // the sample's number in their high half, so a side that gave up on one
    // sample (its partner was not running) starts the next one clean.
    let far = std::thread::spawn(move || {
        pin(b);
        for k in 1..=samples {
            until(start, k);
            let give_up = start + PERIOD * k + GIVE_UP;
            for i in 0..EXCHANGES {
                let (serve, back) = ball(k, 2 * i + 1);
                if !wait_for(line, serve, give_up) {
                    break;
                }
                line.0.store(back, Ordering::Release);
            }
        }
    });
    pin(a);
    let mut all = Vec::with_capacity(samples as usize);
    for k in 1..=samples {
        until(start, k);
        let give_up = start + PERIOD * k + GIVE_UP;
        let t = Instant::now();
        let mut done = true;
        for i in 0..EXCHANGES {
            let (serve, back) = ball(k, 2 * i + 1);
            line.0.store(serve, Ordering::Release);
            if !wait_for(line, back, give_up) {
                done = false;
                break;
            }
        }
        let at = (t - start).as_secs_f64();
        if !done {
            // The other CPU was busy: no figure, rather than a wrong one.
            println!("{at:.2} -");
            continue;
        }
        let ns = t.elapsed().as_nanos() as f64 / EXCHANGES as f64;
        println!("{at:.2} {ns:.0}");
        all.push(ns);
    }
    far.join().expect("the far thread");
    if all.is_empty() {
        eprintln!("CPUs {a} and {b}: no sample completed (the other CPU never ran the probe)");
        return;
    }
    all.sort_by(f64::total_cmp);
    let q = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    eprintln!(
        "CPUs {a} and {b}: round trip p10 {:.0} ns, median {:.0} ns, p90 {:.0} ns over {} of {samples} samples",
        q(0.1),
        q(0.5),
        q(0.9),
        all.len()
    );
}
