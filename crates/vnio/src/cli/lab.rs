//! `vnio lab`: list, show, run, report, judge (findings), compare and clean
//! scenarios; and the hidden contention generators the runner starts inside
//! the hosts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vnio_lab::findings::{self, RunFindings};
use vnio_lab::guest::GuestKit;
use vnio_lab::report::{self, Row};
use vnio_lab::runner::{self, Event, Observer, RunnerOptions, Status};
use vnio_lab::scenario::{self, Capabilities, LabFile, Overrides, Plan, Scenario, Source};
use vnio_lab::store::{self, Store};

use super::measure::{parse_cpus, parse_duration, CpuList};

/// Arguments of `vnio lab`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct DbArg {
    /// The results store (SQLite).
    #[arg(long, default_value = store::DEFAULT_DB)]
    db: PathBuf,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the shipped scenarios and the runs in the store.
    List {
        #[command(flatten)]
        db: DbArg,
    },
    /// Show what a scenario measures: configurations, workloads, points, time.
    Show {
        /// Shipped name or .toml file.
        scenario: String,
        /// Print the scenario file instead (to copy and edit).
        #[arg(long)]
        toml: bool,
        #[command(flatten)]
        length: LengthArgs,
    },
    /// Run a scenario or set: build, measure, store, report (needs root).
    Run {
        /// Shipped name (see `vnio lab list`) or .toml file.
        scenario: String,
        #[command(flatten)]
        db: DbArg,
        /// Where to write the HTML report [default: next to the store, lab-run-ID.html].
        #[arg(long)]
        report: Option<PathBuf>,
        #[command(flatten)]
        length: LengthArgs,
    },
    /// Render the HTML report of a stored run.
    Report {
        /// Run id, or last, last-1, ...
        #[arg(default_value = "last")]
        run: String,
        #[command(flatten)]
        db: DbArg,
        /// Output file [default: next to the store, lab-run-ID.html].
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
    },
    /// The verdicts on the studies' findings a stored run's scenarios declare.
    Findings {
        /// Run id, or last, last-1, ...
        #[arg(default_value = "last")]
        run: String,
        #[command(flatten)]
        db: DbArg,
        /// Print the verdicts as JSON (one document).
        #[arg(long)]
        json: bool,
    },
    /// Compare two stored runs point by point (HTML and a table).
    Compare {
        /// The first run (id, last, last-1, ...).
        a: String,
        /// The second run.
        b: String,
        #[command(flatten)]
        db: DbArg,
        /// Output file [default: next to the store, lab-compare-A-B.html].
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
    },
    /// Remove what crashed or killed runs left: processes, namespaces, links, scratch directories.
    Clean {
        /// Also remove what live runs own (only when no other lab run is going on).
        #[arg(long)]
        all: bool,
    },
    /// The far side of a configuration on another machine (started by the
    /// runner over SSH; reads its spec as JSON).
    #[command(hide = true)]
    Side {
        /// The run's scratch directory on this machine.
        #[arg(long)]
        dir: PathBuf,
        /// What to build (`vnio_lab::machine::side::SideSpec` as JSON).
        spec: String,
    },
    /// Contention generators (started by the runner inside the hosts).
    #[command(hide = true)]
    Load {
        #[command(subcommand)]
        cmd: LoadCmd,
    },
}

#[derive(clap::Args, Clone, Default)]
struct LengthArgs {
    /// Measured time per iteration, for every point (e.g. 500ms, 5m).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Warm-up per iteration.
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Iterations per point (the median by mean is reported).
    #[arg(long)]
    iterations: Option<u32>,
    /// CI-sized: 1 s, 200 ms warm-up, 1 iteration, first and last sweep values.
    #[arg(long)]
    quick: bool,
    /// Run only this configuration (repeatable).
    #[arg(long = "configuration", short = 'c')]
    configurations: Vec<String>,
}

impl LengthArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            duration: self.duration,
            warmup: self.warmup,
            iterations: self.iterations,
            quick: self.quick,
            configurations: self.configurations.clone(),
        }
    }
}

