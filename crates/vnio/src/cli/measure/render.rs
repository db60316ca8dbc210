//! The result document as people and spreadsheets read it: the table
//! (one row per target and the merge, latency in µs) and CSV. Separate
//! from the commands because it only formats a finished document.

use vnio_measure::goal::GoalOutcome;
use vnio_measure::interval;
use vnio_measure::result::{Document, Iteration, Measured};
use vnio_measure::stats::Summary;

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e3)
}

/// The human table: one row per target and the merge, latency in µs.
pub(super) fn table(doc: &Document) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let Some(it) = doc.chosen() else {
        return "no iteration completed\n".into();
    };
    let _ = writeln!(
        s,
        "{} | iteration {}/{} (median by mean) | {:.1} s measured{}",
        doc.workload,
        doc.chosen + 1,
        doc.iterations.len(),
        it.seconds,
        if doc.interrupted {
            " | INTERRUPTED: partial"
        } else {
            ""
        }
    );
    if let Some(g) = &doc.ci_goal {
        let _ = writeln!(s, "{}", goal_line(g));
    }
    let rows: Vec<&Measured> = if it.per_target.len() > 1 {
        it.per_target
            .iter()
            .chain(std::iter::once(&it.merged))
            .collect()
    } else {
        vec![&it.merged]
    };
    if rows.iter().any(|m| m.latency.is_some()) {
        latency_rows(&mut s, &rows, it);
    } else {
        stream_rows(&mut s, &rows, doc);
    }
    footer(&mut s, doc, it);
    s
}

/// The latency table: counts, rate and percentiles per row, then each
/// row's intervals.
fn latency_rows(s: &mut String, rows: &[&Measured], it: &Iteration) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:<22} {:>10} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} {:>6}",
        "target",
        "trans",
        "trans/s",
        "mean",
        "stddev",
        "min",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99",
        "max",
        ">1ms%",
        "lost"
    );
    for m in rows {
        let l = m.latency.clone().unwrap_or_default();
        let _ = writeln!(
            s,
            "{:<22} {:>10} {:>11.0} {:>8.1} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7.3} {:>6}",
            m.target,
            m.ops,
            m.ops_per_s,
            l.mean_ns / 1e3,
            l.stddev_ns / 1e3,
            us(l.min_ns),
            us(l.p50_ns),
            us(l.p90_ns),
            us(l.p99_ns),
            us(l.p999_ns),
            us(l.p9999_ns),
            format!("{:.0}", l.max_ns as f64 / 1e3),
            l.over_1ms_pct,
            m.lost
        );
    }
    let _ = writeln!(
        s,
        "(latency in microseconds; >5ms%: {:.4})",
        it.merged.latency.as_ref().map_or(0.0, |l| l.over_5ms_pct)
    );
    for m in rows {
        if let Some(l) = &m.latency {
            let _ = writeln!(s, "{}", intervals_line(&m.target, l));
        }
    }
}

/// The throughput table; TCP rows say nothing of packets sent and lost.
fn stream_rows(s: &mut String, rows: &[&Measured], doc: &Document) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "{:<22} {:>10} {:>12} {:>10} {:>12} {:>12} {:>8}",
        "target", "Gbit/s", "packets/s", "MB", "sent", "lost", "loss%"
    );
    // TCP counts no packets sent or lost (the kernel retransmits): say so
    // instead of printing zeros that read as measurements.
    let tcp = doc.params.pointer("/stream/transport") == Some(&serde_json::json!("tcp"));
    for m in rows {
        let (sent, lost, pct) = if tcp {
            ("-".to_string(), "-".to_string(), "-".to_string())
        } else {
            (
                m.sent.to_string(),
                m.lost.to_string(),
                format!("{:.3}", m.loss_pct),
            )
        };
        let _ = writeln!(
            s,
            "{:<22} {:>10.3} {:>12.0} {:>10.1} {:>12} {:>12} {:>8}",
            m.target,
            m.gbps,
            m.ops_per_s,
            m.bytes as f64 / 1e6,
            sent,
            lost,
            pct
        );
    }
}

