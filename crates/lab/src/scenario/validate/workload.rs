//! Which workload fields apply to which workload kind, and their ranges,
//! for a workload as written and for each value a sweep gives it.
//! Separate from the scenario-wide checks because it is one rule table per
//! workload, applied again for every swept value.

use super::{Check, SESSIONS_MAX};
use crate::scenario::model::{Protocol, SweepParam, WorkloadKind, WorkloadSpec};
use crate::scenario::ScenarioError;

/// The most pods an attach or detach workload adds at once (each a
/// namespace, a port and a lease alive until the DELs).
const PODS_MAX: u32 = 1000;

/// Which fields apply to which kind, and their ranges; `sweep` is the swept
/// parameter and the value it takes.
pub(super) fn check_workload(
    c: &Check,
    at: &str,
    w: &WorkloadSpec,
    sweep: Option<(SweepParam, u64)>,
) -> Result<(), ScenarioError> {
    check_applies(c, at, w)?;
    check_ci(c, at, w)?;
    if let Some((p, _)) = sweep {
        match p {
            SweepParam::Burst | SweepParam::Rate if w.kind == WorkloadKind::Ping => {
                return not_for(c, at, w, p.as_str());
            }
            SweepParam::Size | SweepParam::Burst | SweepParam::Sessions | SweepParam::Rate
                if w.kind.is_pod_op() =>
            {
                return not_for(c, at, w, p.as_str());
            }
            _ => {}
        }
    }
    check_ranges(c, at, w, sweep)
}

fn not_for(c: &Check, at: &str, w: &WorkloadSpec, field: &str) -> Result<(), ScenarioError> {
    c.fail(
        format!("{at}: {field}"),
        format!("does not apply to {} workloads", w.kind.as_str()),
    )
}

/// The fields set apply to the workload's kind.
fn check_applies(c: &Check, at: &str, w: &WorkloadSpec) -> Result<(), ScenarioError> {
    use WorkloadKind::*;
    let set = |present: bool, field: &str, allowed: &[WorkloadKind]| -> Result<(), ScenarioError> {
        if present && !allowed.contains(&w.kind) {
            not_for(c, at, w, field)
        } else {
            Ok(())
        }
    };
    set(w.protocol.is_some(), "protocol", &[Rr, Stream])?;
    set(w.response_size.is_some(), "response_size", &[Rr])?;
    set(w.burst.is_some(), "burst", &[Rr, Stream])?;
    set(w.nodelay.is_some(), "nodelay", &[Rr])?;
    set(w.dirty.is_some(), "dirty", &[Rr])?;
    set(w.rate.is_some(), "rate", &[Rr, Stream])?;
    set(w.interval.is_some(), "interval", &[Ping])?;
    set(w.reverse.is_some(), "reverse", &[Stream])?;
    set(w.ci.is_some(), "ci", &[Rr, Ping])?;
    set(w.max_duration.is_some(), "max_duration", &[Rr, Ping])?;
    set(w.arrivals.is_some(), "arrivals", &[Rr])?;
    set(w.size.is_some(), "size", &[Rr, Stream, Ping])?;
    set(w.sessions.is_some(), "sessions", &[Rr, Stream, Ping])?;
    set(w.pods.is_some(), "pods", &[Attach, Detach])?;
    if w.arrivals.is_some() && w.rate.is_none() {
        return c.fail(
            format!("{at}: arrivals"),
            "applies to an open loop: set rate",
        );
    }
    Ok(())
}

/// The confidence goal (`ci`) and its ceiling (`max_duration`).
fn check_ci(c: &Check, at: &str, w: &WorkloadSpec) -> Result<(), ScenarioError> {
    if w.max_duration.is_some() && w.ci.is_none() {
        return c.fail(format!("{at}: max_duration"), "applies with ci only");
    }
    if let Some(ci) = &w.ci {
        let max = w
            .max_duration
            .unwrap_or(crate::scenario::plan::CI_MAX_DURATION);
        if let Err(e) = vnio_measure::goal::CiGoal::parse(ci, max) {
            return c.fail(
                format!("{at}: ci"),
                e.trim_start_matches("--ci ").to_owned(),
            );
        }
    }
    Ok(())
}

/// The ranges of the workload's numbers, a swept one at its value.
fn check_ranges(
    c: &Check,
    at: &str,
    w: &WorkloadSpec,
    sweep: Option<(SweepParam, u64)>,
) -> Result<(), ScenarioError> {
    use WorkloadKind::*;
    let value = |p: SweepParam, v: Option<u64>| -> Option<u64> {
        match sweep {
            Some((q, x)) if q == p => Some(x),
            _ => v,
        }
    };
    let proto = w.protocol.unwrap_or_default();
    if let Some(size) = value(SweepParam::Size, w.size.map(u64::from)) {
        let ok = match (w.kind, proto) {
            (Ping, _) => size <= 65_000,
            (_, Protocol::Udp) => (16..=65_507).contains(&size),
            (_, Protocol::Tcp) => (1..=16 << 20).contains(&size),
        };
        if !ok {
            return c.fail(
                format!("{at}: size"),
                format!("{size} bytes is out of range (UDP carries a 16-byte header, at most 65507; ping at most 65000)"),
            );
        }
    }
    if w.kind == Rr && proto == Protocol::Udp && w.response_size.is_some_and(|r| r < 16) {
        return c.fail(
            format!("{at}: response_size"),
            "UDP messages are at least 16 bytes",
        );
    }
    if value(SweepParam::Burst, w.burst.map(u64::from)) == Some(0) {
        return c.fail(format!("{at}: burst"), "must be at least 1");
    }
    if let Some(n) = value(SweepParam::Sessions, w.sessions.map(u64::from)) {
        if n == 0 || n > u64::from(SESSIONS_MAX) {
            return c.fail(
                format!("{at}: sessions"),
                format!("must be 1 to {SESSIONS_MAX}"),
            );
        }
    }
    if value(SweepParam::Rate, w.rate) == Some(0) {
        return c.fail(format!("{at}: rate"), "must be more than 0");
    }
    if w.kind == Stream && proto == Protocol::Tcp && value(SweepParam::Rate, w.rate).is_some() {
        return c.fail(
            format!("{at}: rate"),
            "paces UDP streams only; TCP streams run as fast as TCP allows",
        );
    }
    if w.pods.is_some_and(|n| n == 0 || n > PODS_MAX) {
        return c.fail(format!("{at}: pods"), format!("must be 1 to {PODS_MAX}"));
    }
    if w.interval.is_some_and(|i| i.is_zero()) {
        return c.fail(format!("{at}: interval"), "must be more than 0");
    }
    Ok(())
}