#[derive(Subcommand)]
enum LoadCmd {
    /// Answer 64-byte TCP requests, each after spending CPU time.
    Serve {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        work_us: u64,
        #[arg(long, value_parser = parse_cpus)]
        cpus: Option<CpuList>,
    },
    /// Send requests to load servers at a rate each, open loop.
    Drive {
        #[arg(long, value_delimiter = ',', required = true)]
        targets: Vec<std::net::SocketAddr>,
        #[arg(long)]
        rate: u64,
        #[arg(long, value_parser = parse_cpus)]
        cpus: Option<CpuList>,
    },
    /// Send UDP datagrams at a rate.
    Flood {
        #[arg(long)]
        target: std::net::SocketAddr,
        #[arg(long)]
        rate: u64,
        #[arg(long)]
        size: usize,
        #[arg(long, default_value_t = 1)]
        burst: u64,
        #[arg(long, value_parser = parse_cpus)]
        cpus: Option<CpuList>,
    },
    /// Count UDP datagrams.
    Sink {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long, value_parser = parse_cpus)]
        cpus: Option<CpuList>,
    },
}

/// Runs `vnio lab`; returns the exit code.
pub fn run(a: Args) -> anyhow::Result<i32> {
    match a.cmd {
        Cmd::List { db } => list(&db.db),
        Cmd::Show {
            scenario,
            toml,
            length,
        } => show(&scenario, toml, &length.overrides()),
        Cmd::Run {
            scenario,
            db,
            report,
            length,
        } => run_scenario(&scenario, &db.db, report, &length.overrides()),
        Cmd::Report { run, db, out } => render(&run, &db.db, out),
        Cmd::Findings { run, db, json } => judge(&run, &db.db, json),
        Cmd::Compare { a, b, db, out } => compare(&a, &b, &db.db, out),
        Cmd::Clean { all } => clean(all),
        Cmd::Load { cmd } => load(cmd),
        Cmd::Side { dir, spec } => side(&dir, &spec),
    }
}

/// A scenario to run, where it came from, and its overrides.
type Member = (Source, Scenario, Overrides);

/// The scenarios a name stands for (one, or a set's), with the overrides
/// each runs with.
fn expand(name: &str, cli: &Overrides) -> anyhow::Result<(Source, Vec<Member>)> {
    let source = scenario::load(name)?;
    let mut out = Vec::new();
    match &source.file {
        LabFile::Scenario(s) => out.push((source.clone(), (**s).clone(), cli.clone())),
        LabFile::Set(set) => {
            let from_set = Overrides {
                duration: set.duration,
                warmup: set.warmup,
                iterations: set.iterations,
                ..Default::default()
            };
            for member in &set.scenarios {
                let src = scenario::load(member)?;
                let LabFile::Scenario(s) = &src.file else {
                    bail!("set {name}: {member} is not a scenario");
                };
                let s = (**s).clone();
                out.push((src, s, cli.or(&from_set)));
            }
        }
    }
    Ok((source, out))
}

fn title_of(source: &Source) -> String {
    match &source.file {
        LabFile::Scenario(s) => s.title.clone(),
        LabFile::Set(s) => s.title.clone(),
    }
}

fn list(db: &Path) -> anyhow::Result<i32> {
    let caps = Capabilities::current();
    println!(
        "{:<22} {:<9} {:>6} {:>8}  title",
        "scenario", "runnable", "points", "time"
    );
    for sh in scenario::SHIPPED {
        let (source, members) = expand(sh.name, &Overrides::default())?;
        let mut points = 0;
        let mut time = Duration::ZERO;
        let mut runnable = true;
        for (_, s, o) in &members {
            let plan = Plan::new(s, o, &caps).map_err(anyhow::Error::msg)?;
            points += plan.points.iter().filter(|p| p.skip.is_none()).count();
            time += plan.estimate();
            runnable &= plan.missing.is_empty();
        }
        println!(
            "{:<22} {:<9} {:>6} {:>7.0}m  {}",
            sh.name,
            if runnable { "yes" } else { "no" },
            points,
            time.as_secs_f64() / 60.0,
            title_of(&source)
        );
    }
    if db.exists() {
        let store = Store::open(db)?;
        let runs = store.runs()?;
        println!();
        if runs.is_empty() {
            println!("no runs in {}", db.display());
        } else {
            println!("runs in {}:", db.display());
            println!(
                "{:>5} {:<22} {:<12} {:>6} {:<20} revision",
                "id", "scenario", "status", "points", "started"
            );
            for r in runs {
                println!(
                    "{:>5} {:<22} {:<12} {:>6} {:<20} {}",
                    r.id,
                    r.name,
                    r.status,
                    r.points,
                    started(r.started_unix_ns),
                    r.revision
                );
            }
        }
    }
    Ok(0)
}

