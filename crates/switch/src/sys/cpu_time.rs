//! The calling thread's time on a CPU (CLOCK_THREAD_CPUTIME_ID): a system
//! call, so read only around rare work (a worker's control commands), to
//! tell the work's own time from the time the host ran something else.

/// The calling thread's CPU time in nanoseconds (0 if the clock fails).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call writes.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn spinning_takes_cpu_time() {
        let a = super::thread_cpu_ns();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::black_box(0);
        }
        assert!(super::thread_cpu_ns() > a);
    }
}
