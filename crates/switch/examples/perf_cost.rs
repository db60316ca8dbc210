//! What the workers' time accounting (`vnio_switch::perf`) costs: per
//! polling round, the one counter read and the stores of a busy round
//! with one transmit burst, the way `Datapath::poll` makes them (a round
//! costs the time since the previous round's end). Divide by
//! the frames in a round (up to 32 per burst) for the cost per frame, and
//! compare with `datapath_cost`'s nanoseconds per frame.
//!
//! `cargo run --release -p vnio-switch --example perf_cost [-- ROUNDS_MILLIONS]`

use std::hint::black_box;
use std::time::Instant;
use vnio_switch::perf::{clock, WorkerPerf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let millions: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20);
    let n = millions * 1_000_000;
    let p = WorkerPerf::default();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut mark = clock();
        for i in 0..n {
            p.burst(black_box(32), black_box((i & 63) as u16));
            let end = clock();
            p.round(end.wrapping_sub(mark), black_box(32), false);
            mark = end;
        }
        samples.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    samples.sort_by(f64::total_cmp);
    let f = p.snapshot().figures();
    println!(
        "accounting per round: median {:.1} ns (min {:.1}, max {:.1}) over 5 x {n} rounds; {:.2} counter ticks per ns; per frame at 32 frames a round: {:.2} ns",
        samples[2],
        samples[0],
        samples[4],
        f.ticks_per_ns,
        samples[2] / 32.0
    );
    Ok(())
}
