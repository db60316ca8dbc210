//! `vnio switch`: runs the switch daemon, and talks to a running one over
//! its control socket. Rendering only; `vnio_switch` does the work.
//! `switch/port.rs` holds the port commands, `switch/render.rs` the tables,
//! `switch/events.rs` the event stream.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use vnio_switch::config::Config;
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::perf::PerfSnapshot;
use vnio_switch::stats::pressure::pressure;
use vnio_switch::stats::PortStatsSnapshot;

mod events;
mod port;
mod render;

use self::port::PortCmd;
use self::render::{render_perf, render_pressure};

/// Arguments of `vnio switch`.
#[derive(clap::Args)]
pub struct Args {
    /// Run the switch daemon with this TOML configuration (see docs/switch.md);
    /// VNIO_LOG=debug logs every vhost-user request.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Control socket [default: the config's `switch.control`, else /run/vnio/switch.sock].
    #[arg(long, value_name = "PATH", global = true)]
    control: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Manage the ports of a running switch.
    Port {
        #[command(subcommand)]
        command: PortCmd,
    },
    /// Print the counters in Prometheus text format.
    Metrics,
    /// Where each worker's time goes: busy, idle polling and other shares,
    /// cost per frame, frames per burst and transmit queue depths; then
    /// each port's ring-full drops per receive queue and frames held back.
    Perf {
        /// Measure over this many seconds (default: since each worker started).
        #[arg(long, value_name = "SECONDS")]
        interval: Option<f64>,
    },
    /// Stream what changes (front-ends connecting, negotiating, resetting
    /// and leaving, queues, uplink carriers, ports added or removed, MAC
    /// flaps, drop rates), one line per event, until Ctrl-C.
    Events,
    /// Stop a running switch.
    Shutdown,
}

const DEFAULT_CONTROL: &str = "/run/vnio/switch.sock";

/// Runs `vnio switch`; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.config.is_some() && args.command.is_some() {
        anyhow::bail!("--config runs the daemon; it does not combine with a subcommand");
    }
    let Some(cmd) = args.command else {
        let Some(path) = args.config else {
            anyhow::bail!("give --config FILE to run the switch, or a subcommand (see --help)");
        };
        let mut config =
            Config::load(&path).with_context(|| format!("loading {}", path.display()))?;
        if let Some(c) = args.control {
            config.switch.control = c;
        }
        let level = match std::env::var("VNIO_LOG").as_deref() {
            Ok("debug") => vnio_switch::logging::LevelFilter::Debug,
            Ok("warn") => vnio_switch::logging::LevelFilter::Warn,
            _ => vnio_switch::logging::LevelFilter::Info,
        };
        vnio_switch::logging::init(level);
        let _ = vnio_switch::daemon::lock_memory(&config.switch);
        let ports = config.ports.len();
        let sw = Switch::start(config).context("starting the switch")?;
        eprintln!(
            "vnio switch: {} port(s), control socket {}",
            ports,
            sw.control_path().display()
        );
        sw.wait();
        return Ok(0);
    };
    let control = args
        .control
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL));
    let mut client = Client::connect(&control)?;
    let json = args.json;
    match cmd {
        Cmd::Events => events::run(client, json)?,
        Cmd::Metrics => {
            let v = client.request(&Request::Metrics)?;
            print!("{}", v.as_str().unwrap_or_default());
        }
        Cmd::Shutdown => {
            client.request(&Request::Shutdown)?;
        }
        Cmd::Perf { interval } => perf(&mut client, interval, json)?,
        Cmd::Port { command } => port::run(&mut client, command, json)?,
    }
    Ok(0)
}

/// `vnio switch perf`: the workers' time and the ports' drops and waits,
/// since each started or over the next `interval` seconds.
fn perf(client: &mut Client, interval: Option<f64>, json: bool) -> anyhow::Result<()> {
    type Ports = Vec<(String, PortStatsSnapshot)>;
    let take = |c: &mut Client| -> anyhow::Result<(Vec<PerfSnapshot>, Ports)> {
        let workers = serde_json::from_value(c.request(&Request::Perf)?)?;
        let ports: std::collections::BTreeMap<String, PortStatsSnapshot> =
            serde_json::from_value(c.request(&Request::Stats { name: None })?)?;
        Ok((workers, ports.into_iter().collect()))
    };
    let (mut workers, mut ports) = take(client)?;
    let mut before: Ports = Vec::new();
    if let Some(secs) = interval {
        if !(secs > 0.0 && secs <= 3600.0) {
            anyhow::bail!("--interval {secs}: give 0 to 3600 seconds");
        }
        let (w0, p0) = (workers, ports);
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        (workers, ports) = take(client)?;
        workers = workers
            .into_iter()
            .map(|w| match w0.iter().find(|b| b.worker == w.worker) {
                Some(b) => w.since(b),
                None => w,
            })
            .collect();
        before = p0;
    }
    let ports = pressure(&ports, &before);
    if json {
        let workers: Vec<_> = workers
            .iter()
            .map(|w| serde_json::json!({ "counters": w, "figures": w.figures() }))
            .collect();
        let doc = serde_json::json!({ "workers": workers, "ports": ports });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render_perf(&workers));
        print!("{}", render_pressure(&ports));
    }
    Ok(())
}