fn started(ns: i64) -> String {
    let secs = (vnio_measure::clock::realtime_ns() as i64 - ns) / 1_000_000_000;
    match secs {
        s if s < 120 => format!("{s} s ago"),
        s if s < 7200 => format!("{} min ago", s / 60),
        s if s < 172_800 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86_400),
    }
}

fn show(name: &str, toml: bool, o: &Overrides) -> anyhow::Result<i32> {
    let (source, members) = expand(name, o)?;
    if toml {
        print!("{}", source.text);
        return Ok(0);
    }
    let caps = Capabilities::current();
    println!("{} ({})", source.name, source.origin);
    println!("{}", title_of(&source));
    let mut total = Duration::ZERO;
    for (src, s, o) in &members {
        let plan = Plan::new(s, o, &caps).map_err(anyhow::Error::msg)?;
        println!();
        if members.len() > 1 {
            println!("== {}: {}", src.name, s.title);
        }
        println!("study: {}", s.maps_to);
        if let Some(c) = &s.cannot {
            println!("not reproducible here: {c}");
        }
        println!(
            "length: {} iteration(s) of {} after {} warm-up per point",
            plan.run.iterations,
            scenario::humantime::format(plan.run.duration),
            scenario::humantime::format(plan.run.warmup)
        );
        let hosts: Vec<String> = s
            .hosts
            .iter()
            .map(|h| format!("{} ({})", h.name, h.kind.as_str()))
            .collect();
        println!("hosts: {}", hosts.join(", "));
        for c in &plan.configurations {
            let kinds: Vec<String> = c
                .hosts
                .iter()
                .map(|(h, k)| format!("{h}={}", k.as_str()))
                .collect();
            println!(
                "configuration {}: wire {}{}{}",
                c.name,
                c.wire.as_str(),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(", {}", kinds.join(", "))
                },
                c.description
                    .as_ref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            );
        }
        if let Some(sw) = &s.sweep {
            println!("sweep: {} = {:?}", sw.parameter.as_str(), sw.values);
        }
        let mut seen = Vec::new();
        for p in &plan.points {
            if !seen.contains(&p.workload.name) {
                seen.push(p.workload.name.clone());
                println!(
                    "workload {}: {} from {} to {}",
                    p.workload.name,
                    p.workload.describe(),
                    p.workload.from,
                    p.workload.to.join(",")
                );
            }
        }
        for f in &s.findings {
            println!("finding {}: {} ({})", f.id, f.claim, f.study);
        }
        let skipped = plan.points.iter().filter(|p| p.skip.is_some()).count();
        println!(
            "points: {} ({} skipped in this build), about {:.1} min",
            plan.points.len(),
            skipped,
            plan.estimate().as_secs_f64() / 60.0
        );
        for p in plan.points.iter().filter(|p| p.skip.is_some()) {
            println!(
                "  skipped: {} {}: {}",
                p.configuration,
                p.workload.name,
                p.skip.as_deref().unwrap_or("")
            );
        }
        for (cfg, why) in &plan.missing {
            println!(
                "NOT RUNNABLE in this build: configuration {cfg}: {}",
                why.join("; ")
            );
        }
        total += plan.estimate();
    }
    if members.len() > 1 {
        println!("\ntotal: about {:.1} min", total.as_secs_f64() / 60.0);
    }
    Ok(0)
}

/// Progress bars on stderr; hidden when stderr is not a terminal.
struct Bars {
    bar: ProgressBar,
    scenario: std::sync::Mutex<String>,
    point: std::sync::Mutex<String>,
}

