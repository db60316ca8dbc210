//! The report: one static, self-contained HTML page per stored run (inline
//! SVG figures, inline style, no script, no external resource), opening
//! with the verdicts on the studies' findings, and the comparison of two
//! runs. Rendered from the store only.

mod compare;
mod environment;
mod figures;
mod machines;
mod testbeds;
pub use compare::{compare, pairs, Pair};
use environment::{describe_overrides, environment, knobs_banner, scenario_knobs};
mod verdicts;

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::findings::{self, Verdict};
use crate::outcome::{PointOutcome, Status};
pub use crate::scenario::sweep_value;
use crate::scenario::{SweepParam, WorkloadKind};
use crate::store::{StoredRun, StoredScenario};

pub use figures::PERCENTILES;

/// One point as a table row: the numbers every view shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Configuration.
    pub configuration: String,
    /// Workload name.
    pub workload: String,
    /// Workload kind.
    pub kind: WorkloadKind,
    /// Workload parameters in one line.
    pub describe: String,
    /// Swept parameter and value.
    pub sweep: Option<(SweepParam, u64)>,
    /// ok, interrupted, failed, skipped.
    pub status: Status,
    /// Why it failed or was skipped.
    pub error: Option<String>,
    /// Mean, p50, p90, p99, p99.9, p99.99, max in microseconds.
    pub latency_us: Option<[f64; 7]>,
    /// The 95% confidence interval of p50, p90, p99, p99.9, p99.99 in
    /// microseconds; none where the samples were too few (or a document
    /// stored before intervals).
    pub ci_us: [Option<(f64, f64)>; 5],
    /// Which of them had too few samples for an interval (false also for
    /// a document stored before intervals, which shows none).
    pub ci_too_few: [bool; 5],
    /// % of round trips above 1 ms.
    pub over_1ms_pct: Option<f64>,
    /// Transactions (or packets) per second.
    pub ops_per_s: f64,
    /// Gbit/s (streams).
    pub gbps: f64,
    /// Lost, %.
    pub loss_pct: f64,
    /// Iterations run and which was chosen (1-based).
    pub iterations: (usize, usize),
    /// Contention in one line.
    pub contention: Option<String>,
    /// The sample checks that failed (independence, stationarity), each
    /// its warning.
    pub checks: Vec<String>,
}

