//! The lab's DPDK endpoint program (`crates/lab/dpdk/pair.c`, knob
//! `endpoints = "dpdk"`): its source is part of the lab binary, and it is
//! compiled against the machine's DPDK the first time a configuration
//! needs it, into the lab's cache (keyed by the source, DPDK's flags and
//! the compiler, so a change to any of them builds it again).
//!
//! Built by the lab rather than by cargo: a build of vnio must not need
//! DPDK, and a machine without DPDK skips these configurations with the
//! reason ([`missing`]), as it skips an anchor switch it lacks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The program's source.
const SOURCE: &str = include_str!("../../dpdk/pair.c");
pub use crate::scenario::capabilities::DPDK_ENDPOINTS_NOT_INSTALLED as NOT_INSTALLED;

/// Why the program cannot be built or run here (None: it can). Asked once
/// per process ([`crate::probe::dpdk_endpoints`]).
pub fn missing() -> Option<String> {
    crate::probe::dpdk_endpoints().map(str::to_owned)
}

/// The program, built when missing from `cache` (the lab's cache root
/// when None). One line on failure, with the compiler's last words.
pub fn build(cache: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(why) = missing() {
        return Err(why);
    }
    let flags = crate::probe::pkg_config(&["--cflags", "--libs", "libdpdk"])
        .map_err(|e| format!("pkg-config: {e}"))?;
    let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let cc = Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    let key = fnv1a(&[SOURCE, &flags, &cc]);
    let dir = cache
        .map(Path::to_path_buf)
        .unwrap_or_else(vnio_vm::image::cache_root)
        .join("dpdk-pair");
    let binary = dir.join(format!("pair-{key:016x}"));
    if binary.is_file() {
        return Ok(binary);
    }
    let io = |what: &str, e: std::io::Error| format!("{what} {}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(|e| io("creating", e))?;
    let source = dir.join(format!("pair-{key:016x}.c"));
    std::fs::write(&source, SOURCE).map_err(|e| io("writing the program's source in", e))?;
    // Built under a name of its own, then renamed: two runs building at
    // once never run a half-written binary.
    let partial = dir.join(format!(".pair-{key:016x}.{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-O3", "-Wall", "-o"])
        .arg(&partial)
        .arg(&source)
        .args(flags.split_whitespace())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running cc: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        let text = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        return Err(format!(
            "building the DPDK endpoint program {}: {}",
            source.display(),
            lines[lines.len().saturating_sub(2)..].join(" | ")
        ));
    }
    std::fs::rename(&partial, &binary).map_err(|e| io("installing the program in", e))?;
    Ok(binary)
}

/// FNV-1a over `parts`: stable across builds and machines (std's hasher
/// is not), enough to tell versions of a program apart.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}
