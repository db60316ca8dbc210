//! Thread placement: pin to a CPU when asked, and report what was obtained.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::env::Placement;
use crate::sys;

/// Pins the calling thread to `cpu` (if any) and tightens its timer slack.
/// Returns the placement record, completed by [`finish`] when the thread ends.
pub fn enter(role: String, cpu: Option<usize>) -> Placement {
    sys::tight_timer_slack();
    let pinned = cpu.is_some_and(|c| {
        let mut set = CpuSet::new();
        set.set(c).is_ok() && sched_setaffinity(Pid::from_raw(0), &set).is_ok()
    });
    Placement {
        role,
        requested_cpu: cpu,
        pinned,
        ran_on: None,
    }
}

/// Records where the thread ran at the end of its work.
pub fn finish(mut p: Placement) -> Placement {
    p.ran_on = sys::current_cpu();
    p
}

/// The CPU for item `i` of a round-robin list; None when the list is empty.
pub fn pick(cpus: &[usize], i: usize) -> Option<usize> {
    if cpus.is_empty() {
        None
    } else {
        Some(cpus[i % cpus.len()])
    }
}
