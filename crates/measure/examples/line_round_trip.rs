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
//! and the mean round trip in ns. A sample far above the others means one
//! thread was not running (the other CPU was busy): the median of a
//! second's ten samples is the figure to use.
//!
//! `cargo run --release -p vnio-measure --example line_round_trip -- [SECS] [CPU_A] [CPU_B]`
//! (defaults: 20 s, CPUs 0 and 1).

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const EXCHANGES: u64 = 500;
const PERIOD: Duration = Duration::from_millis(100);

/// The line passed between the CPUs, alone in its cache line.
#[repr(align(64))]
struct Line(AtomicU64);

fn pin(cpu: usize) {
    let mut set = CpuSet::new();
    if set.set(cpu).is_err() || sched_setaffinity(Pid::from_raw(0), &set).is_err() {
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
    // The far side returns each odd value as the next even one.
    let far = std::thread::spawn(move || {
        pin(b);
        let mut v = 1;
        for k in 1..=samples {
            until(start, k);
            for _ in 0..EXCHANGES {
                while line.0.load(Ordering::Acquire) != v {
                    std::hint::spin_loop();
                }
                line.0.store(v + 1, Ordering::Release);
                v += 2;
            }
        }
    });
    pin(a);
    let mut v = 0;
    let mut all = Vec::with_capacity(samples as usize);
    for k in 1..=samples {
        until(start, k);
        let t = Instant::now();
        for _ in 0..EXCHANGES {
            line.0.store(v + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != v + 2 {
                std::hint::spin_loop();
            }
            v += 2;
        }
        let ns = t.elapsed().as_nanos() as f64 / EXCHANGES as f64;
        println!("{:.2} {ns:.0}", (t - start).as_secs_f64());
        all.push(ns);
    }
    far.join().expect("the far thread");
    all.sort_by(f64::total_cmp);
    let q = |p: f64| all[((all.len() - 1) as f64 * p) as usize];
    eprintln!(
        "CPUs {a} and {b}: round trip p10 {:.0} ns, median {:.0} ns, p90 {:.0} ns over {} samples",
        q(0.1),
        q(0.5),
        q(0.9),
        all.len()
    );
}
