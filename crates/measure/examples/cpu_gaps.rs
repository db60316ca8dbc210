//! How long the machine takes a CPU away from a thread that never yields
//! it: the floor under every gap a forwarding test can see. On each CPU a
//! pinned thread reads the clock in a loop and keeps the gaps between two
//! reads; a gap is time something else ran there (an interrupt, another
//! thread, or, on a virtual machine, the host running another vCPU).
//!
//! With `--fifo PRIO` the threads run under SCHED_FIFO, so no ordinary
//! thread of this machine can take their CPU: what gaps remain are the
//! kernel's and the host's. The loop runs in slices of 900 ms with 100 ms
//! of sleep between them, so the kernel's limit on real-time threads
//! (`sched_rt_runtime_us`, 950 ms a second by default) never stops them;
//! the gaps are counted inside the slices only.
//!
//! `cargo run --release -p vnio-measure --example cpu_gaps -- [SECS] [--fifo PRIO]`
//! (default 10 s, ordinary scheduling).

use std::time::{Duration, Instant};

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

const SLICE: Duration = Duration::from_millis(900);
const REST: Duration = Duration::from_millis(100);

/// What one CPU's thread saw.
#[derive(Default)]
struct Gaps {
    longest: Duration,
    over_100us: u64,
    over_1ms: u64,
    over_1ms_total: Duration,
    watched: Duration,
}

impl Gaps {
    fn add(&mut self, gap: Duration) {
        self.longest = self.longest.max(gap);
        self.over_100us += u64::from(gap >= Duration::from_micros(100));
        if gap >= Duration::from_millis(1) {
            self.over_1ms += 1;
            self.over_1ms_total += gap;
        }
    }
}

fn usage(why: &str) -> ! {
    eprintln!("cpu_gaps: {why} (usage: [SECS] [--fifo PRIO])");
    std::process::exit(2);
}

/// Pins the calling thread to `cpu` and, with `fifo`, makes it SCHED_FIFO
/// at that priority; says why when it cannot.
fn place(cpu: usize, fifo: Option<i32>) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))?;
    if let Some(prio) = fifo {
        let param = libc::sched_param {
            sched_priority: prio,
        };
        // SAFETY: the calling thread's own scheduling, from a live param.
        let r =
            unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
        if r != 0 {
            return Err(format!(
                "SCHED_FIFO {prio}: {} (root or CAP_SYS_NICE)",
                std::io::Error::from_raw_os_error(r)
            ));
        }
    }
    Ok(())
}

/// Reads the clock on `cpu` for `secs`, slice by slice.
fn watch(cpu: usize, fifo: Option<i32>, secs: f64) -> Result<Gaps, String> {
    place(cpu, fifo)?;
    let mut g = Gaps::default();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let start = Instant::now();
        let stop = (start + SLICE).min(end);
        let mut last = start;
        while last < stop {
            let now = Instant::now();
            g.add(now - last);
            last = now;
        }
        g.watched += last - start;
        std::thread::sleep(REST);
    }
    Ok(g)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut secs = 10.0;
    let mut fifo = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--fifo" => {
                let p = it
                    .next()
                    .unwrap_or_else(|| usage("--fifo needs a priority"));
                match p.parse::<i32>() {
                    Ok(p) if (1..=99).contains(&p) => fifo = Some(p),
                    _ => usage(&format!("--fifo {p:?}: a priority is 1-99")),
                }
            }
            s => match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => secs = v,
                _ => usage(&format!("{s:?} is not a length in seconds")),
            },
        }
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<_> = (0..cpus)
        .map(|cpu| std::thread::spawn(move || watch(cpu, fifo, secs)))
        .collect();
    let policy = fifo.map_or("ordinary scheduling".to_string(), |p| {
        format!("SCHED_FIFO {p}")
    });
    for (cpu, t) in threads.into_iter().enumerate() {
        match t.join().expect("a watching thread panicked") {
            Ok(g) => println!(
                "cpu {cpu} ({policy}): longest gap {:.3} ms; gaps of 100 µs or more {}, of 1 ms or more {} ({:.1} ms in all) in {:.1} s",
                g.longest.as_secs_f64() * 1e3,
                g.over_100us,
                g.over_1ms,
                g.over_1ms_total.as_secs_f64() * 1e3,
                g.watched.as_secs_f64()
            ),
            Err(why) => {
                eprintln!("cpu_gaps: {why}");
                std::process::exit(1);
            }
        }
    }
}
