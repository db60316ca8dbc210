//! Time points: CLOCK_MONOTONIC through the vDSO for intervals, CLOCK_REALTIME
//! for instants that two processes agree on and for kernel timestamps.

use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, clock_nanosleep, ClockId, ClockNanosleepFlags};

/// Nanoseconds on CLOCK_MONOTONIC.
#[inline]
pub fn now_ns() -> u64 {
    ts_ns(clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap_or(TimeSpec::new(0, 0)))
}

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME.
#[inline]
pub fn realtime_ns() -> u64 {
    ts_ns(clock_gettime(ClockId::CLOCK_REALTIME).unwrap_or(TimeSpec::new(0, 0)))
}

#[inline]
pub fn ts_ns(ts: TimeSpec) -> u64 {
    (ts.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec() as u64)
}

fn ns_ts(ns: u64) -> TimeSpec {
    TimeSpec::new((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64)
}

/// Below this distance to a deadline we spin instead of sleeping: a sleeping
/// thread wakes tens of microseconds late, a spinning one on time.
pub const SPIN_NS: u64 = 50_000;

/// Waits until CLOCK_MONOTONIC reaches `deadline_ns`: sleeps to just before
/// it on an absolute timer (no drift), then spins the rest.
pub fn wait_until(deadline_ns: u64) {
    let now = now_ns();
    if deadline_ns > now + SPIN_NS {
        let _ = clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &ns_ts(deadline_ns - SPIN_NS),
        );
    }
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Sleeps until CLOCK_REALTIME reaches `unix_ns`: how sessions in several
/// processes start at one agreed instant.
pub fn sleep_until_realtime(unix_ns: u64) {
    let _ = clock_nanosleep(
        ClockId::CLOCK_REALTIME,
        ClockNanosleepFlags::TIMER_ABSTIME,
        &ns_ts(unix_ns),
    );
}
