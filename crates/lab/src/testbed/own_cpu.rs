//! The testbed's own CPU (knob `testbed_cpu`): what the vnio switch, the
//! poll-mode endpoints and the guests' QEMU spend while a workload runs,
//! the figure a switch's policy trades against latency (coalescing off:
//! a notification per frame; latency-high: a core busy-polling).
//!
//! Sampled from outside, in nanoseconds on CPU: the sum over the process's
//! threads of `/proc/PID/task/TID/schedstat`'s first field (the scheduler's
//! own run time, not the 10 ms ticks of `/proc/PID/stat`). Every thread
//! these processes run lives as long as they do, so none is lost between
//! two samples.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use vnio_measure::result::{Document, Iteration, ProcessCost};

use crate::scenario::RunSpec;

use super::Testbed;

impl Testbed {
    /// The processes of the testbed itself, named: the vnio switch, the
    /// poll-mode endpoints and the guests' QEMU.
    pub fn own_processes(&self) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        if let Some(s) = &self.switch {
            out.push(("switch".to_string(), s.id()));
        }
        for h in &self.hosts {
            if let Some(e) = &h.endpoint {
                out.push((format!("endpoint {}", h.name), e.id()));
            }
            if let Some(g) = &h.guest {
                out.push((format!("qemu {}", h.name), g.pid()));
            }
        }
        out
    }
}

/// CPU time of every testbed process at one instant.
#[derive(Debug, Clone)]
pub struct CpuSample {
    at: Instant,
    /// (name, ns on CPU; None when the process is gone).
    procs: Vec<(String, Option<u64>)>,
}

impl CpuSample {
    /// Sample `procs` (from [`Testbed::own_processes`]) now.
    pub fn take(procs: &[(String, u32)]) -> CpuSample {
        CpuSample {
            at: Instant::now(),
            procs: procs
                .iter()
                .map(|(name, pid)| (name.clone(), process_ns(*pid)))
                .collect(),
        }
    }

    /// What each process spent from `self` to `later`, against what
    /// iteration `it` measured (its operations and bytes).
    pub fn costs(&self, later: &CpuSample, it: &Iteration) -> Vec<ProcessCost> {
        let wall_ns = later.at.duration_since(self.at).as_nanos().max(1) as f64;
        let per = |cpu: u64, n: u64| if n == 0 { 0.0 } else { cpu as f64 / n as f64 };
        self.procs
            .iter()
            .zip(&later.procs)
            .filter_map(|((name, a), (_, b))| {
                let cpu_ns = (*b)?.saturating_sub((*a)?);
                Some(ProcessCost {
                    name: name.clone(),
                    cpu_ns,
                    busy_pct: cpu_ns as f64 * 100.0 / wall_ns,
                    ns_per_op: per(cpu_ns, it.merged.ops),
                    ns_per_kib: per(cpu_ns, it.merged.bytes / 1024),
                })
            })
            .collect()
    }
}

/// Nanoseconds on CPU of every thread of `pid` (None: it is gone).
fn process_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0u64;
    for t in tasks.flatten() {
        let text = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        sum += text
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(sum)
}

/// Measure a point one iteration at a time, sampling the testbed's own
/// processes around each, and merge the iterations into one document (the
/// median chosen as usual). `measure` runs one iteration of `run`. A
/// failure after some iterations keeps them, with the error.
pub fn per_iteration(
    bed: &Testbed,
    run: &RunSpec,
    stop: &AtomicBool,
    mut measure: impl FnMut(&RunSpec) -> Result<Document, String>,
) -> Result<Document, String> {
    let procs = bed.own_processes();
    let mut one = run.clone();
    one.iterations = 1;
    let mut docs: Vec<Document> = Vec::new();
    for _ in 0..run.iterations.max(1) {
        if stop.load(Ordering::Relaxed) && !docs.is_empty() {
            break;
        }
        let before = CpuSample::take(&procs);
        let mut doc = match measure(&one) {
            Ok(d) => d,
            Err(e) if docs.is_empty() => return Err(e),
            Err(e) => {
                docs[0].errors.push(e);
                break;
            }
        };
        let after = CpuSample::take(&procs);
        for it in &mut doc.iterations {
            it.testbed_cost = before.costs(&after, it);
        }
        let interrupted = doc.interrupted;
        docs.push(doc);
        if interrupted {
            break;
        }
    }
    Ok(crate::outcome::merge_documents(docs).expect("one document at least"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_cpu_grows_with_work() {
        let me = vec![("self".to_string(), std::process::id())];
        let a = CpuSample::take(&me);
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 50 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let b = CpuSample::take(&me);
        let mut it = Iteration::default();
        it.merged.ops = 1000;
        let c = a.costs(&b, &it);
        assert_eq!(c.len(), 1);
        assert!(c[0].cpu_ns >= 20_000_000, "{:?}", c[0]);
        assert!(
            c[0].busy_pct > 20.0 && c[0].busy_pct <= 100.0 * 64.0,
            "{:?}",
            c[0]
        );
        assert!((c[0].ns_per_op - c[0].cpu_ns as f64 / 1000.0).abs() < 1e-6);
        // A process that is gone yields nothing rather than a wrong figure.
        let gone = vec![("gone".to_string(), u32::MAX)];
        let g = CpuSample::take(&gone);
        assert!(g.costs(&CpuSample::take(&gone), &it).is_empty());
    }
}
