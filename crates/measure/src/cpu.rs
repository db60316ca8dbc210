//! CPU accounting: what a test cost the process, its threads and the machine.

use serde::{Deserialize, Serialize};

use crate::sys;

/// Process CPU time consumed between two points.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuTime {
    pub user_ns: u64,
    pub sys_ns: u64,
}

impl CpuTime {
    pub fn process() -> CpuTime {
        let (user_ns, sys_ns) = sys::process_cpu_ns();
        CpuTime { user_ns, sys_ns }
    }

    pub fn thread() -> CpuTime {
        let (user_ns, sys_ns) = sys::thread_cpu_ns();
        CpuTime { user_ns, sys_ns }
    }

    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            sys_ns: self.sys_ns.saturating_sub(earlier.sys_ns),
        }
    }

    pub fn add(&mut self, other: CpuTime) {
        self.user_ns += other.user_ns;
        self.sys_ns += other.sys_ns;
    }

    pub fn total_ns(&self) -> u64 {
        self.user_ns + self.sys_ns
    }
}

/// Aggregate jiffies from the `cpu` line of /proc/stat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineTicks {
    pub busy: u64,
    pub idle: u64,
    pub steal: u64,
}

impl MachineTicks {
    pub fn read() -> Option<MachineTicks> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// Parses the first line of /proc/stat: user nice system idle iowait irq
    /// softirq steal [guest guest_nice]. Guest time is already in user.
    pub fn parse(stat: &str) -> Option<MachineTicks> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map_while(|f| f.parse().ok())
            .collect();
        if v.len() < 8 {
            return None;
        }
        Some(MachineTicks {
            busy: v[0] + v[1] + v[2] + v[5] + v[6],
            idle: v[3] + v[4],
            steal: v[7],
        })
    }
}

/// Machine-wide use of all CPUs over an interval, in percent of all CPUs.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MachineUse {
    pub busy_pct: f64,
    pub steal_pct: f64,
}

impl MachineUse {
    pub fn between(a: MachineTicks, b: MachineTicks) -> MachineUse {
        let busy = b.busy.saturating_sub(a.busy) as f64;
        let idle = b.idle.saturating_sub(a.idle) as f64;
        let steal = b.steal.saturating_sub(a.steal) as f64;
        let total = busy + idle + steal;
        if total == 0.0 {
            return MachineUse::default();
        }
        MachineUse {
            busy_pct: 100.0 * busy / total,
            steal_pct: 100.0 * steal / total,
        }
    }
}

/// The costs a run reports: CPU per transaction, per packet and per KB.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    pub cpu: CpuTime,
    /// CPU ns per transaction (rr, ping) or per packet (stream).
    pub ns_per_op: f64,
    /// CPU ns per KiB moved.
    pub ns_per_kib: f64,
}

impl Cost {
    pub fn new(cpu: CpuTime, ops: u64, bytes: u64) -> Cost {
        let per = |n: u64| {
            if n == 0 {
                0.0
            } else {
                cpu.total_ns() as f64 / n as f64
            }
        };
        Cost {
            cpu,
            ns_per_op: per(ops),
            ns_per_kib: per(bytes / 1024),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_parsing() {
        let s = "cpu  100 5 50 1000 10 1 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8\n";
        let t = MachineTicks::parse(s).unwrap();
        assert_eq!(
            t,
            MachineTicks {
                busy: 158,
                idle: 1010,
                steal: 7
            }
        );
        assert!(MachineTicks::parse("cpu  1 2 3").is_none());
        assert!(MachineTicks::parse("garbage").is_none());
    }

    #[test]
    fn machine_use_over_an_interval() {
        let a = MachineTicks {
            busy: 100,
            idle: 100,
            steal: 0,
        };
        let b = MachineTicks {
            busy: 150,
            idle: 140,
            steal: 10,
        };
        let u = MachineUse::between(a, b);
        assert_eq!(u.busy_pct, 50.0);
        assert_eq!(u.steal_pct, 10.0);
        assert_eq!(MachineUse::between(a, a), MachineUse::default());
    }

    #[test]
    fn cost_per_op_and_kib() {
        let c = Cost::new(
            CpuTime {
                user_ns: 600,
                sys_ns: 400,
            },
            10,
            4096,
        );
        assert_eq!(c.ns_per_op, 100.0);
        assert_eq!(c.ns_per_kib, 250.0);
        assert_eq!(Cost::new(CpuTime::default(), 0, 0).ns_per_op, 0.0);
    }

    #[test]
    fn thread_cpu_time_grows_with_work() {
        let a = CpuTime::thread();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(CpuTime::thread().since(a).total_ns() > 0);
    }
}
