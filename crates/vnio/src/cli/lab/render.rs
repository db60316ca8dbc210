//! What `vnio lab` prints: the catalogue and runs, a scenario's plan,
//! results and verdict tables, comparisons, and what `clean` did.

use std::path::Path;
use std::time::Duration;

use vnio_lab::findings::{self, RunFindings};
use vnio_lab::report::{self, Row};
use vnio_lab::runner::{self, Status};
use vnio_lab::scenario::{self, Capabilities};
use vnio_lab::session::{Cleaned, Comparison, Expanded, Listed};
use vnio_lab::store::RunRow;

/// The shipped scenarios and, when there is a store, its runs.
pub fn list(listed: &[Listed], db: &Path, runs: Option<&[RunRow]>) {
    println!(
        "{:<22} {:<9} {:>6} {:>8}  title",
        "scenario", "runnable", "points", "time"
    );
    for l in listed {
        println!(
            "{:<22} {:<9} {:>6} {:>7.0}m  {}",
            l.name,
            if l.runnable { "yes" } else { "no" },
            l.points,
            l.time.as_secs_f64() / 60.0,
            l.title
        );
    }
    let Some(runs) = runs else { return };
    println!();
    if runs.is_empty() {
        println!("no runs in {}", db.display());
        return;
    }
    println!("runs in {}:", db.display());
    println!(
        "{:>5} {:<22} {:<12} {:>6} {:<20} revision",
        "id", "scenario", "status", "points", "started"
    );
    for r in runs {
        println!(
            "{:>5} {:<22} {:<12} {:>6} {:<20} {}{}",
            r.id,
            r.name,
            r.status,
            r.points,
            started(r.started_unix_ns),
            r.revision,
            knobs_set(&r.knob_overrides)
        );
    }
}

/// `  knobs set: a = 1, b = "x"` after a run's line, or nothing: a run
/// with knobs overridden is not the scenario as written.
fn knobs_set(knobs: &[scenario::KnobOverride]) -> String {
    if knobs.is_empty() {
        return String::new();
    }
    let knobs: Vec<String> = knobs.iter().map(|k| k.to_string()).collect();
    format!("  knobs set: {}", knobs.join(", "))
}

