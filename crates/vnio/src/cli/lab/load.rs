//! `vnio lab load ...` (hidden): the contention generators the runner
//! starts inside the hosts. They print "ready" once their sockets exist,
//! and one JSON line with what they did when stopped.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;

use crate::cli::measure::{parse_cpus, CpuList};

#[derive(Subcommand)]
pub enum LoadCmd {
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
pub fn load(cmd: LoadCmd) -> anyhow::Result<i32> {
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
