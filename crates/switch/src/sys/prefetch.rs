//! Cache prefetch hints. The switch reads descriptors and frames the other
//! side has just written on another core: each first touch is a cache miss
//! of a hundred nanoseconds or more. Asking for the lines of the next frames
//! while the current one is being forwarded overlaps those misses instead
//! of taking them one after another.

/// Hints that the line holding `p` will be read soon.
#[inline(always)]
pub fn read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and has no visible
    // effect, whatever the address (the callers pass addresses inside
    // mapped guest memory anyway). SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Hints that the line holding `p` will be written soon (fetched for
/// ownership, where the CPU supports it).
#[inline(always)]
pub fn write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `read`: a hint that never faults and writes nothing.
    // PREFETCHW itself, not `_mm_prefetch::<_MM_HINT_ET0>`, which compiles
    // to a plain read prefetch unless the whole build targets `prfchw`; CPUs
    // without it (before Broadwell) execute the opcode as a NOP.
    unsafe {
        core::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
