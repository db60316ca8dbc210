//! A cheap monotonic cycle counter for the workers' own accounting: the
//! time-stamp counter on x86-64 (invariant on every CPU a KVM host runs
//! today, cheap to read, no system call), nanoseconds from the
//! monotonic clock elsewhere. Readers convert counts to time with the rate
//! measured between two readings of both ([`rate_per_ns`]), not with a
//! nominal frequency.

use std::sync::OnceLock;
use std::time::Instant;

/// The counter now.
#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // Safe to call since Rust 1.87; `unsafe` for the older compilers we support.
        #[allow(unused_unsafe)]
        // SAFETY: RDTSC reads a register; it has no memory effects and is
        // available on every x86-64 CPU.
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Counts per nanosecond between two paired readings (counter, clock).
pub fn rate_per_ns(from: (u64, Instant), to: (u64, Instant)) -> Option<f64> {
    let ns = to.1.duration_since(from.1).as_nanos() as f64;
    let counts = to.0.wrapping_sub(from.0) as f64;
    (ns > 0.0 && counts > 0.0).then(|| counts / ns)
}

/// A reading of both, for [`rate_per_ns`].
pub fn pair() -> (u64, Instant) {
    (now(), Instant::now())
}

/// The rate measured once over a few milliseconds (for short spans, where
/// a rate from the spans' own ends would be too coarse).
pub fn calibrated_rate() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let a = pair();
        std::thread::sleep(std::time::Duration::from_millis(5));
        rate_per_ns(a, pair()).unwrap_or(1.0)
    })
}
