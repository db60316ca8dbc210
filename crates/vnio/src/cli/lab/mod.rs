//! `vnio lab`: list, show, run, report, judge (findings), compare, export
//! and clean scenarios; and the hidden contention generators the runner
//! starts inside the hosts. The lab crate's [`vnio_lab::session`] does the
//! work; this module parses and renders.

mod load;
mod progress;
mod render;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use vnio_lab::findings;
use vnio_lab::scenario::{KnobOverride, Overrides};
use vnio_lab::session::{self, Lab, RunSettings};
use vnio_lab::store;

use super::measure::parse_duration;

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
        overrides: OverrideArgs,
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
        /// Allow the scenario's ssh_options that run commands or open paths (ProxyCommand, LocalCommand, forwarding...): a scenario file is code (docs/lab.md).
        #[arg(long)]
        trust_scenario: bool,
        #[command(flatten)]
        overrides: OverrideArgs,
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
    /// Export a stored run: histograms as HdrHistogram interval logs, points as CSV.
    #[command(group(clap::ArgGroup::new("format").required(true).multiple(true).args(["hlog", "csv"])))]
    Export {
        /// Run id, or last, last-1, ...
        run: String,
        #[command(flatten)]
        db: DbArg,
        /// Write one interval log (.hlog) per measured point into this directory.
        #[arg(long, value_name = "DIR")]
        hlog: Option<PathBuf>,
        /// Write the points as CSV to this file (- for standard output).
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
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
        cmd: load::LoadCmd,
    },
}

/// What a run changes from its scenario: the length, the configurations,
/// knobs.
#[derive(clap::Args, Clone, Default)]
struct OverrideArgs {
    /// Measured time per iteration, for every point (e.g. 500ms, 5m).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Warm-up per iteration.
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Iterations per point (the median by mean is reported).
    #[arg(long)]
    iterations: Option<u32>,
    /// With interleaved iterations and the line probe: repeat until every
    /// probed point has N whole seconds at each placement reached (0: off).
    #[arg(long, value_name = "N")]
    placement_seconds: Option<u32>,
    /// The most iterations --placement-seconds may run.
    #[arg(long, value_name = "N")]
    max_iterations: Option<u32>,
    /// CI-sized: 1 s, 200 ms warm-up, 1 iteration, first and last sweep values.
    #[arg(long)]
    quick: bool,
    /// Run only this configuration (repeatable).
    #[arg(long = "configuration", short = 'c')]
    configurations: Vec<String>,
    /// Set a knob for this run, in every configuration it measures, over the
    /// scenario's (repeatable): VALUE is TOML, a bare word a string, e.g.
    /// endpoints=vnio, switch_cpus=[0], placement_probe=false.
    #[arg(long = "knob", value_name = "KEY=VALUE")]
    knobs: Vec<String>,
}

impl OverrideArgs {
    /// The overrides, the knobs read and type-checked by the lab.
    fn overrides(&self) -> anyhow::Result<Overrides> {
        Ok(Overrides {
            duration: self.duration,
            warmup: self.warmup,
            iterations: self.iterations,
            placement_seconds: self.placement_seconds,
            max_iterations: self.max_iterations,
            quick: self.quick,
            configurations: self.configurations.clone(),
            knobs: KnobOverride::parse_all(&self.knobs)?,
        })
    }
}