impl Bars {
    fn new(total: u64) -> Bars {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points (eta {eta}) {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Bars {
            bar,
            scenario: Default::default(),
            point: Default::default(),
        }
    }

    fn note(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Observer for Bars {
    fn event(&self, e: Event<'_>) {
        let scenario = self.scenario.lock().map(|s| s.clone()).unwrap_or_default();
        match e {
            Event::Building { configuration } => {
                self.bar
                    .set_message(format!("{scenario}: building {configuration}"));
            }
            Event::PointStarted { point } => {
                let sweep = point
                    .sweep
                    .map(|(p, v)| format!(" @ {}", report::sweep_value(p, v)))
                    .unwrap_or_default();
                let label = format!(
                    "{scenario}: {} {}{sweep}",
                    point.configuration, point.workload.name
                );
                self.bar.set_message(label.clone());
                if let Ok(mut p) = self.point.lock() {
                    *p = label;
                }
            }
            Event::Progress(msg) => {
                let point = self.point.lock().map(|p| p.clone()).unwrap_or_default();
                self.bar.set_message(format!("{point} ({msg})"));
            }
            Event::PointFinished { outcome } => {
                self.bar.inc(1);
                if outcome.status == Status::Failed {
                    self.note(format!(
                        "vnio lab: {scenario}: {} {} failed: {}",
                        outcome.point.configuration,
                        outcome.point.workload.name,
                        outcome.error.as_deref().unwrap_or("?")
                    ));
                }
            }
            Event::TearingDown { configuration } => {
                self.bar
                    .set_message(format!("{scenario}: tearing down {configuration}"));
            }
        }
    }
}

fn run_scenario(
    name: &str,
    db: &Path,
    report_path: Option<PathBuf>,
    cli: &Overrides,
) -> anyhow::Result<i32> {
    let (source, members) = expand(name, cli)?;
    let caps = Capabilities::current();
    let is_set = matches!(source.file, LabFile::Set(_));
    let mut runs = Vec::new();
    let mut notes = Vec::new();
    for (src, s, o) in members {
        let plan = Plan::new(&s, &o, &caps).map_err(|e| anyhow::anyhow!("{}: {e}", src.name))?;
        let mut plan = plan;
        if !plan.missing.is_empty() {
            let why: Vec<String> = plan
                .missing
                .iter()
                .map(|(c, w)| format!("configuration {c}: {}", w.join("; ")))
                .collect();
            if !is_set {
                bail!(
                    "{} cannot run in this build: {} (run the others with --configuration NAME)",
                    src.name,
                    why.join(", ")
                );
            }
            // A set runs what it can of each scenario and says what not.
            let runnable: Vec<String> = plan
                .configurations
                .iter()
                .map(|c| c.name.clone())
                .filter(|c| !plan.missing.iter().any(|(m, _)| m == c))
                .collect();
            notes.push(format!(
                "vnio lab: {}: leaving out {} (this build cannot run it)",
                src.name,
                why.join(", ")
            ));
            if runnable.is_empty() {
                continue;
            }
            let only = Overrides {
                configurations: runnable,
                ..o.clone()
            };
            plan = Plan::new(&s, &only, &caps).map_err(|e| anyhow::anyhow!("{}: {e}", src.name))?;
        }
        runs.push((src, s, plan));
    }
    if !vnio_lab::is_root() {
        bail!("vnio lab run builds network namespaces and needs root: run it as root (sudo)");
    }
    for n in notes {
        eprintln!("{n}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while stopping exits at once (`vnio lab clean`
        // then removes what is left).
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .context("installing signal handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    let guests = if runs.iter().any(|(_, _, plan)| plan.has_vm_hosts()) {
        eprintln!("vnio lab: preparing the guests (image, accelerator)");
        let kit = GuestKit::prepare().map_err(|e| anyhow::anyhow!("VM hosts: {e}"))?;
        let g = kit.environment();
        eprintln!(
            "vnio lab: guests: image {} (kernel {}), accel {} ({})",
            g.image, g.kernel, g.accel, g.why
        );
        Some(kit)
    } else {
        None
    };
    let store = Store::open(db)?;
    let env = vnio_measure::env::Environment::capture(250);
    let revision = store::revision();
    let run_id = store.begin_run(&source.name, &title_of(&source), &revision, &env, cli)?;
    if let Some(kit) = &guests {
        store.set_guests(run_id, &kit.environment())?;
    }
    let total: usize = runs.iter().map(|(_, _, p)| p.points.len()).sum();
    let bars = Bars::new(total as u64);
    let opts = RunnerOptions {
        vnio: std::env::current_exe().context("locating the vnio binary")?,
        journal: vnio_lab::Journal::default(),
        guests,
    };
    let mut failure: Option<String> = None;
    for (seq, (src, s, plan)) in runs.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if let Ok(mut name) = bars.scenario.lock() {
            name.clone_from(&src.name);
        }
        store.add_scenario(run_id, seq, src, s, plan)?;
        let mut sink = |o: &runner::PointOutcome| {
            store
                .add_point(run_id, &src.name, o)
                .map_err(|e| e.to_string())
        };
        match runner::run(s, plan, &opts, &stop, &bars, &mut sink) {
            Ok(summary) => {
                store.set_testbeds(run_id, &src.name, &summary.testbeds)?;
            }
            Err(e) => {
                failure = Some(format!("{}: {e}", src.name));
                break;
            }
        }
        let stored = store.load(run_id)?;
        if let Some(sc) = stored.scenarios.iter().find(|x| x.name == src.name) {
            bars.bar
                .suspend(|| print!("{}", text_table(&sc.name, &sc.title, &sc.points)));
        }
    }
    bars.bar.finish_and_clear();
    let stopped = stop.load(Ordering::Relaxed);
    let status = match (&failure, stopped) {
        (Some(_), _) => "failed",
        (None, true) => "interrupted",
        (None, false) => "complete",
    };
    store.finish_run(run_id, status, failure.as_deref())?;
    let path = report_path.unwrap_or_else(|| default_out(db, &format!("lab-run-{run_id}.html")));
    write_report(&store, run_id, &path)?;
    let found = findings::judge_run(&store.load(run_id)?);
    if !found.verdicts.is_empty() {
        let count = |o| found.verdicts.iter().filter(|v| v.outcome == o).count();
        println!(
            "findings: {} reproduced, {} not reproduced, {} inconclusive (vnio lab findings {run_id})",
            count(findings::Outcome::Reproduced),
            count(findings::Outcome::NotReproduced),
            count(findings::Outcome::Inconclusive)
        );
    }
    println!("run {run_id} {status}: stored in {}", store.path());
    println!("report: {}", path.display());
    if let Some(f) = failure {
        bail!("{f}");
    }
    Ok(if stopped { 130 } else { 0 })
}

fn default_out(db: &Path, file: &str) -> PathBuf {
    db.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(file)
}

fn write_report(store: &Store, run: i64, path: &Path) -> anyhow::Result<()> {
    let stored = store.load(run)?;
    let html = report::render(&stored);
    std::fs::write(path, html).with_context(|| format!("writing the report {}", path.display()))
}

/// The results of one scenario as a terminal table (latency in µs).
fn text_table(name: &str, title: &str, points: &[runner::PointOutcome]) -> String {
    use std::fmt::Write;
    let mut s = format!("\n== {name}: {title}\n");
    let _ = writeln!(
        s,
        "{:<20} {:<10} {:<16} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}  notes",
        "configuration", "workload", "point", "trans/s", "p50", "p99", "p99.9", "p99.99", "Gbit/s"
    );
    for o in points {
        let r = Row::of(o);
        let point = r
            .sweep
            .map(|(p, v)| report::sweep_value(p, v))
            .unwrap_or_default();
        let l = r.latency_us.unwrap_or_default();
        let fmt = |v: f64| {
            if r.latency_us.is_some() {
                format!("{v:.1}")
            } else {
                "-".into()
            }
        };
        let mut notes: Vec<String> = Vec::new();
        if r.status != Status::Ok {
            notes.push(r.status.as_str().into());
        }
        notes.extend(r.contention.clone());
        notes.extend(r.error.clone());
        let _ = writeln!(
            s,
            "{:<20} {:<10} {:<16} {:>9.0} {:>8} {:>8} {:>8} {:>9} {:>9}  {}",
            r.configuration,
            r.workload,
            point,
            r.ops_per_s,
            fmt(l[1]),
            fmt(l[3]),
            fmt(l[4]),
            fmt(l[5]),
            if r.kind == scenario::WorkloadKind::Stream {
                format!("{:.2}", r.gbps)
            } else {
                "-".into()
            },
            notes.join("; ")
        );
    }
    s
}

fn render(which: &str, db: &Path, out: Option<PathBuf>) -> anyhow::Result<i32> {
    if !db.exists() {
        bail!(
            "no results store at {} (run `vnio lab run quick` first, or give --db)",
            db.display()
        );
    }
    let store = Store::open(db)?;
    let id = store.resolve(which)?;
    let path = out.unwrap_or_else(|| default_out(db, &format!("lab-run-{id}.html")));
    write_report(&store, id, &path)?;
    println!("report: {}", path.display());
    Ok(0)
}

/// `vnio lab findings`: the verdicts, computed by the lab crate from the
/// store, as a table or JSON.
fn judge(which: &str, db: &Path, json: bool) -> anyhow::Result<i32> {
    if !db.exists() {
        bail!(
            "no results store at {} (run `vnio lab run quick` first, or give --db)",
            db.display()
        );
    }
    let store = Store::open(db)?;
    let run = store.load(store.resolve(which)?)?;
    let found = findings::judge_run(&run);
    if json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print!("{}", findings_table(&found));
    }
    Ok(0)
}

/// The verdicts as a terminal table, the reason under each row.
fn findings_table(f: &RunFindings) -> String {
    use std::fmt::Write;
    let mut s = format!("run {}: {}\n", f.run, f.name);
    if f.verdicts.is_empty() {
        s.push_str("no scenario of this run declares a finding\n");
    } else {
        let _ = writeln!(
            s,
            "{:<21} {:<27} {:<15} {:<22} {:<40} claim",
            "scenario", "finding", "verdict", "study", "this run [spread]"
        );
    }
    for v in &f.verdicts {
        let _ = writeln!(
            s,
            "{:<21} {:<27} {:<15} {:<22} {:<40} {}\n{:<21}   why: {}",
            v.scenario,
            v.id,
            v.outcome.as_str(),
            findings::reference(v),
            findings::measured(v),
            v.claim,
            "",
            v.why
        );
    }
    if !f.without.is_empty() {
        let _ = writeln!(s, "without findings: {}", f.without.join(", "));
    }
    for u in &f.unreadable {
        let _ = writeln!(s, "{}: findings not judged: {}", u.scenario, u.error);
    }
    s
}

fn compare(a: &str, b: &str, db: &Path, out: Option<PathBuf>) -> anyhow::Result<i32> {
    if !db.exists() {
        bail!("no results store at {} (give --db)", db.display());
    }
    let store = Store::open(db)?;
    let (ia, ib) = (store.resolve(a)?, store.resolve(b)?);
    let (ra, rb) = (store.load(ia)?, store.load(ib)?);
    let changed = findings::changes(&findings::judge_run(&ra), &findings::judge_run(&rb));
    if changed.is_empty() {
        println!("verdicts: no finding judged in both runs changed");
    } else {
        println!("verdicts that changed (run {ia} -> run {ib}):");
        for c in &changed {
            println!(
                "  {:<21} {:<27} {} -> {}: {}",
                c.scenario,
                c.id,
                c.a.outcome.as_str(),
                c.b.outcome.as_str(),
                c.b.why
            );
        }
    }
    let pairs = report::pairs(&ra, &rb);
    println!(
        "{:<22} {:<10} {:<24} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}",
        "scenario", "workload", "point", "A p50", "B p50", "Δ", "A p99", "B p99", "Δ"
    );
    for p in &pairs {
        let (Some(la), Some(lb)) = (p.a.latency_us, p.b.latency_us) else {
            if p.a.kind == scenario::WorkloadKind::Stream {
                println!(
                    "{:<22} {:<10} {:<24} {:>8.2}G {:>8.2}G",
                    p.scenario,
                    p.a.workload,
                    p.a.label(),
                    p.a.gbps,
                    p.b.gbps
                );
            }
            continue;
        };
        let d = |x: f64, y: f64| format!("{:+.0}%", 100.0 * (y - x) / x.max(1e-9));
        println!(
            "{:<22} {:<10} {:<24} {:>9.1} {:>9.1} {:>7} {:>9.1} {:>9.1} {:>7}",
            p.scenario,
            p.a.workload,
            p.a.label(),
            la[1],
            lb[1],
            d(la[1], lb[1]),
            la[3],
            lb[3],
            d(la[3], lb[3])
        );
    }
    let path = out.unwrap_or_else(|| default_out(db, &format!("lab-compare-{ia}-{ib}.html")));
    std::fs::write(&path, report::compare(&ra, &rb))
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "{} common points (latency in µs); comparison: {}",
        pairs.len(),
        path.display()
    );
    Ok(if pairs.is_empty() { 1 } else { 0 })
}

fn clean(all: bool) -> anyhow::Result<i32> {
    let journal = vnio_lab::Journal::default();
    // Other machines first: cleaning them may use SSH connection sockets in
    // local scratch directories.
    let machines = vnio_lab::machine::MachineJournal::beside(&journal)
        .clean(all)
        .map_err(anyhow::Error::msg)?;
    for m in &machines.removed {
        println!("removed {m}");
    }
    for why in &machines.failed {
        eprintln!("vnio lab: could not clean {why}");
    }
    let report = if all {
        journal.clean()?
    } else {
        journal.clean_orphans()?
    };
    for e in &report.removed {
        println!("removed {e}");
    }
    for (e, why) in &report.failed {
        eprintln!("vnio lab: could not remove {e}: {why}");
    }
    println!(
        "clean: {} removed, {} failed ({})",
        report.removed.len(),
        report.failed.len(),
        journal.path().display()
    );
    Ok(if report.failed.is_empty() && machines.failed.is_empty() {
        0
    } else {
        1
    })
}

/// `vnio lab side`: build this machine's part of a configuration, answer
/// the controller on stdin/stdout, remove it all at end of input.
fn side(dir: &Path, spec: &str) -> anyhow::Result<i32> {
    let spec: vnio_lab::machine::side::SideSpec =
        serde_json::from_str(spec).context("reading the side's specification")?;
    vnio_lab::machine::side::run(&spec, dir).map_err(anyhow::Error::msg)?;
    Ok(0)
}

/// SIGTERM and SIGINT set the flag the generators watch.
fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    Ok(stop)
}

fn pin(cpus: &Option<CpuList>) -> anyhow::Result<()> {
    if let Some(c) = cpus {
        vnio_lab::testbed::pin_self(&c.0).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The generators print "ready" once their sockets exist, and one JSON
/// line with what they did when stopped.
fn load(cmd: LoadCmd) -> anyhow::Result<i32> {
    use vnio_lab::contention::generators;
    let stop = stop_flag()?;
    let json = match cmd {
        LoadCmd::Serve {
            listen,
            work_us,
            cpus,
        } => {
            pin(&cpus)?;
            let l = std::net::TcpListener::bind(listen)
                .with_context(|| format!("listening on {listen}"))?;
            println!("ready");
            serde_json::to_string(&generators::serve_load(
                l,
                Duration::from_micros(work_us),
                &stop,
            )?)?
        }
        LoadCmd::Drive {
            targets,
            rate,
            cpus,
        } => {
            pin(&cpus)?;
            println!("ready");
            serde_json::to_string(&generators::drive_loads(&targets, rate, &stop))?
        }
        LoadCmd::Flood {
            target,
            rate,
            size,
            burst,
            cpus,
        } => {
            pin(&cpus)?;
            println!("ready");
            serde_json::to_string(&generators::flood(target, rate, size, burst, &stop)?)?
        }
        LoadCmd::Sink { listen, cpus } => {
            pin(&cpus)?;
            let s =
                std::net::UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
            println!("ready");
            serde_json::to_string(&generators::sink(s, &stop)?)?
        }
    };
    println!("{json}");
    Ok(0)
}
