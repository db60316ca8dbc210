//! Reading a statistic from a stored point: the reported value (the
//! median iteration's, as every table shows) and the samples that give its
//! spread.
//!
//! Iterations are the natural samples (the studies ran 3). A point that
//! ran one iteration still has a spread over time: the per-second series
//! the measurement engine keeps for the mean, median, p99, max and rate.
//! Only whole seconds with enough round trips to make a percentile count.
//!
//! A percentile is read over every round trip of every iteration instead
//! (their histograms merged), with its order-statistic confidence
//! intervals: the verdict rests on those ([`super::rule`]). So are the
//! mean (its normal interval) and the share of round trips over 1 or 5 ms
//! (Wilson's interval).

use vnio_measure::result::{Document, IntervalPoint, Iteration};

use super::rule::{Band, OrderStat, SampleSource, Samples};
use super::spec::Statistic;
use crate::outcome::{PointOutcome, Status};

/// Fewer round trips than this in a second make no per-second percentile.
const MIN_OPS_PER_SECOND: u64 = 10;

/// The statistic of one iteration (merged over targets).
pub fn of_iteration(stat: Statistic, it: &Iteration) -> Option<f64> {
    let m = &it.merged;
    let l = m.latency.as_ref();
    let us = |ns: u64| ns as f64 / 1e3;
    match stat {
        Statistic::Mean => l.map(|l| l.mean_ns / 1e3),
        Statistic::P50 => l.map(|l| us(l.p50_ns)),
        Statistic::P90 => l.map(|l| us(l.p90_ns)),
        Statistic::P99 => l.map(|l| us(l.p99_ns)),
        Statistic::P999 => l.map(|l| us(l.p999_ns)),
        Statistic::P9999 => l.map(|l| us(l.p9999_ns)),
        Statistic::Max => l.map(|l| us(l.max_ns)),
        Statistic::TailRatio => l
            .filter(|l| l.mean_ns > 0.0)
            .map(|l| l.p99_ns as f64 / l.mean_ns),
        Statistic::Over1ms => l.map(|l| l.over_1ms_pct),
        Statistic::Over5ms => l.map(|l| l.over_5ms_pct),
        Statistic::Rate => Some(m.ops_per_s),
        Statistic::Gbps => Some(m.gbps),
        Statistic::CpuPerOp => {
            // The client's and the agent's CPU per operation: the part of
            // a round trip's cost the endpoints pay.
            let agent = m.agent_cost.as_ref().map_or(0.0, |c| c.ns_per_op);
            (m.ops > 0).then(|| (it.client_cost.ns_per_op + agent) / 1e3)
        }
        Statistic::MachineBusy => Some(it.machine.busy_pct),
        Statistic::SwitchBusy => it
            .testbed_cost
            .iter()
            .find(|c| c.name == "switch")
            .map(|c| c.busy_pct),
        Statistic::TestbedCpuPerOp => (!it.testbed_cost.is_empty() && m.ops > 0)
            .then(|| it.testbed_cost.iter().map(|c| c.ns_per_op).sum::<f64>() / 1e3),
    }
}

/// The statistic of one second, where the series has it.
pub(super) fn of_second(stat: Statistic, p: &IntervalPoint) -> Option<f64> {
    let us = |ns: u64| ns as f64 / 1e3;
    match stat {
        Statistic::Mean => Some(p.mean_ns / 1e3),
        Statistic::P50 => Some(us(p.p50_ns)),
        Statistic::P99 => Some(us(p.p99_ns)),
        Statistic::Max => Some(us(p.max_ns)),
        Statistic::TailRatio => (p.mean_ns > 0.0).then(|| p.p99_ns as f64 / p.mean_ns),
        Statistic::Rate => Some(p.ops as f64),
        _ => None,
    }
}

