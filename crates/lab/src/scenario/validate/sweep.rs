//! The `[sweep]` section: values to vary, contention to vary when the
//! parameter is one of its, and every workload checked again at every
//! value.

use super::workload::check_workload;
use super::Check;
use crate::scenario::model::{Scenario, Sweep, SweepParam};
use crate::scenario::ScenarioError;

/// Checks `[sweep]`.
pub(super) fn check_sweep(c: &Check, s: &Scenario, sw: &Sweep) -> Result<(), ScenarioError> {
    let at = format!("sweep ({})", sw.parameter.as_str());
    if sw.values.is_empty() {
        return c.fail(format!("{at}: values"), "is empty");
    }
    match sw.parameter {
        SweepParam::FloodRate if s.contention.flood.is_none() => {
            return c.fail(&at, "needs a [contention.flood] to vary")
        }
        SweepParam::Loads if s.contention.loads.is_none() => {
            return c.fail(&at, "needs a [contention.loads] to vary")
        }
        _ => {}
    }
    for &v in &sw.values {
        for w in &s.workloads {
            check_workload(
                c,
                &format!("{at}: value {v}: workload `{}`", w.name),
                w,
                Some((sw.parameter, v)),
            )?;
        }
        match sw.parameter {
            SweepParam::Loads if v > 64 => return c.fail(&at, "at most 64 loads"),
            SweepParam::FloodRate if v > 5_000_000 => {
                return c.fail(&at, "at most 5000000 packets/s")
            }
            _ => {}
        }
    }
    Ok(())
}
