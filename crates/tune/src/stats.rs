//! Percentiles of nanosecond samples.

use serde::{Deserialize, Serialize};

/// Distribution of a set of samples, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples.
    pub samples: usize,
    /// Smallest.
    pub min_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// The value at quantile `q` (0..=1) of sorted samples, nearest rank.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Distribution {
    /// Sorts `samples` and summarises them; `None` when empty.
    pub fn from_samples(mut samples: Vec<u64>) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let sum: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Some(Distribution {
            samples: samples.len(),
            min_ns: samples[0],
            mean_ns: sum as f64 / samples.len() as f64,
            p50_ns: quantile(&samples, 0.5),
            p90_ns: quantile(&samples, 0.9),
            p99_ns: quantile(&samples, 0.99),
            p999_ns: quantile(&samples, 0.999),
            max_ns: samples[samples.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Distribution::from_samples((1..=100).rev().collect()).expect("non-empty");
        assert_eq!(
            (d.min_ns, d.p50_ns, d.p90_ns, d.p99_ns, d.max_ns),
            (1, 50, 90, 99, 100)
        );
        assert!((d.mean_ns - 50.5).abs() < 1e-9);
        assert_eq!(Distribution::from_samples(Vec::new()), None);
        assert_eq!(quantile(&[7], 0.999), 7);
    }
}