/// The samples of `stat` at point `o`, or why there are none.
pub fn of_point(o: &PointOutcome, stat: Statistic) -> Result<Samples, String> {
    match o.status {
        Status::Ok | Status::Interrupted => {}
        Status::Skipped | Status::Failed => {
            let why = o.error.as_deref().unwrap_or("no reason recorded");
            return Err(format!("{} ({why})", o.status.as_str()));
        }
    }
    let doc = o.document.as_ref().ok_or("no result stored")?;
    let chosen = doc.chosen().ok_or("no iteration stored")?;
    if let Some(s) = percentile(doc, stat).or_else(|| mean_or_share(doc, stat)) {
        return Ok(s);
    }
    let value =
        of_iteration(stat, chosen).ok_or_else(|| format!("no {} in its result", stat.as_str()))?;
    let per_iteration: Vec<f64> = doc
        .iterations
        .iter()
        .filter_map(|it| of_iteration(stat, it))
        .collect();
    if per_iteration.len() >= 2 {
        return Ok(Samples::new(value, per_iteration, SampleSource::Iterations));
    }
    let per_second: Vec<f64> = doc
        .iterations
        .iter()
        .flat_map(whole_seconds)
        .filter_map(|p| of_second(stat, p))
        .collect();
    if per_second.len() >= 2 {
        return Ok(Samples::new(value, per_second, SampleSource::Seconds));
    }
    Ok(Samples::new(value, per_iteration, SampleSource::Single))
}

/// A percentile over every round trip of every iteration, with its
/// order-statistic intervals; none for other statistics, or without
/// histograms.
fn percentile(doc: &Document, stat: Statistic) -> Option<Samples> {
    let q = match stat {
        Statistic::P50 => 0.5,
        Statistic::P90 => 0.9,
        Statistic::P99 => 0.99,
        Statistic::P999 => 0.999,
        Statistic::P9999 => 0.9999,
        _ => return None,
    };
    let all = doc.merged_latency().filter(|l| l.count() > 0)?;
    let us = |ci: vnio_measure::interval::Ci| {
        ci.bounds().map(|(lo, hi)| Band {
            lo: lo as f64 / 1e3,
            hi: hi as f64 / 1e3,
        })
    };
    Some(Samples::percentile(
        all.quantile(q) as f64 / 1e3,
        OrderStat {
            count: all.count(),
            ci95: us(all.interval(q, 0.95)),
            ci975: us(all.interval(q, 0.975)),
        },
    ))
}

/// The mean, or the share over 1 or 5 ms, over every round trip of every
/// iteration with its interval (the mean's normal interval, a share's
/// Wilson interval: [`vnio_measure::moments`]); none for other
/// statistics, or without histograms.
fn mean_or_share(doc: &Document, stat: Statistic) -> Option<Samples> {
    let all = doc.merged_latency().filter(|l| l.count() > 1)?;
    let band = |b: Option<(f64, f64)>, scale: f64| {
        b.map(|(lo, hi)| Band {
            lo: lo / scale,
            hi: hi / scale,
        })
    };
    let (value, ci95, ci975, source) = match stat {
        Statistic::Mean => (
            all.histogram().mean() / 1e3,
            band(all.mean_interval(0.95), 1e3),
            band(all.mean_interval(0.975), 1e3),
            SampleSource::MeanInterval,
        ),
        Statistic::Over1ms | Statistic::Over5ms => {
            let five = stat == Statistic::Over5ms;
            let (v, b95) = all.over_interval(five, 0.95)?;
            let (_, b975) = all.over_interval(five, 0.975)?;
            (
                v,
                band(Some(b95), 1.0),
                band(Some(b975), 1.0),
                SampleSource::ShareInterval,
            )
        }
        _ => return None,
    };
    Some(Samples::over_all(
        value,
        OrderStat {
            count: all.count(),
            ci95,
            ci975,
        },
        source,
    ))
}

/// The seconds of iteration `it` that count as samples.
pub(super) fn whole_seconds(it: &Iteration) -> impl Iterator<Item = &IntervalPoint> {
    // The last second of a window may be cut short: only whole ones count
    // (a partial second's rate would read low).
    let whole = it.seconds.floor() as u64;
    it.intervals
        .iter()
        .filter(move |p| p.t_s < whole && p.ops >= MIN_OPS_PER_SECOND)
}