/// Runs `vnio lab`; returns the exit code.
pub fn run(a: Args) -> anyhow::Result<i32> {
    match a.cmd {
        Cmd::List { db } => {
            let lab = Lab::new(db.db);
            render::list(&session::catalogue()?, lab.db(), lab.runs()?.as_deref());
            Ok(0)
        }
        Cmd::Show {
            scenario,
            toml,
            overrides,
        } => {
            let expanded = session::expand(&scenario, &overrides.overrides()?)?;
            if toml {
                if !overrides.knobs.is_empty() {
                    eprintln!("vnio lab: the file as written: --knob is not applied to its text");
                }
                print!("{}", expanded.source.text);
            } else {
                render::show(&expanded)?;
            }
            Ok(0)
        }
        Cmd::Run {
            scenario,
            db,
            report,
            trust_scenario,
            overrides,
        } => run_scenario(
            &scenario,
            Lab::new(db.db),
            report,
            trust_scenario,
            &overrides.overrides()?,
        ),
        Cmd::Report { run, db, out } => {
            let path = Lab::new(db.db).report(&run, out)?;
            println!("report: {}", path.display());
            Ok(0)
        }
        Cmd::Findings { run, db, json } => {
            let found = Lab::new(db.db).findings(&run)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else {
                print!("{}", render::findings_table(&found));
            }
            Ok(0)
        }
        Cmd::Compare { a, b, db, out } => {
            let c = Lab::new(db.db).compare(&a, &b, out)?;
            render::compare(&c);
            Ok(if c.pairs.is_empty() { 1 } else { 0 })
        }
        Cmd::Export { run, db, hlog, csv } => {
            let lab = Lab::new(db.db);
            if let Some(dir) = hlog {
                let files = lab.export_hlogs(&run, &dir)?;
                eprintln!("{} interval logs in {}", files.len(), dir.display());
            }
            if let Some(file) = csv {
                let rows = lab.export_csv(&run, &file)?;
                if file != std::path::Path::new("-") {
                    eprintln!("{rows} points in {}", file.display());
                }
            }
            Ok(0)
        }
        Cmd::Clean { all } => {
            let cleaned = session::clean(all)?;
            render::clean(&cleaned);
            Ok(if cleaned.failed() { 1 } else { 0 })
        }
        Cmd::Side { dir, spec } => {
            // Builds this machine's part of a configuration, answers the
            // controller on stdin/stdout, removes it all at end of input.
            let spec: vnio_lab::machine::side::SideSpec =
                serde_json::from_str(&spec).context("reading the side's specification")?;
            vnio_lab::machine::side::run(&spec, &dir).map_err(anyhow::Error::msg)?;
            Ok(0)
        }
        Cmd::Load { cmd } => load::load(cmd),
    }
}

/// `vnio lab run`: plans, then runs with progress bars; a first SIGINT or
/// SIGTERM stops the run (what was measured is kept), a second exits at
/// once (`vnio lab clean` then removes what is left).
fn run_scenario(
    name: &str,
    lab: Lab,
    report: Option<PathBuf>,
    trust_scenario: bool,
    cli: &Overrides,
) -> anyhow::Result<i32> {
    let prepared = session::prepare(name, cli)?;
    if !vnio_lab::is_root() {
        return Err(session::LabError::NotRoot.into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone())
            .context("installing signal handler")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    let bars = progress::Bars::new(prepared.points() as u64);
    let settings = RunSettings {
        vnio: std::env::current_exe().context("locating the vnio binary")?,
        report,
        journal: vnio_lab::Journal::default(),
        trust_scenario,
    };
    let done = lab.run(&prepared, &settings, &stop, &bars);
    bars.bar.finish_and_clear();
    let done = done?;
    if !done.findings.verdicts.is_empty() {
        let count = |o| {
            done.findings
                .verdicts
                .iter()
                .filter(|v| v.outcome == o)
                .count()
        };
        println!(
            "findings: {} reproduced, {} not reproduced, {} inconclusive (vnio lab findings {})",
            count(findings::Outcome::Reproduced),
            count(findings::Outcome::NotReproduced),
            count(findings::Outcome::Inconclusive),
            done.run
        );
    }
    println!("run {} {}: stored in {}", done.run, done.status, done.store);
    println!("report: {}", done.report.display());
    if let Some(f) = done.failure {
        bail!("{f}");
    }
    Ok(if done.stopped { 130 } else { 0 })
}
