//! The environment recorded with every result: a latency figure means little
//! without the kernel, the clock, where threads ran and how busy the machine was.

use serde::{Deserialize, Serialize};

use crate::cpu::{MachineTicks, MachineUse};

/// Where one thread of the test was asked to run and where it did run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Placement {
    /// "client session 3", "agent session 0", ...
    pub role: String,
    pub requested_cpu: Option<usize>,
    /// Whether pinning to the requested CPU succeeded.
    pub pinned: bool,
    /// CPU observed at the end of the thread's run.
    pub ran_on: Option<usize>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    pub vnio_version: String,
    pub hostname: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    /// Running under a hypervisor (the guest-visible CPUID flag).
    pub hypervisor: bool,
    pub clocksource: String,
    pub clocksources_available: String,
    /// net.core.busy_read and net.core.busy_poll, in microseconds.
    pub busy_read_us: Option<u64>,
    pub busy_poll_us: Option<u64>,
    pub loadavg_before: [f64; 3],
    /// Machine use sampled just before the run.
    pub machine_before: MachineUse,
    /// Machine use over the measured window.
    pub machine_during: MachineUse,
    pub placement: Vec<Placement>,
    pub warnings: Vec<String>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Environment {
    /// Reads the static facts and samples machine use for `sample_ms`.
    pub fn capture(sample_ms: u64) -> Environment {
        let uname = nix::sys::utsname::uname().ok();
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let hypervisor = cpuinfo
            .lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
        let loadavg = read("/proc/loadavg").unwrap_or_default();
        let mut la = loadavg
            .split_whitespace()
            .map(|f| f.parse::<f64>().unwrap_or(0.0));
        let loadavg_before = [
            la.next().unwrap_or(0.0),
            la.next().unwrap_or(0.0),
            la.next().unwrap_or(0.0),
        ];
        let t0 = MachineTicks::read();
        std::thread::sleep(std::time::Duration::from_millis(sample_ms));
        let machine_before = match (t0, MachineTicks::read()) {
            (Some(a), Some(b)) => MachineUse::between(a, b),
            _ => MachineUse::default(),
        };
        let mut env = Environment {
            vnio_version: env!("CARGO_PKG_VERSION").to_string(),
            hostname: uname
                .as_ref()
                .map(|u| u.nodename().to_string_lossy().into_owned())
                .unwrap_or_default(),
            kernel: uname
                .as_ref()
                .map(|u| {
                    format!(
                        "{} {}",
                        u.release().to_string_lossy(),
                        u.version().to_string_lossy()
                    )
                })
                .unwrap_or_default(),
            cpu_model,
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            hypervisor,
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
                .unwrap_or_default(),
            clocksources_available: read(
                "/sys/devices/system/clocksource/clocksource0/available_clocksource",
            )
            .unwrap_or_default(),
            busy_read_us: read("/proc/sys/net/core/busy_read").and_then(|s| s.parse().ok()),
            busy_poll_us: read("/proc/sys/net/core/busy_poll").and_then(|s| s.parse().ok()),
            loadavg_before,
            machine_before,
            ..Default::default()
        };
        env.check_quiet();
        env
    }

    /// Warns when the machine was visibly busy before the run.
    fn check_quiet(&mut self) {
        if self.machine_before.busy_pct > 25.0 {
            self.warnings.push(format!(
                "machine was {:.0}% busy before the run: other load distorts latency",
                self.machine_before.busy_pct
            ));
        }
        if self.machine_before.steal_pct > 2.0 {
            self.warnings.push(format!(
                "hypervisor stole {:.1}% of CPU time before the run",
                self.machine_before.steal_pct
            ));
        }
        if self.loadavg_before[0] > self.cpus as f64 * 0.5 {
            self.warnings.push(format!(
                "load average {:.2} on {} CPUs before the run",
                self.loadavg_before[0], self.cpus
            ));
        }
        if self.clocksource != "tsc" && !self.clocksource.is_empty() {
            self.warnings.push(format!(
                "clocksource is {}: reading time may cost a system call (tsc is cheapest)",
                self.clocksource
            ));
        }
    }

    /// Records the machine use of the measured window and warns about it.
    pub fn set_during(&mut self, during: MachineUse, own_threads: usize) {
        self.machine_during = during;
        if during.steal_pct > 2.0 {
            self.warnings.push(format!(
                "hypervisor stole {:.1}% of CPU time during the run",
                during.steal_pct
            ));
        }
        // What our own busy threads explain is not a warning; the rest is.
        let own_pct = 100.0 * own_threads as f64 / self.cpus.max(1) as f64;
        let excess = during.busy_pct - own_pct;
        if excess > 25.0 {
            self.warnings.push(format!(
                "machine was {:.0}% busy during the run, {:.0}% more than this test's threads explain",
                during.busy_pct, excess
            ));
        }
    }
}
