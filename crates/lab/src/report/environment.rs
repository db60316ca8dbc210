//! The report's environment section: the machine, the build, the
//! scenario's overrides; and the notes that say a run set knobs, so its
//! results never pass for the scenario as written.

use super::*;
use crate::scenario::{LabFile, Overrides};
use crate::store::StoredRun;
use std::fmt::Write;

pub(super) fn environment(h: &mut String, run: &StoredRun) {
    let e = &run.environment;
    h.push_str("<h2>Environment</h2><table>\n");
    let rows: Vec<(&str, String)> = vec![
        ("host", e.hostname.clone()),
        ("kernel", e.kernel.clone()),
        (
            "CPU",
            format!(
                "{} × {}{}",
                e.cpus,
                e.cpu_model,
                if e.hypervisor {
                    " (virtual machine)"
                } else {
                    ""
                }
            ),
        ),
        (
            "clocksource",
            format!(
                "{} (available: {})",
                e.clocksource, e.clocksources_available
            ),
        ),
        (
            "net.core.busy_read / busy_poll",
            format!("{} / {} µs", opt(e.busy_read_us), opt(e.busy_poll_us)),
        ),
        (
            "load average before",
            format!(
                "{:.2} {:.2} {:.2}",
                e.loadavg_before[0], e.loadavg_before[1], e.loadavg_before[2]
            ),
        ),
        (
            "machine before",
            format!(
                "{:.0}% busy, {:.1}% steal",
                e.machine_before.busy_pct, e.machine_before.steal_pct
            ),
        ),
        ("vnio", format!("{} ({})", e.vnio_version, run.row.revision)),
        (
            "guests",
            match &run.guests {
                Some(g) => format!(
                    "{} ({}); {}; image {}, kernel {}",
                    g.accel.to_uppercase(),
                    g.why,
                    g.qemu,
                    g.image,
                    g.kernel
                ),
                None => "none (no VM host in this run)".into(),
            },
        ),
        ("overrides", describe_overrides(&run.overrides)),
    ];
    for (k, v) in rows {
        let _ = writeln!(
            h,
            "<tr><th class=\"l\">{k}</th><td class=\"l\">{}</td></tr>",
            escape(&v)
        );
    }
    h.push_str("</table>\n");
    let mut warnings = e.warnings.clone();
    if run.guests.as_ref().is_some_and(|g| g.accel == "tcg") {
        warnings.push(
            "guests ran under TCG (QEMU's binary translator, no hardware virtualisation): \
             their latencies are inflated and their clocks stretch; compare configurations \
             with each other, not with the studies' absolute figures"
                .into(),
        );
    }
    if !warnings.is_empty() {
        h.push_str("<ul class=\"error\">");
        for w in &warnings {
            let _ = write!(h, "<li>{}</li>", escape(w));
        }
        h.push_str("</ul>\n");
    }
}

pub(super) fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}

pub(super) fn describe_overrides(o: &crate::scenario::Overrides) -> String {
    let mut parts = Vec::new();
    if o.quick {
        parts.push("--quick".to_owned());
    }
    if let Some(d) = o.duration {
        parts.push(format!(
            "duration {}",
            crate::scenario::humantime::format(d)
        ));
    }
    if let Some(d) = o.warmup {
        parts.push(format!("warm-up {}", crate::scenario::humantime::format(d)));
    }
    if let Some(i) = o.iterations {
        parts.push(format!("{i} iteration(s)"));
    }
    if let Some(n) = o.placement_seconds {
        parts.push(format!("{n} seconds at each placement"));
    }
    if let Some(m) = o.max_iterations {
        parts.push(format!("at most {m} iteration(s)"));
    }
    if !o.configurations.is_empty() {
        parts.push(format!("configurations {}", o.configurations.join(", ")));
    }
    if !o.knobs.is_empty() {
        let knobs: Vec<String> = o.knobs.iter().map(|k| k.to_string()).collect();
        parts.push(format!("knobs {}", knobs.join(", ")));
    }
    if parts.is_empty() {
        "none (the scenario as written)".into()
    } else {
        parts.join(", ")
    }
}

/// Under the run's heading: the knobs the run set, if any.
pub(super) fn knobs_banner(h: &mut String, run: &StoredRun) {
    if run.overrides.knobs.is_empty() {
        return;
    }
    let knobs: Vec<String> = run.overrides.knobs.iter().map(|k| k.to_string()).collect();
    let _ = writeln!(
        h,
        "<p class=\"overridden\"><b>Knobs overridden for this run</b> (<code>--knob</code>): {}. \
         These results are not the scenario as written.</p>",
        escape(&knobs.join(", "))
    );
}

/// At the top of a scenario's section: each knob the run set and what the
/// scenario's stored text said there.
pub(super) fn scenario_knobs(h: &mut String, s: &StoredScenario, o: &Overrides) {
    if o.knobs.is_empty() {
        return;
    }
    let said: Vec<String> = match crate::scenario::parse(&s.origin, &s.text) {
        Ok(LabFile::Scenario(file)) => o.knobs.iter().map(|k| k.describe(&file, o)).collect(),
        _ => o.knobs.iter().map(|k| format!("{k} (--knob)")).collect(),
    };
    let _ = writeln!(
        h,
        "<p class=\"overridden\">Knobs set for this run: {}; the scenario file below is as written.</p>",
        escape(&said.join("; "))
    );
}
