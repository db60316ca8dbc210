//! The 95% percentile intervals cover the true percentile about 95% of the
//! time: synthetic exponential samples of known percentiles, 10^6 draws a
//! repeat, for p50, p99 and p99.9.
//!
//! Drawing 10^6 samples per repeat is too slow for a debug-built test
//! run many times, so each repeat draws the *histogram* of 10^6 samples
//! instead: the count in each bucket is multinomial, drawn bucket by bucket
//! as a binomial of the samples not yet placed (the exponential is
//! memoryless, so a span of width w above everything already placed holds
//! each remaining sample with probability 1 - exp(-w/mean)). Buckets are
//! drawn one by one within ±4% of each true percentile, where the
//! bracketing order statistics lie (their spread is well under 1% at 10^6
//! samples; the test fails if a bound falls outside); the spans between
//! are drawn as one count each, recorded at their first value, which
//! leaves every cumulative count inside the windows exactly as a full
//! recording would have it. The intervals are then read by vnio's own
//! code from that histogram. The seeds are fixed: the test is
//! deterministic.
//!
//! A second check draws the two bracketing order statistics themselves
//! (Beta-distributed), without the histogram, in many more repeats: the
//! ranks alone cover at their nominal level; the histogram's bucket
//! resolution only widens that a little.

use rand::SeedableRng;
use rand_distr::{Beta, Binomial, Distribution};
use vnio_measure::interval::{ranks, values_at_ranks};
use vnio_measure::stats::Latency;

const MEAN_NS: f64 = 100_000.0;
const PERCENTILES: [f64; 3] = [0.5, 0.99, 0.999];

/// The spans drawn bucket by bucket: ±4% around each true percentile,
/// widened to whole buckets.
fn windows() -> Vec<(u64, u64)> {
    let hist = Latency::new().histogram().clone();
    PERCENTILES
        .iter()
        .map(|&p| {
            let t = truth(p) as f64;
            (
                hist.lowest_equivalent((t * 0.96) as u64),
                hist.highest_equivalent((t * 1.04) as u64),
            )
        })
        .collect()
}

/// The histogram of `n` exponential samples of mean [`MEAN_NS`], exact
/// bucket by bucket inside `windows` (sorted, disjoint).
fn exponential_histogram(rng: &mut impl rand::Rng, n: u64, windows: &[(u64, u64)]) -> Latency {
    let mut lat = Latency::new();
    let hist = lat.histogram().clone();
    let mut left = n;
    // A sample x is recorded as floor(x), and as 1 below 1 ns: the first
    // span starts at 0.
    let mut lo = 0u64;
    while left > 0 {
        let inside = windows.iter().any(|&(a, b)| a <= lo && lo <= b);
        let next = if inside {
            hist.highest_equivalent(lo.max(1)) + 1
        } else {
            // Up to the first bucket of the next window, or to the end.
            windows
                .iter()
                .find(|&&(a, _)| a > lo)
                .map_or(u64::MAX, |&(a, _)| a)
        };
        let p = if next == u64::MAX {
            1.0
        } else {
            1.0 - (-((next - lo) as f64) / MEAN_NS).exp()
        };
        let here = Binomial::new(left, p).unwrap().sample(rng);
        if here > 0 {
            lat.record_n(lo.max(1), here);
            left -= here;
        }
        lo = next;
    }
    lat
}

/// The true p-quantile as it would be recorded (whole nanoseconds).
fn truth(p: f64) -> u64 {
    (-MEAN_NS * (1.0 - p).ln()).floor() as u64
}

#[test]
fn histogram_intervals_cover_at_their_level() {
    let (n, repeats) = (1_000_000u64, 2_000);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x36);
    let windows = windows();
    let ranks = PERCENTILES.map(|p| ranks(n, p, 0.95).unwrap());
    let mut covered = [0u32; 3];
    let started = std::time::Instant::now();
    let mut drawing = std::time::Duration::ZERO;
    for r in 0..repeats {
        let t = std::time::Instant::now();
        let lat = exponential_histogram(&mut rng, n, &windows);
        drawing += t.elapsed();
        assert_eq!(lat.count(), n);
        let h = lat.histogram();
        // The six bracketing samples in one pass (the ranks depend on n
        // and p only); the first repeat also through the whole path.
        let at = values_at_ranks(
            h,
            std::array::from_fn::<u64, 6, _>(|i| {
                let (j, k) = ranks[i / 2];
                if i % 2 == 0 {
                    j
                } else {
                    k
                }
            }),
        );
        for (i, &p) in PERCENTILES.iter().enumerate() {
            let (lo, hi) = (
                h.lowest_equivalent(at[2 * i].unwrap()),
                h.highest_equivalent(at[2 * i + 1].unwrap()),
            );
            if r == 0 {
                assert_eq!(lat.interval(p, 0.95).bounds(), Some((lo, hi)));
            }
            let (a, b) = windows[i];
            assert!(a < lo && hi < b, "p{p}: [{lo}, {hi}] left the drawn window");
            covered[i] += u32::from(lo <= truth(p) && truth(p) <= hi);
        }
    }
    let pct = covered.map(|c| 100.0 * c as f64 / repeats as f64);
    println!(
        "through the histogram, {repeats} repeats of {n}: p50 {:.2}%, p99 {:.2}%, p99.9 {:.2}% covered ({:?})",
        pct[0],
        pct[1],
        pct[2],
        started.elapsed()
    );
    println!("drawing the histograms: {drawing:?}");
    // 2,000 repeats: one standard deviation of the estimate is 0.5%. The
    // bounds are whole buckets (0.05-0.1% of the value), which widens the
    // interval the most where it is narrowest: p50's half-width at 10^6
    // samples is 0.28%, so the widening lifts its coverage to about 97%
    // (this seed: 96.9%); conservative, never below the nominal level.
    for (p, c) in PERCENTILES.iter().zip(pct) {
        assert!((93.0..=98.0).contains(&c), "p{}: {c}% covered", p * 100.0);
    }
}

#[test]
fn order_statistic_ranks_cover_at_their_level() {
    let (n, repeats) = (1_000_000u64, 20_000);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x3636);
    for p in PERCENTILES {
        let (j, k) = ranks(n, p, 0.95).unwrap();
        let below = Beta::new(j as f64, (n - j + 1) as f64).unwrap();
        let gap = Beta::new((k - j) as f64, (n - k + 1) as f64).unwrap();
        let mut covered = 0u32;
        for _ in 0..repeats {
            // U_(j), then U_(k) = U_(j) + (1 - U_(j)) V: the uniform order
            // statistics; an exponential's are their monotone image, so
            // X_(j) <= ξ < X_(k) exactly when U_(j) <= p < U_(k).
            let uj: f64 = below.sample(&mut rng);
            let uk = uj + (1.0 - uj) * gap.sample(&mut rng);
            covered += u32::from(uj <= p && p < uk);
        }
        let c = 100.0 * covered as f64 / repeats as f64;
        println!(
            "ranks ({j}, {k}) of {n} at p{}: {c:.2}% covered in {repeats} repeats",
            p * 100.0
        );
        // 20,000 repeats: one standard deviation of the estimate is 0.15%.
        assert!((94.4..=95.8).contains(&c), "p{}: {c}%", p * 100.0);
    }
}
