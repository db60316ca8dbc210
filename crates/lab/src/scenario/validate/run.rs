//! The `[run]` section: duration, iterations and their ceiling, and the
//! placement seconds that only interleaved runs can add.

use super::Check;
use crate::scenario::model::RunSpec;
use crate::scenario::ScenarioError;

/// Checks `[run]`.
pub(super) fn check_run(c: &Check, run: &RunSpec) -> Result<(), ScenarioError> {
    if run.duration.is_zero() {
        return c.fail("run.duration", "must be more than 0");
    }
    if run.iterations == 0 || run.iterations > 100 {
        return c.fail("run.iterations", "must be 1 to 100");
    }
    if run.placement_seconds > 0 && !run.interleave {
        return c.fail(
            "run.placement_seconds",
            "needs interleave = true: the repetitions added must reach every configuration alike",
        );
    }
    if let Some(m) = run.max_iterations {
        if m < run.iterations || m > 100 {
            return c.fail("run.max_iterations", "must be from run.iterations to 100");
        }
    }
    Ok(())
}
