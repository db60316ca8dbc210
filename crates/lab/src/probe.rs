//! What this machine has installed: the anchor switches, the DPDK
//! endpoint program's build tools, the other instruments' programs, and
//! from them the [`Capabilities`] a plan is made with.
//!
//! Below the testbed and everything that runs: the scenario's plan takes
//! the capabilities as data (so a plan can be made for another machine's
//! capabilities, as the tests do), and the parts that run ask here before
//! they start a program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::scenario::capabilities::{not_installed, OVS_VSWITCHD_DPDK, TESTPMD};
use crate::scenario::{Capabilities, Instrument, WireKind};

impl Capabilities {
    /// This build, on this machine.
    pub fn current() -> Capabilities {
        Capabilities {
            vm: true,
            poll_mode_client: true,
            latency_high: true,
            direct: true,
            ovs_dpdk: anchor_switch(WireKind::OvsDpdk).is_none(),
            testpmd: anchor_switch(WireKind::Testpmd).is_none(),
            dpdk_endpoints: dpdk_endpoints().is_none(),
            why_no_dpdk_endpoints: dpdk_endpoints(),
            sockperf: instrument(Instrument::Sockperf),
            iperf3: instrument(Instrument::Iperf3),
        }
    }
}

/// Why an anchor switch cannot run on this machine (None: it can).
pub fn anchor_switch(kind: WireKind) -> Option<String> {
    let installed = match kind {
        WireKind::Testpmd => which(TESTPMD).is_some(),
        WireKind::OvsDpdk => Path::new(OVS_VSWITCHD_DPDK).exists(),
        _ => true,
    };
    (!installed).then(|| not_installed(kind))
}

/// Whether `tool`'s program is installed (vnio's own always is).
pub fn instrument(tool: Instrument) -> bool {
    match tool.program() {
        Some(prog) => which(prog).is_some(),
        None => true,
    }
}

/// Why the DPDK endpoint program cannot be built or run here (None: it
/// can). Asked once per process.
pub fn dpdk_endpoints() -> Option<&'static str> {
    static WHY: OnceLock<Option<&'static str>> = OnceLock::new();
    *WHY.get_or_init(find_dpdk_endpoints)
}

fn find_dpdk_endpoints() -> Option<&'static str> {
    match pkg_config(&["--exists", "libdpdk"]) {
        Err(_) => {
            return Some(
                "the DPDK endpoints: pkg-config is not installed (apt install pkg-config dpdk-dev)",
            )
        }
        Ok(out) if !out.status.success() => {
            return Some(
                "the DPDK endpoints: libdpdk's development files are not installed (apt install dpdk-dev)",
            )
        }
        Ok(_) => {}
    }
    if Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        return Some("the DPDK endpoints: no C compiler `cc` (apt install gcc)");
    }
    if !Path::new("/proc/sys/vm/nr_hugepages").exists() {
        return Some("the DPDK endpoints: this kernel has no hugepages");
    }
    None
}

/// `pkg-config` with `args`.
pub(crate) fn pkg_config(args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("pkg-config")
        .args(args)
        .stdin(Stdio::null())
        .output()
}

/// `program` on `$PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