impl Row {
    /// The row of one stored point.
    pub fn of(o: &PointOutcome) -> Row {
        let doc = o.document.as_ref();
        let it = doc.and_then(|d| d.chosen());
        let m = it.map(|i| &i.merged);
        let latency_us = m.and_then(|m| m.latency.as_ref()).map(|l| {
            [
                l.mean_ns / 1e3,
                l.p50_ns as f64 / 1e3,
                l.p90_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3,
                l.p999_ns as f64 / 1e3,
                l.p9999_ns as f64 / 1e3,
                l.max_ns as f64 / 1e3,
            ]
        });
        let ci_us = m
            .and_then(|m| m.latency.as_ref())
            .map(|l| {
                l.ci.by_percentile().map(|(_, c)| {
                    c.bounds()
                        .map(|(lo, hi)| (lo as f64 / 1e3, hi as f64 / 1e3))
                })
            })
            .unwrap_or_default();
        let ci_too_few = m
            .and_then(|m| m.latency.as_ref())
            .map(|l| l.ci.by_percentile().map(|(_, c)| c.too_few.is_some()))
            .unwrap_or_default();
        let contention = o.contention.as_ref().map(|c| {
            let mut parts = Vec::new();
            if let Some(l) = &c.loads {
                parts.push(format!(
                    "{} loads: {:.0}/{:.0} req/s, {:.0}% of a core",
                    l.count, l.achieved_rate, l.requested_rate, l.cpu_pct
                ));
            }
            if let Some(f) = &c.flood {
                parts.push(format!(
                    "flood {:.0} pps asked, {:.0} sent, {:.0} received",
                    f.requested_pps, f.sent_pps, f.received_pps
                ));
            }
            parts.extend(c.errors.iter().cloned());
            parts.join("; ")
        });
        Row {
            configuration: o.point.configuration.clone(),
            workload: o.point.workload.name.clone(),
            kind: o.point.workload.kind,
            describe: o.point.workload.describe(),
            sweep: o.point.sweep,
            status: o.status,
            error: o.error.clone(),
            latency_us,
            ci_us,
            ci_too_few,
            over_1ms_pct: m.and_then(|m| m.latency.as_ref()).map(|l| l.over_1ms_pct),
            ops_per_s: m.map_or(0.0, |m| m.ops_per_s),
            gbps: m.map_or(0.0, |m| m.gbps),
            loss_pct: m.map_or(0.0, |m| m.loss_pct),
            iterations: doc.map_or((0, 0), |d| (d.iterations.len(), d.chosen + 1)),
            contention: contention.filter(|c| !c.is_empty()),
            checks: doc
                .map(|d| {
                    d.checks
                        .iter()
                        .filter(|c| !c.passed)
                        .map(|c| format!("warning: {}", c.warning))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// "bridge" or "bridge @ 4 loads".
    pub fn label(&self) -> String {
        match self.sweep {
            None => self.configuration.clone(),
            Some((p, v)) => format!("{} @ {}", self.configuration, sweep_value(p, v)),
        }
    }
}

/// HTML-escape text.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:2px solid #3182bd;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}
th{background:#eef4fa}td.l,th.l{text-align:left}tr.skipped td{color:#888}tr.failed td{color:#b00}
.meta{color:#555}.study{background:#f6f8fa;border-left:4px solid #3182bd;padding:.5em 1em}
figure{margin:1em 0}figure svg{max-width:100%;height:auto;border:1px solid #eee}
pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:.8em}.error{color:#b00}
.overridden{background:#fff4d6;border-left:4px solid #e6a100;padding:.5em 1em}
nav ul{columns:2}details{margin:.5em 0}.ci{color:#666;font-size:.85em;white-space:nowrap}
tr.reproduced td,td.reproduced{background:#e5f5e0}tr.not-reproduced td,td.not-reproduced{background:#fde0dd}
tr.inconclusive td,td.inconclusive{background:#f3f3f3}table.findings td{vertical-align:top}
";

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn ns_time(ns: i64) -> String {
    // Seconds since the epoch rendered as UTC date and time, no time crate.
    let secs = ns / 1_000_000_000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The whole report of a stored run.
pub fn render(run: &StoredRun) -> String {
    let r = &run.row;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vnio lab run {}: {}</title><style>{STYLE}</style></head><body>\n",
        r.id,
        escape(&r.name)
    );
    let _ = writeln!(h, "<h1>vnio lab — run {}: {}</h1>", r.id, escape(&r.title));
    let elapsed = r
        .finished_unix_ns
        .map(|f| format!(", {:.0} s", (f - r.started_unix_ns) as f64 / 1e9))
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} · status <b>{}</b>{} · vnio {} · started {}{}</p>",
        escape(&r.name),
        escape(&r.status),
        r.error
            .as_ref()
            .map(|e| format!(" ({})", escape(e)))
            .unwrap_or_default(),
        escape(&r.revision),
        ns_time(r.started_unix_ns),
        elapsed
    );
    knobs_banner(&mut h, run);
    let found = findings::judge_run(run);
    verdicts::table(&mut h, &found);
    if run.scenarios.len() > 1 {
        h.push_str("<nav><ul>");
        for (i, s) in run.scenarios.iter().enumerate() {
            let _ = write!(
                h,
                "<li><a href=\"#s{i}\">{}</a>: {}</li>",
                escape(&s.name),
                escape(&s.title)
            );
        }
        h.push_str("</ul></nav>\n");
    }
    for (i, s) in run.scenarios.iter().enumerate() {
        let mine: Vec<Verdict> = found
            .verdicts
            .iter()
            .filter(|v| v.scenario == s.name)
            .cloned()
            .collect();
        scenario_section(&mut h, i, s, &run.overrides, &mine);
    }
    environment(&mut h, run);
    h.push_str("</body></html>\n");
    h
}

fn scenario_section(
    h: &mut String,
    index: usize,
    s: &StoredScenario,
    overrides: &crate::scenario::Overrides,
    verdicts: &[Verdict],
) {
    scenario_header(h, index, s);
    scenario_knobs(h, s, overrides);
    // Configuration order as run, then workloads in plan order.
    let cfg_index: BTreeMap<&str, usize> = s
        .configurations
        .iter()
        .enumerate()
        .map(|(i, (c, _))| (c.as_str(), i))
        .collect();
    let mut workloads: Vec<&str> = Vec::new();
    for p in &s.points {
        if !workloads.contains(&p.point.workload.name.as_str()) {
            workloads.push(&p.point.workload.name);
        }
    }
    let rows: Vec<Row> = s.points.iter().map(Row::of).collect();
    for w in workloads {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.workload == w).collect();
        let Some(first) = mine.first() else { continue };
        let _ = writeln!(
            h,
            "<h3>{} <small class=\"meta\">{}</small></h3>",
            escape(w),
            escape(&first.describe)
        );
        workload_figures(h, s, w, &mine, &cfg_index, verdicts);
        table(h, &mine);
    }
    if !s.testbeds.is_empty() {
        testbeds::html(h, &s.testbeds);
        h.push_str(&machines::html(&s.testbeds, escape));
    }
    let _ = writeln!(
        h,
        "<details><summary>Scenario file</summary><pre>{}</pre></details>",
        escape(&s.text)
    );
    h.push_str("</section>\n");
}

/// The section's title, the study it stands for, and how it was run.
fn scenario_header(h: &mut String, index: usize, s: &StoredScenario) {
    let _ = writeln!(
        h,
        "<section id=\"s{index}\"><h2 id=\"s-{}\">{}</h2>",
        escape(&s.name),
        escape(&s.title)
    );
    let _ = writeln!(
        h,
        "<div class=\"study\"><p><b>Study experiment:</b> {}</p><p><b>Not reproducible here:</b> {}</p></div>",
        escape(&s.maps_to),
        escape(s.cannot.as_deref().unwrap_or("(not stated)"))
    );
    let run = &s.run_spec;
    let until = if run.placement_seconds > 0 {
        format!(
            " (then until {} seconds at each placement reached, at most {})",
            run.placement_seconds,
            run.repetition_cap()
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        h,
        "<p class=\"meta\">scenario <code>{}</code> ({}) · {} iteration(s){until} of {} after {} warm-up per point, the median iteration by mean reported</p>",
        escape(&s.name),
        escape(&s.origin),
        run.iterations,
        crate::scenario::humantime::format(run.duration),
        crate::scenario::humantime::format(run.warmup)
    );
}

/// Workload `w`'s figures: throughput for streams, percentiles (and
/// their course over a sweep) for the others.
fn workload_figures(
    h: &mut String,
    s: &StoredScenario,
    w: &str,
    mine: &[&Row],
    cfg_index: &BTreeMap<&str, usize>,
    verdicts: &[Verdict],
) {
    let first = mine[0];
    let swept = first.sweep.map(|(p, _)| p);
    let measured: Vec<&&Row> = mine
        .iter()
        .filter(|r| r.latency_us.is_some() || r.ops_per_s > 0.0)
        .collect();
    if measured.is_empty() {
        h.push_str("<p class=\"meta\">nothing measured for this workload (see the table).</p>\n");
    } else if first.kind == WorkloadKind::Stream {
        let marks = verdicts::marks(verdicts, w, false);
        figure(
            h,
            &throughput_figure(s, w, &measured, swept, cfg_index, &marks),
        );
    } else {
        let marks = verdicts::marks(verdicts, w, true);
        latency_figures(h, s, w, &measured, swept, cfg_index, &marks);
    }
}

/// Round-trip percentiles per configuration; over a sweep, their course
/// and the bars at the first and the last value.
fn latency_figures(
    h: &mut String,
    s: &StoredScenario,
    w: &str,
    measured: &[&&Row],
    swept: Option<SweepParam>,
    cfg_index: &BTreeMap<&str, usize>,
    marks: &[figures::Mark],
) {
    let groups: Vec<figures::PercentileGroup> = measured
        .iter()
        .filter_map(|r| {
            let l = r.latency_us?;
            Some(figures::PercentileGroup {
                label: r.label(),
                us: [l[1], l[2], l[3], l[4], l[5]],
                ci_us: r.ci_us,
            })
        })
        .collect();
    let Some(p) = swept else {
        return figure(
            h,
            &figures::percentile_bars(
                &format!("{}: {w}, round-trip percentiles per configuration", s.name),
                &groups,
                marks,
            ),
        );
    };
    figure(
        h,
        &latency_sweep_figure(s, w, measured, p, cfg_index, marks),
    );
    // The bars at the first and the last value, as in the studies'
    // percentile figures.
    let values: Vec<u64> = measured
        .iter()
        .filter_map(|r| r.sweep.map(|x| x.1))
        .collect();
    let (lo, hi) = (values.iter().min().copied(), values.iter().max().copied());
    let ends: Vec<figures::PercentileGroup> = groups
        .into_iter()
        .zip(measured.iter())
        .filter(|(_, r)| r.sweep.map(|x| x.1) == lo || r.sweep.map(|x| x.1) == hi)
        .map(|(g, _)| g)
        .collect();
    figure(
        h,
        &figures::percentile_bars(
            &format!("{}: {w}, percentiles at the ends of the sweep", s.name),
            &ends,
            marks,
        ),
    );
}

fn figure(h: &mut String, svg: &str) {
    let _ = writeln!(h, "<figure>{svg}</figure>");
}

fn latency_sweep_figure(
    s: &StoredScenario,
    w: &str,
    rows: &[&&Row],
    p: SweepParam,
    cfg_index: &BTreeMap<&str, usize>,
    marks: &[figures::Mark],
) -> String {
    let mut series = Vec::new();
    for (cfg, ci) in by_config(rows, cfg_index) {
        for (pct, col, dashed) in [("p50", 1usize, false), ("p99", 3, true)] {
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.configuration == cfg)
                .filter_map(|r| Some((r.sweep?.1 as f64, r.latency_us?[col])))
                .collect();
            series.push(figures::Series {
                label: format!("{cfg} {pct}"),
                colour: ci,
                dashed,
                points,
            });
        }
    }
    figures::sweep_lines(
        &format!("{}: {w}, round trip against {}", s.name, p.as_str()),
        p.label(),
        "round trip (log scale)",
        true,
        &series,
        marks,
    )
}

fn throughput_figure(
    s: &StoredScenario,
    w: &str,
    rows: &[&&Row],
    swept: Option<SweepParam>,
    cfg_index: &BTreeMap<&str, usize>,
    marks: &[figures::Mark],
) -> String {
    match swept {
        Some(p) => {
            let series: Vec<figures::Series> = by_config(rows, cfg_index)
                .into_iter()
                .map(|(cfg, ci)| figures::Series {
                    label: cfg.to_owned(),
                    colour: ci,
                    dashed: false,
                    points: rows
                        .iter()
                        .filter(|r| r.configuration == cfg)
                        .filter_map(|r| Some((r.sweep?.1 as f64, r.gbps)))
                        .collect(),
                })
                .collect();
            figures::sweep_lines(
                &format!("{}: {w}, throughput against {}", s.name, p.as_str()),
                p.label(),
                "throughput (Gbit/s)",
                false,
                &series,
                marks,
            )
        }
        None => {
            let groups: Vec<(String, f64)> = rows.iter().map(|r| (r.label(), r.gbps)).collect();
            figures::bars(
                &format!("{}: {w}, throughput per configuration", s.name),
                "throughput (Gbit/s)",
                &groups,
                marks,
            )
        }
    }
}

/// Configurations present in `rows`, in run order, with their colour index.
fn by_config<'a>(rows: &[&&'a Row], cfg_index: &BTreeMap<&str, usize>) -> Vec<(&'a str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for r in rows {
        if !out.iter().any(|(c, _)| *c == r.configuration) {
            let i = cfg_index
                .get(r.configuration.as_str())
                .copied()
                .unwrap_or(out.len());
            out.push((r.configuration.as_str(), i));
        }
    }
    out.sort_by_key(|(_, i)| *i);
    out
}

fn table(h: &mut String, rows: &[&Row]) {
    let stream = rows.first().is_some_and(|r| r.kind == WorkloadKind::Stream);
    h.push_str("<table><tr><th class=\"l\">configuration</th><th class=\"l\">point</th><th class=\"l\">status</th>");
    if stream {
        h.push_str("<th>Gbit/s</th><th>packets/s</th><th>loss %</th>");
    } else {
        h.push_str("<th>trans/s</th><th>mean µs</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th><th>&gt;1 ms %</th><th>lost %</th>");
    }
    h.push_str("<th>iter.</th><th class=\"l\">contention / notes</th></tr>\n");
    if !stream {
        h.push_str("<caption>Under each percentile: its 95% confidence interval (order statistics, docs/statistics.md), or \"too few\" samples for one.</caption>\n");
    }
    for r in rows {
        let class = match r.status {
            Status::Skipped => " class=\"skipped\"",
            Status::Failed => " class=\"failed\"",
            _ => "",
        };
        let _ = write!(
            h,
            "<tr{class}><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>",
            escape(&r.configuration),
            r.sweep
                .map(|(p, v)| escape(&sweep_value(p, v)))
                .unwrap_or_default(),
            r.status.as_str()
        );
        if stream {
            let _ = write!(
                h,
                "<td>{:.2}</td><td>{:.0}</td><td>{:.3}</td>",
                r.gbps, r.ops_per_s, r.loss_pct
            );
        } else if let Some(l) = r.latency_us {
            let _ = write!(h, "<td>{:.0}</td>", r.ops_per_s);
            for (i, v) in l.into_iter().enumerate() {
                // Percentiles (columns 1 to 5) show their 95% interval
                // under the value, or that the samples were too few.
                let c = i.checked_sub(1).filter(|c| *c < 5);
                let ci = match c.map(|c| (r.ci_us[c], r.ci_too_few[c])) {
                    Some((Some((lo, hi)), _)) => {
                        format!(
                            "<br><span class=\"ci\">{}–{}</span>",
                            fmt_us(lo),
                            fmt_us(hi)
                        )
                    }
                    Some((None, true)) => "<br><span class=\"ci\">too few</span>".to_owned(),
                    _ => String::new(),
                };
                let _ = write!(h, "<td>{}{ci}</td>", fmt_us(v));
            }
            let _ = write!(
                h,
                "<td>{:.3}</td><td>{:.3}</td>",
                r.over_1ms_pct.unwrap_or(0.0),
                r.loss_pct
            );
        } else {
            h.push_str(&"<td></td>".repeat(10));
        }
        let notes: Vec<String> = r
            .contention
            .iter()
            .chain(r.error.iter())
            .chain(r.checks.iter())
            .cloned()
            .collect();
        let _ = writeln!(
            h,
            "<td>{}</td><td class=\"l\">{}</td></tr>",
            if r.iterations.0 > 0 {
                format!("{} of {}", r.iterations.1, r.iterations.0)
            } else {
                String::new()
            },
            escape(&notes.join("; "))
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_render_in_utc() {
        assert_eq!(super::ns_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            super::ns_time(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00 UTC"
        );
        assert_eq!(
            super::ns_time(1_700_000_000 * 1_000_000_000),
            "2023-11-14 22:13:20 UTC"
        );
    }

    #[test]
    fn escaping() {
        assert_eq!(
            super::escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
