//! Micro-benchmark: what timing one transaction
//! costs the instrument: recording a sample into the histogram, and reading
//! the clock (twice per transaction).

use std::hint::black_box;
use vnio_measure::clock::now_ns;
use vnio_measure::stats::Latency;

fn main() {
    const N: u64 = 20_000_000;
    // Latency-like values: a body with a tail, computed without a RNG call.
    let values: Vec<u64> = (0..4096u64)
        .map(|i| 20_000 + (i * 7919 % 60_000) + if i % 500 == 0 { 2_000_000 } else { 0 })
        .collect();
    let mut l = Latency::new();
    for &v in &values {
        l.record(v); // warm the bucket array
    }
    let mut best_record = f64::MAX;
    let mut best_clock = f64::MAX;
    for _ in 0..5 {
        let t = now_ns();
        for i in 0..N {
            l.record(black_box(values[(i & 4095) as usize]));
        }
        best_record = best_record.min((now_ns() - t) as f64 / N as f64);
        let t = now_ns();
        let mut acc = 0u64;
        for _ in 0..N / 4 {
            acc = acc.wrapping_add(black_box(now_ns()));
        }
        black_box(acc);
        best_clock = best_clock.min((now_ns() - t) as f64 / (N / 4) as f64);
    }
    println!("record_ns {best_record:.2}");
    println!("clock_read_ns {best_clock:.2}");
    println!("samples {}", black_box(l.count()));
}