fn started(ns: i64) -> String {
    let secs = (vnio_measure::clock::realtime_ns() as i64 - ns) / 1_000_000_000;
    match secs {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}

/// What a scenario or set measures: configurations, workloads, points,
/// time, findings, and what this build cannot run.
pub fn show(e: &Expanded) -> anyhow::Result<()> {
    let (source, members) = (&e.source, &e.members);
    let caps = Capabilities::current();
    println!("{} ({})", source.name, source.origin);
    println!("{}", e.title());
    let mut total = Duration::ZERO;
    for m in members {
        let (src, s) = (&m.source, &m.scenario);
        let plan = m.plan(&caps)?;
        println!();
        if members.len() > 1 {
            println!("== {}: {}", src.name, s.title);
        }
        println!("study: {}", s.maps_to);
        if let Some(c) = &s.cannot {
            println!("not reproducible here: {c}");
        }
        println!(
            "length: {} iteration(s) of {} after {} warm-up per point",
            plan.run.iterations,
            scenario::humantime::format(plan.run.duration),
            scenario::humantime::format(plan.run.warmup)
        );
        if plan.run.placement_seconds > 0 {
            println!(
                "then repeated until each placement reached has {} seconds of every probed point, at most {} iterations",
                plan.run.placement_seconds,
                plan.run.repetition_cap()
            );
        }
        for knob in m.knob_notes() {
            println!("knob {knob}");
        }
        let hosts: Vec<String> = s
            .hosts
            .iter()
            .map(|h| format!("{} ({})", h.name, h.kind.as_str()))
            .collect();
        println!("hosts: {}", hosts.join(", "));
        for c in &plan.configurations {
            let kinds: Vec<String> = c
                .hosts
                .iter()
                .map(|(h, k)| format!("{h}={}", k.as_str()))
                .collect();
            println!(
                "configuration {}: wire {}{}{}",
                c.name,
                c.wire.as_str(),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(", {}", kinds.join(", "))
                },
                c.description
                    .as_ref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
        }
        if let Some(sw) = &s.sweep {
            println!("sweep: {} = {:?}", sw.parameter.as_str(), sw.values);
        }
        let mut seen = Vec::new();
        for p in &plan.points {
            if !seen.contains(&p.workload.name) {
                seen.push(p.workload.name.clone());
                println!(
                    "workload {}: {} from {} to {}",
                    p.workload.name,
                    p.workload.describe(),
                    p.workload.from,
                    p.workload.to.join(",")
                );
            }
        }
        for f in &s.findings {
            println!("finding {}: {} ({})", f.id, f.claim, f.study);
        }
        let skipped = plan.points.iter().filter(|p| p.skip.is_some()).count();
        println!(
            "points: {} ({} skipped in this build), about {:.1} min",
            plan.points.len(),
            skipped,
            plan.estimate().as_secs_f64() / 60.0
        );
        for p in plan.points.iter().filter(|p| p.skip.is_some()) {
            println!(
                "  skipped: {} {}: {}",
                p.configuration,
                p.workload.name,
                p.skip.as_deref().unwrap_or("")
            );
        }
        for (cfg, why) in &plan.missing {
            println!(
                "NOT RUNNABLE in this build: configuration {cfg}: {}",
                why.join("; ")
            );
        }
        total += plan.estimate();
    }
    if members.len() > 1 {
        println!("\ntotal: about {:.1} min", total.as_secs_f64() / 60.0);
    }
    Ok(())
}

/// The results of one scenario as a terminal table (latency in µs).
pub fn text_table(name: &str, title: &str, points: &[runner::PointOutcome]) -> String {
    use std::fmt::Write;
    let mut s = format!("\n== {name}: {title}\n");
    let _ = writeln!(
        s,
        "{:<20} {:<10} {:<16} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}  notes",
        "configuration", "workload", "point", "trans/s", "p50", "p99", "p99.9", "p99.99", "Gbit/s"
    );
    for o in points {
        let r = Row::of(o);
        let point = r
            .sweep
            .map(|(p, v)| report::sweep_value(p, v))
            .unwrap_or_default();
        let l = r.latency_us.unwrap_or_default();
        let fmt = |v: f64| {
            if r.latency_us.is_some() {
                format!("{v:.1}")
            } else {
                "-".into()
            }
        };
        let mut notes: Vec<String> = Vec::new();
        if r.status != Status::Ok {
            notes.push(r.status.as_str().into());
        }
        notes.extend(r.contention.clone());
        notes.extend(r.error.clone());
        let _ = writeln!(
            s,
            "{:<20} {:<10} {:<16} {:>9.0} {:>8} {:>8} {:>8} {:>9} {:>9}  {}",
            r.configuration,
            r.workload,
            point,
            r.ops_per_s,
            fmt(l[1]),
            fmt(l[3]),
            fmt(l[4]),
            fmt(l[5]),
            if r.kind == scenario::WorkloadKind::Stream {
                format!("{:.2}", r.gbps)
            } else {
                "-".into()
            },
            notes.join("; ")
        );
    }
    s
}

/// The verdicts as a terminal table, the reason under each row.
pub fn findings_table(f: &RunFindings) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "run {}: {}{}\n",
        f.run,
        f.name,
        knobs_set(&f.knob_overrides)
    );
    if f.verdicts.is_empty() {
        s.push_str("no scenario of this run declares a finding\n");
    } else {
        let _ = writeln!(
            s,
            "{:<21} {:<27} {:<15} {:<22} {:<40} claim",
            "scenario", "finding", "verdict", "study", "this run [spread or ci]"
        );
    }
    for v in &f.verdicts {
        let _ = writeln!(
            s,
            "{:<21} {:<27} {:<15} {:<22} {:<40} {}\n{:<21}   why: {}",
            v.scenario,
            v.id,
            v.outcome.as_str(),
            findings::reference(v),
            findings::measured(v),
            v.claim,
            "",
            v.why
        );
        if let Some(at) = findings::by_placement(v) {
            let _ = writeln!(s, "{:<21}   by placement: {at}", "");
        }
    }
    if !f.without.is_empty() {
        let _ = writeln!(s, "without findings: {}", f.without.join(", "));
    }
    for u in &f.unreadable {
        let _ = writeln!(s, "{}: findings not judged: {}", u.scenario, u.error);
    }
    s
}

