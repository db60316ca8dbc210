//! Contention around a measurement: CPU background loads and a neighbour
//! flood, started as real processes in the scenario's hosts before a point
//! and stopped after it, with what they achieved.

pub mod generators;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;

pub use crate::outcome::{ContentionReport, FloodOutcome, LoadsOutcome};
use crate::scenario::ResolvedContention;
use crate::testbed::{spawn, wait_ready, BedError, Testbed};
pub use generators::{DriveReport, FloodReport, ServeReport};
use vnio_topo::Journal;
use vnio_topo::Process;

/// First port of the load servers (server i listens on BASE + i).
pub const LOAD_PORT_BASE: u16 = 9100;
/// Port of the flood's sink.
pub const SINK_PORT: u16 = 9200;
/// How long contention runs before the measurement starts, so it is at its
/// steady rate when the workload's warm-up begins.
const SETTLE: Duration = Duration::from_millis(300);
/// How long a generator has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(3);

struct Child {
    role: String,
    process: Process,
    log: PathBuf,
}

/// Generators running for one point; [`Running::stop`] ends them.
pub struct Running {
    servers: Vec<Child>,
    driver: Option<Child>,
    sink: Option<Child>,
    flood: Option<Child>,
    spec: ResolvedContention,
}

impl Running {
    /// Start what `spec` asks for in `bed`'s hosts (nothing when idle).
    pub fn start(
        bed: &Testbed,
        spec: &ResolvedContention,
        vnio: &Path,
        journal: &Journal,
    ) -> Result<Running, BedError> {
        let mut running = Running {
            servers: Vec::new(),
            driver: None,
            sink: None,
            flood: None,
            spec: spec.clone(),
        };
        let host = |name: &str| {
            bed.host(name).ok_or_else(|| BedError::Setup {
                what: "starting contention".into(),
                detail: format!("no host {name}"),
            })
        };
        let netns_of = |name: &str| -> Result<&crate::Netns, BedError> {
            host(name)?.netns().ok_or_else(|| BedError::Setup {
                what: "starting contention".into(),
                detail: format!("host {name} is not a namespace: generators run in namespaces"),
            })
        };
        let dir = bed.scratch();
        if let Some(l) = spec.loads.as_ref().filter(|l| l.count > 0) {
            let on = host(&l.on)?;
            let ns = netns_of(&l.on)?;
            let mut targets = Vec::new();
            for i in 0..l.count {
                let addr = SocketAddr::from((on.addr, LOAD_PORT_BASE + i as u16));
                let log = dir.join(format!("load-{i}.log"));
                let mut cmd = ns.command(vnio);
                cmd.args(["lab", "load", "serve", "--listen", &addr.to_string()])
                    .args(["--work-us", &l.work_us.to_string()])
                    .stdout(Stdio::piped());
                if !l.cpus.is_empty() {
                    cmd.args(["--cpus", &l.cpus[i as usize % l.cpus.len()].to_string()]);
                }
                let mut p = spawn(&mut cmd, journal, &log)?;
                wait_ready(&mut p, &format!("load server {i}"), &log)?;
                running.servers.push(Child {
                    role: format!("load server {i}"),
                    process: p,
                    log,
                });
                targets.push(addr.to_string());
            }
            let log = dir.join("load-driver.log");
            let mut cmd = netns_of(&l.from)?.command(vnio);
            cmd.args(["lab", "load", "drive", "--targets", &targets.join(",")])
                .args(["--rate", &l.rate.to_string()])
                .stdout(Stdio::piped());
            let mut p = spawn(&mut cmd, journal, &log)?;
            wait_ready(&mut p, "load driver", &log)?;
            running.driver = Some(Child {
                role: "load driver".into(),
                process: p,
                log,
            });
        }
        if let Some(f) = spec.flood.as_ref().filter(|f| f.rate > 0) {
            let to = host(&f.to)?;
            let target = SocketAddr::from((to.addr, SINK_PORT));
            let cpu = |i: usize| f.cpus.get(i % f.cpus.len().max(1)).map(|c| c.to_string());
            let log = dir.join("sink.log");
            let mut cmd = netns_of(&f.to)?.command(vnio);
            cmd.args(["lab", "load", "sink", "--listen", &target.to_string()])
                .stdout(Stdio::piped());
            if let Some(c) = cpu(1) {
                cmd.args(["--cpus", &c]);
            }
            let mut p = spawn(&mut cmd, journal, &log)?;
            wait_ready(&mut p, "flood sink", &log)?;
            running.sink = Some(Child {
                role: "flood sink".into(),
                process: p,
                log,
            });
            let log = dir.join("flood.log");
            let mut cmd = netns_of(&f.from)?.command(vnio);
            cmd.args(["lab", "load", "flood", "--target", &target.to_string()])
                .args(["--rate", &f.rate.to_string(), "--size", &f.size.to_string()])
                .args(["--burst", &f.burst.to_string()])
                .stdout(Stdio::piped());
            if let Some(c) = cpu(0) {
                cmd.args(["--cpus", &c]);
            }
            let mut p = spawn(&mut cmd, journal, &log)?;
            wait_ready(&mut p, "flood", &log)?;
            running.flood = Some(Child {
                role: "flood".into(),
                process: p,
                log,
            });
        }
        if !spec.is_idle() {
            std::thread::sleep(SETTLE);
        }
        Ok(running)
    }

