//! Two stored runs side by side: the points they share, and what
//! changed (figures and verdicts).

use super::*;
use crate::findings::{self, significance, Statistic};
use crate::outcome::PointOutcome;
use crate::store::StoredRun;
use std::fmt::Write;

/// One matched pair of points of two runs.
#[derive(Debug, Clone)]
pub struct Pair {
    /// Scenario name.
    pub scenario: String,
    /// The row in run A.
    pub a: Row,
    /// The row in run B.
    pub b: Row,
    /// Whether p50 and p99 changed from A to B, at 95%.
    pub change: [Option<significance::Change>; 2],
}

/// Points present in both runs (same scenario, configuration, workload and
/// sweep value), in A's order.
pub fn pairs(a: &StoredRun, b: &StoredRun) -> Vec<Pair> {
    let mut out = Vec::new();
    for sa in &a.scenarios {
        let Some(sb) = b.scenarios.iter().find(|s| s.name == sa.name) else {
            continue;
        };
        for pa in &sa.points {
            let key = |p: &PointOutcome| {
                (
                    p.point.configuration.clone(),
                    p.point.workload.name.clone(),
                    p.point.sweep,
                )
            };
            if let Some(pb) = sb.points.iter().find(|pb| key(pb) == key(pa)) {
                out.push(Pair {
                    scenario: sa.name.clone(),
                    a: Row::of(pa),
                    b: Row::of(pb),
                    change: [Statistic::P50, Statistic::P99]
                        .map(|s| significance::of_points(pa, pb, s)),
                });
            }
        }
    }
    out
}

/// The comparison page of two stored runs.
pub fn compare(a: &StoredRun, b: &StoredRun) -> String {
    let names = [format!("run {}", a.row.id), format!("run {}", b.row.id)];
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vnio lab: run {} vs run {}</title><style>{STYLE}</style></head><body>\n",
        a.row.id, b.row.id
    );
    let _ = writeln!(
        h,
        "<h1>vnio lab — run {} vs run {}</h1>",
        a.row.id, b.row.id
    );
    for (n, r) in [(&names[0], a), (&names[1], b)] {
        let _ = writeln!(
            h,
            "<p class=\"meta\"><b>{n}</b>: {} · {} · vnio {} · started {} · {}</p>",
            escape(&r.row.name),
            escape(&r.row.status),
            escape(&r.row.revision),
            ns_time(r.row.started_unix_ns),
            escape(&describe_overrides(&r.overrides))
        );
    }
    verdicts::changes(
        &mut h,
        &findings::changes(&findings::judge_run(a), &findings::judge_run(b)),
        [&names[0], &names[1]],
    );
    let pairs = pairs(a, b);
    if pairs.is_empty() {
        h.push_str("<p class=\"error\">The two runs have no point in common (same scenario, configuration, workload and sweep value).</p>");
    }
    let mut groups: Vec<(String, String)> = Vec::new();
    for p in &pairs {
        let key = (p.scenario.clone(), p.a.workload.clone());
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (scenario, workload) in groups {
        let mine: Vec<&Pair> = pairs
            .iter()
            .filter(|p| p.scenario == scenario && p.a.workload == workload)
            .collect();
        let _ = writeln!(h, "<h2>{} / {}</h2>", escape(&scenario), escape(&workload));
        let latency: Vec<&&Pair> = mine
            .iter()
            .filter(|p| p.a.latency_us.is_some() && p.b.latency_us.is_some())
            .collect();
        if !latency.is_empty() {
            let labels: Vec<String> = latency.iter().map(|p| p.a.label()).collect();
            let va: Vec<[f64; 2]> = latency
                .iter()
                .filter_map(|p| p.a.latency_us.map(|l| [l[1], l[3]]))
                .collect();
            let vb: Vec<[f64; 2]> = latency
                .iter()
                .filter_map(|p| p.b.latency_us.map(|l| [l[1], l[3]]))
                .collect();
            figure(
                &mut h,
                &figures::compare_bars(
                    &format!("{scenario}: {workload}, p50 and p99"),
                    &labels,
                    &va,
                    &vb,
                    [&names[0], &names[1]],
                ),
            );
        }
        h.push_str("<table><tr><th class=\"l\">point</th><th>A p50 µs</th><th>B p50</th><th>Δ p50 (95% interval)</th><th>A p99</th><th>B p99</th><th>Δ p99 (95% interval)</th><th>A p99.99</th><th>B p99.99</th><th>A Gbit/s</th><th>B Gbit/s</th><th class=\"l\">status A / B</th></tr>\n");
        for p in mine {
            let la = p.a.latency_us.unwrap_or_default();
            let lb = p.b.latency_us.unwrap_or_default();
            let delta = |x: f64, y: f64, c: &Option<significance::Change>| match c {
                Some(c) => escape(&c.words()),
                None if x > 0.0 && y > 0.0 => format!("{:+.0}%", 100.0 * (y - x) / x),
                None => String::new(),
            };
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td class=\"l\">{} / {}</td></tr>",
                escape(&p.a.label()),
                fmt_us(la[1]),
                fmt_us(lb[1]),
                delta(la[1], lb[1], &p.change[0]),
                fmt_us(la[3]),
                fmt_us(lb[3]),
                delta(la[3], lb[3], &p.change[1]),
                fmt_us(la[5]),
                fmt_us(lb[5]),
                p.a.gbps,
                p.b.gbps,
                p.a.status.as_str(),
                p.b.status.as_str()
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body></html>\n");
    h
}
