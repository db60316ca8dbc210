//! `vnio switch port ...`: the arguments that describe a port and its
//! latency policies, and the requests that add, change, remove and list
//! ports (`port add`'s flags and the spec they make are in `port/add.rs`).
//! Separate from the daemon and the other commands because a port's
//! description is most of the switch's command line.

use std::collections::BTreeMap;

use clap::Subcommand;
use vnio_switch::coalesce::Coalesce;
use vnio_switch::config::{EgressSettings, Latency, PolicyUpdate};
use vnio_switch::control::{Client, Request};
use vnio_switch::port::SocketMode;
use vnio_switch::stats::PortStatsSnapshot;
use vnio_switch::worker::PortInfo;

use super::render::{policy_text, print_ports, print_stats};

mod add;

use add::AddArgs;

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(super) enum PortCmd {
    /// Add a port (while others carry traffic): vhost-user (--socket), tap (--tap), uplink (--uplink) or vxlan (--vxlan).
    Add(Box<AddArgs>),
    /// Change a running port's latency policies (unchanged when not given).
    Set {
        /// Port name.
        name: String,
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Remove a port.
    Del {
        /// Port name.
        name: String,
    },
    /// List ports.
    List,
    /// Counters of one port, or of all.
    Stats {
        /// Port name.
        name: Option<String>,
    },
    /// The learned MAC addresses.
    Fdb,
}

/// A port's latency policies (see docs/switch.md).
#[derive(clap::Args)]
pub(super) struct PolicyArgs {
    /// Interrupt coalescing toward the guest: off, static:FRAMES:USEC, or
    /// adaptive[:BOUND_USEC] (the default; bound 4000 µs).
    #[arg(long, value_name = "POLICY")]
    coalesce: Option<Coalesce>,
    /// Software LRO on delivery to the port (default on).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    lro: Option<bool>,
    /// high: a dedicated busy-polling worker on its own core, coalescing and LRO off.
    #[arg(long, value_name = "normal|high")]
    latency: Option<Latency>,
    /// The core for a latency-high port's worker (default: one is chosen).
    #[arg(long, value_name = "N")]
    core: Option<usize>,
    /// Empty polling rounds of the port's transmit queue before its guest
    /// is asked to kick again (default: the switch's idle_polls).
    #[arg(long, value_name = "N")]
    tx_poll_budget: Option<u32>,
    /// Weight on the uplinks' egress while they are contended (1-10000, default 100).
    #[arg(long, value_name = "W")]
    share: Option<u32>,
    /// Cap on the port's rate toward the uplinks, Mbit/s (0: none).
    #[arg(long, value_name = "MBPS")]
    limit_mbps: Option<u64>,
    /// Rate guaranteed toward the uplinks, Mbit/s (0: none).
    #[arg(long, value_name = "MBPS")]
    reserve_mbps: Option<u64>,
    /// Addresses the port may have learned in the FDB (default: the
    /// switch's fdb_port_limit, 1024); past it, new source addresses are
    /// not learned (counted as fdb_limit in the port's stats).
    #[arg(long, value_name = "N")]
    fdb_limit: Option<u32>,
}

impl PolicyArgs {
    /// The share, limit and reservation given (0 Mbit/s: none).
    fn egress(&self) -> EgressSettings {
        EgressSettings {
            share: self.share,
            limit_mbps: self.limit_mbps,
            reserve_mbps: self.reserve_mbps,
        }
    }

    fn update(&self) -> PolicyUpdate {
        PolicyUpdate {
            coalesce: self.coalesce,
            lro: self.lro,
            latency: self.latency,
            core: self.core,
            tx_poll_budget: self.tx_poll_budget,
            egress: self.egress(),
            fdb_limit: self.fdb_limit,
        }
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("expected on or off".into()),
    }
}

fn parse_mode(s: &str) -> Result<SocketMode, String> {
    match s {
        "server" => Ok(SocketMode::Server),
        "client" => Ok(SocketMode::Client),
        _ => Err("expected server or client".into()),
    }
}

/// Runs one port command against the switch behind `client`.
pub(super) fn run(client: &mut Client, command: PortCmd, json: bool) -> anyhow::Result<()> {
    match command {
        PortCmd::Add(args) => add::run(client, *args, json),
        PortCmd::Set { name, policy } => set(client, name, &policy, json),
        PortCmd::Del { name } => {
            client.request(&Request::PortDel { name: name.clone() })?;
            if !json {
                println!("removed port {name}");
            }
            Ok(())
        }
        PortCmd::List => {
            let v = client.request(&Request::PortList)?;
            show(v, json, |ports: Vec<PortInfo>| print_ports(&ports))
        }
        PortCmd::Stats { name } => {
            let v = client.request(&Request::Stats { name })?;
            show(v, json, |m: BTreeMap<String, PortStatsSnapshot>| {
                print_stats(&m)
            })
        }
        PortCmd::Fdb => {
            let v = client.request(&Request::Fdb)?;
            show(v, json, |rows: Vec<serde_json::Value>| print_fdb(&rows))
        }
    }
}

/// Prints a result: as pretty JSON, or read as `T` and rendered by `text`.
fn show<T: serde::de::DeserializeOwned>(
    v: serde_json::Value,
    json: bool,
    text: impl FnOnce(T),
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        text(serde_json::from_value(v)?);
    }
    Ok(())
}

fn set(client: &mut Client, name: String, policy: &PolicyArgs, json: bool) -> anyhow::Result<()> {
    let u = policy.update();
    if u == PolicyUpdate::default() {
        anyhow::bail!("nothing to set: give --coalesce, --lro, --latency, --core, --tx-poll-budget, --share, --limit-mbps, --reserve-mbps or --fdb-limit");
    }
    let v = client.request(&Request::PortSet { name, set: u })?;
    show(v, json, |p: PortInfo| {
        println!("port {}: {}", p.name, policy_text(&p))
    })
}

fn print_fdb(rows: &[serde_json::Value]) {
    println!(
        "{:>5}  {:<17}  {:>5}  {:>7}  VTEP",
        "VLAN", "MAC", "PORT", "AGE(s)"
    );
    for r in rows {
        println!(
            "{:>5}  {:<17}  {:>5}  {:>7}  {}",
            r["vid"],
            r["mac"].as_str().unwrap_or(""),
            r["port"],
            r["age_secs"],
            r["remote"].as_str().unwrap_or("-")
        );
    }
}
