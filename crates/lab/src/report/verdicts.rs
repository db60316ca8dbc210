//! The verdicts in the report: the table the report opens with, the marks
//! the figures carry, and the verdicts that changed between two runs.

use std::fmt::Write;

use super::{escape, figures::Mark};
use crate::findings::{self, Change, Outcome, RunFindings, Verdict};

/// The opening table: one row per finding.
pub(super) fn table(h: &mut String, f: &RunFindings) {
    h.push_str("<section id=\"findings\"><h2>The studies' findings: verdicts of this run</h2>\n");
    if f.verdicts.is_empty() {
        h.push_str("<p class=\"meta\">No scenario of this run declares a finding (runs stored before findings existed have none).</p>\n");
    } else {
        let count = |o: Outcome| f.verdicts.iter().filter(|v| v.outcome == o).count();
        let _ = writeln!(
            h,
            "<p class=\"meta\">{} reproduced, {} not reproduced, {} inconclusive. A verdict needs the whole spread of the run (every iteration, or every second of a single one) on one side of the study's threshold; see docs/lab.md.</p>",
            count(Outcome::Reproduced),
            count(Outcome::NotReproduced),
            count(Outcome::Inconclusive)
        );
        h.push_str("<table class=\"findings\"><tr><th class=\"l\">scenario</th><th class=\"l\">finding</th><th class=\"l\">the study</th><th>study's number</th><th>this run [spread or 95% interval]</th><th class=\"l\">verdict</th><th class=\"l\">why</th></tr>\n");
        for v in &f.verdicts {
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td class=\"l\"><a href=\"#s-{}\">{}</a></td><td class=\"l\"><b>{}</b></td><td class=\"l\">{}<br><small class=\"meta\">{}</small></td><td>{}</td><td>{}</td><td class=\"l\"><b>{}</b></td><td class=\"l\">{}</td></tr>",
                css(v.outcome),
                escape(&v.scenario),
                escape(&v.scenario),
                escape(&v.id),
                escape(&v.claim),
                escape(&v.study),
                escape(&findings::reference(v)),
                measured_cell(v),
                v.outcome.as_str(),
                escape(&v.why)
            );
        }
        h.push_str("</table>\n");
    }
    if !f.without.is_empty() {
        let _ = writeln!(
            h,
            "<p class=\"meta\">Scenarios without findings: {}.</p>",
            escape(&f.without.join(", "))
        );
    }
    for u in &f.unreadable {
        let _ = writeln!(
            h,
            "<p class=\"error\">{}: findings not judged: {}</p>",
            escape(&u.scenario),
            escape(&u.error)
        );
    }
    h.push_str("</section>\n");
}

/// This run's number, and under it the ratio at each placement when the
/// points carry the line probe's round trips.
fn measured_cell(v: &Verdict) -> String {
    let all = escape(&findings::measured(v));
    match findings::by_placement(v) {
        Some(at) => format!(
            "{all}<br><small class=\"meta\">by placement: {}</small>",
            escape(&at)
        ),
        None => all,
    }
}

fn css(o: Outcome) -> &'static str {
    match o {
        Outcome::Reproduced => "reproduced",
        Outcome::NotReproduced => "not-reproduced",
        Outcome::Inconclusive => "inconclusive",
    }
}

/// The study's numbers to draw on the figure of `workload` in `scenario`:
/// round-trip statistics on latency figures (`latency`), throughput on the
/// others.
pub(super) fn marks(verdicts: &[Verdict], workload: &str, latency: bool) -> Vec<Mark> {
    verdicts
        .iter()
        .filter(|v| v.workload == workload)
        .filter(|v| {
            if latency {
                v.statistic.is_latency()
            } else {
                v.statistic == findings::Statistic::Gbps
            }
        })
        .flat_map(|v| {
            let m = v.mark.as_ref();
            m.into_iter().flat_map(move |m| {
                m.values.iter().enumerate().map(move |(i, y)| Mark {
                    label: if i == 0 {
                        format!(
                            "study: {} ({} {})",
                            v.id,
                            v.subject.point,
                            v.statistic.as_str()
                        )
                    } else {
                        String::new()
                    },
                    y: *y,
                })
            })
        })
        .collect()
}

/// The verdicts that differ between two runs.
pub(super) fn changes(h: &mut String, changes: &[Change], names: [&str; 2]) {
    h.push_str("<h2>Verdicts that changed</h2>\n");
    if changes.is_empty() {
        h.push_str("<p class=\"meta\">No finding judged in both runs changed its verdict.</p>\n");
        return;
    }
    let _ = writeln!(
        h,
        "<table><tr><th class=\"l\">scenario</th><th class=\"l\">finding</th><th class=\"l\">{0}</th><th>{0} value</th><th class=\"l\">{1}</th><th>{1} value</th><th class=\"l\">why ({1})</th></tr>",
        escape(names[0]),
        escape(names[1])
    );
    for c in changes {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\"><b>{}</b><br><small class=\"meta\">{}</small></td><td class=\"l {}\">{}</td><td>{}</td><td class=\"l {}\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            escape(&c.scenario),
            escape(&c.id),
            escape(&c.claim),
            css(c.a.outcome),
            c.a.outcome.as_str(),
            escape(&findings::measured(&c.a)),
            css(c.b.outcome),
            c.b.outcome.as_str(),
            escape(&findings::measured(&c.b)),
            escape(&c.b.why)
        );
    }
    h.push_str("</table>\n");
}