/// Changed verdicts, then the common points' p50 and p99 side by side.
pub fn compare(c: &Comparison) {
    for (run, knobs) in [c.a, c.b].iter().zip(&c.knob_overrides) {
        if !knobs.is_empty() {
            println!("run {run}:{}", knobs_set(knobs));
        }
    }
    if c.changed.is_empty() {
        println!("verdicts: no finding judged in both runs changed");
    } else {
        println!("verdicts that changed (run {} -> run {}):", c.a, c.b);
        for ch in &c.changed {
            println!(
                "  {:<21} {:<27} {} -> {}: {}",
                ch.scenario,
                ch.id,
                ch.a.outcome.as_str(),
                ch.b.outcome.as_str(),
                ch.b.why
            );
        }
    }
    println!(
        "{:<22} {:<10} {:<24} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}",
        "scenario", "workload", "point", "A p50", "B p50", "Δ", "A p99", "B p99", "Δ"
    );
    let mut significance = Vec::new();
    for p in &c.pairs {
        let (Some(la), Some(lb)) = (p.a.latency_us, p.b.latency_us) else {
            if p.a.kind == scenario::WorkloadKind::Stream {
                println!(
                    "{:<22} {:<10} {:<24} {:>8.2}G {:>8.2}G",
                    p.scenario,
                    p.a.workload,
                    p.a.label(),
                    p.a.gbps,
                    p.b.gbps
                );
            }
            continue;
        };
        let d = |x: f64, y: f64| format!("{:+.0}%", 100.0 * (y - x) / x.max(1e-9));
        println!(
            "{:<22} {:<10} {:<24} {:>9.1} {:>9.1} {:>7} {:>9.1} {:>9.1} {:>7}",
            p.scenario,
            p.a.workload,
            p.a.label(),
            la[1],
            lb[1],
            d(la[1], lb[1]),
            la[3],
            lb[3],
            d(la[3], lb[3])
        );
        for (name, ch) in ["p50", "p99"].iter().zip(&p.change) {
            if let Some(ch) = ch {
                significance.push(format!(
                    "  {} {} {name}: {}",
                    p.scenario,
                    p.a.label(),
                    ch.words()
                ));
            }
        }
    }
    if !significance.is_empty() {
        println!(
            "B against A, each percentile over all round trips of a point (95% interval of B / A):"
        );
        for line in significance {
            println!("{line}");
        }
    }
    println!(
        "{} common points (latency in µs); comparison: {}",
        c.pairs.len(),
        c.html.display()
    );
}

/// What was removed, what failed, and what was kept for whom, with what
/// to do about it.
pub fn clean(c: &Cleaned) {
    for m in &c.machines.removed {
        println!("removed {m}");
    }
    for why in &c.machines.failed {
        eprintln!("vnio lab: could not clean {why}");
    }
    let r = &c.report;
    for e in &r.removed {
        println!("removed {e}");
    }
    for (e, why) in &r.failed {
        eprintln!("vnio lab: could not remove {e}: {why}");
    }
    for (owner, entries) in c.kept_by_owner() {
        let what: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        let whose = owner
            .map(|o| format!("of the run still going on as {o}"))
            .unwrap_or_else(|| "with no owner recorded".into());
        println!("kept {} {whose}: {}", what.len(), what.join(", "));
    }
    if !r.kept.is_empty() {
        println!(
            "kept entries belong to lab runs that still run: stop them, or remove \
             everything with `vnio lab clean --all` once no lab run is going on"
        );
    }
    println!(
        "clean: {} removed, {} failed, {} kept ({})",
        r.removed.len(),
        r.failed.len(),
        r.kept.len(),
        c.journal.display()
    );
}