    /// Stop every generator (SIGTERM, then SIGKILL after a grace period)
    /// and collect what each achieved.
    pub fn stop(self) -> ContentionReport {
        let mut report = ContentionReport::default();
        // Senders first, so the receivers count everything that was sent.
        let driver = self
            .driver
            .map(|c| finish::<DriveReport>(c, &mut report.errors));
        let flood = self
            .flood
            .map(|c| finish::<FloodReport>(c, &mut report.errors));
        let served: Vec<Option<ServeReport>> = self
            .servers
            .into_iter()
            .map(|c| finish::<ServeReport>(c, &mut report.errors))
            .collect();
        let sunk = self
            .sink
            .map(|c| finish::<FloodReport>(c, &mut report.errors));
        if let Some(l) = self.spec.loads.as_ref().filter(|l| l.count > 0) {
            let d = driver.flatten().unwrap_or_default();
            report.errors.extend(d.errors.iter().cloned());
            let cpu_s: f64 = served.iter().flatten().map(|s| s.cpu_s).sum();
            let wall = served
                .iter()
                .flatten()
                .map(|s| s.seconds)
                .fold(0.0, f64::max);
            report.loads = Some(LoadsOutcome {
                count: l.count,
                requested_rate: (l.rate * u64::from(l.count)) as f64,
                achieved_rate: if d.seconds > 0.0 {
                    d.answered as f64 / d.seconds
                } else {
                    0.0
                },
                cpu_pct: if wall > 0.0 {
                    100.0 * cpu_s / wall
                } else {
                    0.0
                },
            });
        }
        if let Some(f) = self.spec.flood.as_ref().filter(|f| f.rate > 0) {
            let sent = flood.flatten().unwrap_or_default();
            let got = sunk.flatten().unwrap_or_default();
            let rate = |r: &FloodReport| {
                if r.seconds > 0.0 {
                    r.packets as f64 / r.seconds
                } else {
                    0.0
                }
            };
            report.flood = Some(FloodOutcome {
                requested_pps: f.rate as f64,
                sent_pps: rate(&sent),
                // The sink ran a little longer than the flood (started
                // before, stopped after); its rate over its own time would
                // understate, so count its packets over the sender's time.
                received_pps: if sent.seconds > 0.0 {
                    got.packets as f64 / sent.seconds
                } else {
                    0.0
                },
                size: f.size,
            });
        }
        report
    }
}

/// SIGTERM a generator, wait for it, parse the JSON line it printed.
fn finish<T: for<'de> Deserialize<'de>>(mut c: Child, errors: &mut Vec<String>) -> Option<T> {
    let pid = nix::unistd::Pid::from_raw(c.process.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_GRACE;
    let mut exited = false;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.process.child_mut().try_wait() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut out = String::new();
    if let Some(mut stdout) = c.process.child_mut().stdout.take() {
        if exited {
            let _ = stdout.read_to_string(&mut out);
        }
    }
    // Reaps (and kills, if it did not exit) and forgets the journal entry.
    let _ = c.process.kill();
    if !exited {
        errors.push(format!("{} did not stop on SIGTERM and was killed", c.role));
        return None;
    }
    match serde_json::from_str(out.trim()) {
        Ok(r) => Some(r),
        Err(_) => {
            errors.push(format!(
                "{} reported nothing: {}",
                c.role,
                crate::testbed::log_tail(&c.log)
            ));
            None
        }
    }
}