/// Below the table: the rate achieved, CPU costs, the spread over
/// iterations and the environment.
fn footer(s: &mut String, doc: &Document, it: &Iteration) {
    use std::fmt::Write;
    if let (Some(req), Some(got)) = (it.merged.requested_rate, it.merged.achieved_rate) {
        let _ = writeln!(
            s,
            "rate: requested {req:.0}/s, achieved {got:.0}/s ({:.1}%), {} sends late by >1 ms",
            100.0 * got / req.max(1e-9),
            it.merged.late
        );
    }
    let c = &it.client_cost;
    let _ = write!(
        s,
        "cpu: client {:.0} ns/op ({:.2} ms)",
        c.ns_per_op,
        c.cpu.total_ns() as f64 / 1e6
    );
    if let Some(a) = &it.merged.agent_cost {
        let _ = write!(
            s,
            ", agent {:.0} ns/op ({:.2} ms)",
            a.ns_per_op,
            a.cpu.total_ns() as f64 / 1e6
        );
    }
    let _ = writeln!(
        s,
        "; machine {:.0}% busy, {:.1}% steal",
        it.machine.busy_pct, it.machine.steal_pct
    );
    if doc.iterations.len() > 1 {
        let sp = &doc.spread;
        let _ = writeln!(
            s,
            "spread over {} iterations: mean {:.1}-{:.1} us, p99 {}-{} us, {:.0}-{:.0} ops/s",
            doc.iterations.len(),
            sp.mean_ns[0] / 1e3,
            sp.mean_ns[1] / 1e3,
            us(sp.p99_ns[0]),
            us(sp.p99_ns[1]),
            sp.ops_per_s[0],
            sp.ops_per_s[1]
        );
    }
    let e = &doc.environment;
    let _ = writeln!(
        s,
        "env: {} | clocksource {} | {} cpus{}",
        e.kernel.split(' ').next().unwrap_or(""),
        e.clocksource,
        e.cpus,
        if e.hypervisor { " (VM)" } else { "" }
    );
}

/// One row's percentile intervals, e.g. "95% ci all: p50 12.1-12.4 |
/// ... | p99.99 too few samples (needs 36887)".
fn intervals_line(target: &str, l: &Summary) -> String {
    let conf =
        l.ci.by_percentile()
            .iter()
            .map(|(_, c)| c.confidence)
            .find(|c| *c > 0.0)
            .unwrap_or(0.95);
    let parts: Vec<String> = l
        .ci
        .by_percentile()
        .iter()
        .map(|(p, c)| match (c.bounds(), &c.too_few) {
            (Some((lo, hi)), _) => format!("p{p} {:.2}-{:.2}", lo as f64 / 1e3, hi as f64 / 1e3),
            (None, Some(_)) => format!(
                "p{p} too few samples (needs {})",
                interval::samples_needed(p / 100.0, conf)
            ),
            (None, None) => format!("p{p} -"),
        })
        .collect();
    format!("{:.0}% ci {target}: {}", conf * 100.0, parts.join(" | "))
}

/// How a `--ci` run ended, with the percentile over all its rounds.
fn goal_line(g: &GoalOutcome) -> String {
    let interval = match (g.ci.bounds(), g.relative_half_width) {
        (Some((lo, hi)), Some(w)) => format!(
            "95% ci {:.2}-{:.2} (±{:.1}%)",
            lo as f64 / 1e3,
            hi as f64 / 1e3,
            w * 100.0
        ),
        _ => g.ci.too_few.clone().unwrap_or_else(|| "no interval".into()),
    };
    format!(
        "--ci p{} within ±{}%: {} after {} round(s), {:.1} s measured; over all of them p{} {:.2} us, {interval}",
        g.percentile,
        g.width * 100.0,
        g.verdict.to_uppercase(),
        g.rounds,
        g.seconds,
        g.percentile,
        g.estimate_ns as f64 / 1e3
    )
}

/// A bound for CSV: empty when there is no interval.
fn bound(b: Option<u64>) -> String {
    b.map(|v| v.to_string()).unwrap_or_default()
}

/// CSV: a header and one row per target and the merge, chosen iteration.
pub(super) fn csv(doc: &Document) -> String {
    let mut s = String::from(
        "workload,iteration,target,ops,ops_per_s,mean_ns,stddev_ns,min_ns,p50_ns,p90_ns,p99_ns,p999_ns,p9999_ns,max_ns,over_1ms_pct,over_5ms_pct,sent,lost,loss_pct,bytes,gbps,client_ns_per_op,agent_ns_per_op,p50_lo_ns,p50_hi_ns,p90_lo_ns,p90_hi_ns,p99_lo_ns,p99_hi_ns,p999_lo_ns,p999_hi_ns,p9999_lo_ns,p9999_hi_ns\n",
    );
    if let Some(it) = doc.chosen() {
        for m in it.per_target.iter().chain(std::iter::once(&it.merged)) {
            let l = m.latency.clone().unwrap_or_default();
            s.push_str(&format!(
                "{},{},{},{},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{:.4},{:.4},{},{},{:.4},{},{:.4},{:.1},{}\n",
                doc.workload,
                it.index,
                m.target,
                m.ops,
                m.ops_per_s,
                l.mean_ns,
                l.stddev_ns,
                l.min_ns,
                l.p50_ns,
                l.p90_ns,
                l.p99_ns,
                l.p999_ns,
                l.p9999_ns,
                l.max_ns,
                l.over_1ms_pct,
                l.over_5ms_pct,
                m.sent,
                m.lost,
                m.loss_pct,
                m.bytes,
                m.gbps,
                it.client_cost.ns_per_op,
                m.agent_cost.as_ref().map(|a| format!("{:.1}", a.ns_per_op)).unwrap_or_default()
            ));
            // The intervals, appended so the columns before keep their places.
            s.pop();
            for (_, c) in l.ci.by_percentile() {
                s.push_str(&format!(",{},{}", bound(c.lo_ns), bound(c.hi_ns)));
            }
            s.push('\n');
        }
    }
    s
}
