//! CPU affinity: which CPUs the process may use, pinning the calling thread
//! to a set of them (sched_getaffinity / sched_setaffinity), and real-time
//! scheduling for a dedicated worker (sched_setscheduler).

use std::io;

/// The CPUs the calling thread may run on, ascending.
pub fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed, written by the kernel.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set for an index below its capacity.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &c in cpus {
        if c >= max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "CPU index too large",
            ));
        }
        // SAFETY: CPU_SET writes inside the set for an index below its capacity.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the calling thread under SCHED_FIFO at `priority` (1-99): it is
/// not time-sliced with ordinary threads on its CPU (the kernel's RT
/// throttling still leaves them a few percent).
pub fn realtime_current_thread(priority: u8) -> io::Result<()> {
    // SAFETY: sched_param holds only integers, for which all-zero is valid
    // (glibc has one field, musl more: a struct literal builds on one only).
    let mut p: libc::sched_param = unsafe { std::mem::zeroed() };
    p.sched_priority = i32::from(priority);
    // SAFETY: `p` is a valid sched_param for the call; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `cpu` is kept free of other tasks: isolated from the scheduler
/// (the kernel's `isolcpus=`, listed in /sys/devices/system/cpu/isolated),
/// or outside the CPUs init may use (a cpuset or affinity that moved the
/// system off it, as `cset shield` or the lab's `shield` knob
/// do). `None` when the kernel says neither.
pub fn is_isolated(cpu: usize) -> Option<bool> {
    let isolated = std::fs::read_to_string("/sys/devices/system/cpu/isolated").ok();
    if isolated
        .as_deref()
        .is_some_and(|l| in_cpu_list(l.trim(), cpu))
    {
        return Some(true);
    }
    let init = std::fs::read_to_string("/proc/1/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|l| l.trim().to_string())
        });
    match (isolated, init) {
        (_, Some(init)) => Some(!in_cpu_list(&init, cpu)),
        (Some(_), None) => Some(false),
        (None, None) => None,
    }
}

/// The kernel's real-time throttling, `(runtime, period)` in µs, when it
/// is on: SCHED_FIFO threads on a CPU are stopped once they have run
/// `runtime` in a `period` (950 ms in 1 s by default), whatever else waits.
pub fn rt_throttling() -> Option<(u64, u64)> {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/sys/kernel/{f}")).ok();
    let runtime: i64 = read("sched_rt_runtime_us")?.trim().parse().ok()?;
    let period: u64 = read("sched_rt_period_us")?.trim().parse().ok()?;
    (runtime >= 0 && (runtime as u64) < period).then_some((runtime as u64, period))
}

/// Whether `cpu` is in a kernel CPU list such as "1-3,6".
fn in_cpu_list(list: &str, cpu: usize) -> bool {
    list.split(',').filter(|r| !r.is_empty()).any(|r| {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        matches!((lo.parse::<usize>(), hi.parse::<usize>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&cpu))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_are_read_as_the_kernel_writes_them() {
        use super::in_cpu_list;
        assert!(in_cpu_list("1-3,6", 2) && in_cpu_list("1-3,6", 6));
        assert!(!in_cpu_list("1-3,6", 0) && !in_cpu_list("1-3,6", 4));
        assert!(!in_cpu_list("", 0));
    }

    use super::*;

    #[test]
    fn a_thread_pinned_to_one_allowed_cpu_reports_just_it() {
        let all = allowed().unwrap();
        assert!(!all.is_empty());
        let last = *all.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(&[last]).unwrap();
            assert_eq!(allowed().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
        assert_eq!(allowed().unwrap(), all, "other threads keep theirs");
    }
}
