//! Whether the process that owns journal entries still runs.
//!
//! A process killed with SIGKILL does not vanish at once: its threads are
//! torn down first (`/proc/PID/stat` shows the `PF_EXITING` flag, or a
//! SIGKILL still pending), then it stays a zombie (`Z`) until its parent
//! reaps it, which a parent that is busy, or not waiting at all, may do
//! much later. None of these will ever create or remove anything again, so
//! for the journal they are gone: their entries are orphans.

/// `PF_EXITING` in the task flags (field 9 of `/proc/PID/stat`): the
/// process is in `do_exit`.
const PF_EXITING: u64 = 0x4;
/// SIGKILL's bit in the pending-signal masks of `/proc/PID/status`.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// The owner of journal entries, as `vnio lab clean` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Its process id.
    pub pid: i32,
    /// Its command line (arguments joined by spaces), or `?` if unreadable.
    pub command: String,
}

impl Owner {
    /// The owner with pid `pid`, its command line read from `/proc`.
    pub fn of(pid: i32) -> Owner {
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .ok()
            .map(|raw| {
                let words: Vec<String> = raw
                    .split(|&b| b == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect();
                words.join(" ")
            })
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "?".into());
        Owner { pid, command }
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// True when process `pid` exists and is neither a zombie nor exiting (nor
/// about to: a SIGKILL pending). A process that is stopped still runs.
pub fn is_running(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The command name (field 2) is in parentheses and may contain spaces;
    // after it: state (field 3), ..., flags (field 9).
    let Some(after_name) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let state = fields.first().copied().unwrap_or("X");
    if matches!(state, "Z" | "X" | "x") {
        return false;
    }
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    if flags & PF_EXITING != 0 {
        return false;
    }
    !sigkill_pending(pid)
}

/// True when a SIGKILL waits for process `pid` (its main thread's or the
/// whole group's pending set).
fn sigkill_pending(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status.lines().any(|l| {
        let mask = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & SIGKILL_BIT != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_live_process_runs_and_is_named() {
        let me = std::process::id() as i32;
        assert!(is_running(me));
        assert!(is_running(1));
        let owner = Owner::of(me);
        assert_eq!(owner.pid, me);
        assert!(owner.command.contains("vnio_topo"), "{owner}");
    }

    #[test]
    fn a_missing_pid_does_not_run() {
        assert!(!is_running(-1));
        assert!(!is_running(0));
        // Above the kernel's largest pid_max.
        assert!(!is_running(99_999_999));
        assert_eq!(Owner::of(99_999_999).command, "?");
    }

    #[test]
    fn a_killed_child_is_gone_before_it_is_reaped() {
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(is_running(pid));
        child.kill().unwrap();
        // Not reaped yet: a zombie (or still exiting), never "running".
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while is_running(pid) {
            assert!(std::time::Instant::now() < deadline, "{pid} still runs");
            std::thread::yield_now();
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
    }
}
