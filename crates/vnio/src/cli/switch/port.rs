//! `vnio switch port ...`: the arguments that describe a port and its
//! latency policies, and the requests that add, change, remove and list
//! ports. Separate from the daemon and the other commands because a port's
//! description is most of the switch's command line.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use vnio_switch::coalesce::Coalesce;
use vnio_switch::config::{Latency, PolicyUpdate, PortKind, PortSpec};
use vnio_switch::control::{Client, Request};
use vnio_switch::port::SocketMode;
use vnio_switch::stats::PortStatsSnapshot;
use vnio_switch::worker::PortInfo;

use super::render::{policy_text, print_ports, print_stats};

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(super) enum PortCmd {
    /// Add a port (while others carry traffic): vhost-user (--socket), tap (--tap), uplink (--uplink) or vxlan (--vxlan).
    Add {
        /// Port name.
        name: String,
        /// vhost-user socket path.
        #[arg(long, required_unless_present_any = ["tap", "uplink", "vxlan"], conflicts_with_all = ["tap", "uplink", "vxlan"])]
        socket: Option<PathBuf>,
        /// A VXLAN port with this VNI (RFC 7348; needs --local).
        #[arg(long, value_name = "VNI", conflicts_with_all = ["tap", "uplink"], requires = "local")]
        vxlan: Option<u32>,
        /// vxlan: the outer source IPv4 address (received on at --dstport).
        #[arg(long, value_name = "ADDR", requires = "vxlan")]
        local: Option<std::net::Ipv4Addr>,
        /// vxlan: remote VTEPs for broadcast and unknown unicast, comma-separated.
        #[arg(
            long = "remote",
            value_name = "ADDR[,ADDR]",
            value_delimiter = ',',
            requires = "vxlan"
        )]
        remotes: Vec<std::net::Ipv4Addr>,
        /// vxlan: UDP port [default: 4789].
        #[arg(long, value_name = "PORT", requires = "vxlan")]
        dstport: Option<u16>,
        /// vxlan: outer TTL [default: the kernel's].
        #[arg(long, requires = "vxlan")]
        ttl: Option<u8>,
        /// vxlan: the underlay MTU [default: 1500]; longer frames are dropped, not fragmented.
        #[arg(long, value_name = "BYTES", requires = "vxlan")]
        underlay_mtu: Option<usize>,
        /// vxlan: further VTEPs to hear besides --remote, as IPv4 prefixes,
        /// comma-separated; any other sender's datagrams are dropped (unknown_vtep).
        #[arg(
            long,
            value_name = "PREFIX[,PREFIX]",
            value_delimiter = ',',
            requires = "vxlan"
        )]
        accept: Vec<vnio_switch::port::vxlan::Ipv4Net>,
        /// vxlan: addresses each remote VTEP may have learned [default: the
        /// port's FDB limit shared among its remotes, at least 64].
        #[arg(long, value_name = "N", requires = "vxlan")]
        vtep_fdb_limit: Option<u32>,
        /// An uplink port on this host interface (AF_PACKET).
        #[arg(long, value_name = "IFNAME", conflicts_with = "tap")]
        uplink: Option<String>,
        /// A tap port (interface --ifname, default the port name).
        #[arg(long)]
        tap: bool,
        /// tap interface name.
        #[arg(long, requires = "tap")]
        ifname: Option<String>,
        /// tap: create it inside this network namespace (e.g.
        /// /run/netns/NAME), persistent across switch restarts.
        #[arg(long, value_name = "PATH", requires = "tap")]
        netns: Option<PathBuf>,
        /// server: the switch listens; client: the switch connects (and reconnects).
        #[arg(long, default_value = "server", value_parser = parse_mode)]
        mode: SocketMode,
        /// Access VLAN.
        #[arg(long)]
        vlan: Option<u16>,
        /// Trunk VLANs, comma-separated (makes the port a trunk).
        #[arg(long, value_delimiter = ',')]
        trunk: Vec<u16>,
        /// Untagged VLAN of a trunk.
        #[arg(long)]
        native_vlan: Option<u16>,
        /// The port's MAC address.
        #[arg(long)]
        mac: Option<String>,
        /// Drop frames whose source MAC is not --mac.
        #[arg(long)]
        spoof_guard: bool,
        /// Uplink: hand frames straight to the driver, skipping the interface's qdisc.
        #[arg(long, requires = "uplink")]
        qdisc_bypass: bool,
        /// Uplink: receive queues (queue 0 shared, the others one per vNIC while they last);
        /// vhost-user: queue pairs offered to the guest (a multiqueue vNIC, 1-8).
        #[arg(long, conflicts_with_all = ["tap", "vxlan"])]
        queues: Option<usize>,
        /// Uplink or vxlan: egress capacity the shares divide, Mbit/s (default:
        /// an uplink's link speed; none for vxlan).
        #[arg(long, value_name = "MBPS")]
        capacity_mbps: Option<u64>,
        /// vhost-user: direct mode, bound 1:1 to a receive queue of this uplink port, no switching (needs --mac).
        #[arg(long, value_name = "UPLINK_PORT", requires = "socket")]
        direct: Option<String>,
        /// vhost-user: cross-connected with this vhost-user port (added before), no switching:
        /// every frame either sends goes to the other as it is.
        #[arg(
            long,
            value_name = "PORT",
            requires = "socket",
            conflicts_with = "direct"
        )]
        cross_connect: Option<String>,
        /// vNIC: the uplink receive queue to use: auto (its own while queues last), shared, or N.
        #[arg(long, value_name = "auto|shared|N", conflicts_with = "uplink")]
        uplink_queue: Option<vnio_switch::netqueue::QueueRequest>,
        /// vhost-user and tap: offer checksum and TSO offloads (default on);
        /// off, frames cross MTU-sized and fully checksummed.
        #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
        offloads: Option<bool>,
        #[command(flatten)]
        policy: PolicyArgs,
    },
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
    fn update(&self) -> PolicyUpdate {
        PolicyUpdate {
            coalesce: self.coalesce,
            lro: self.lro,
            latency: self.latency,
            core: self.core,
            tx_poll_budget: self.tx_poll_budget,
            share: self.share,
            limit_mbps: self.limit_mbps,
            reserve_mbps: self.reserve_mbps,
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
        PortCmd::Add {
            name,
            socket,
            tap,
            uplink,
            ifname,
            netns,
            mode,
            vlan,
            trunk,
            native_vlan,
            mac,
            spoof_guard,
            qdisc_bypass,
            policy,
            queues,
            uplink_queue,
            capacity_mbps,
            direct,
            cross_connect,
            offloads,
            vxlan,
            local,
            remotes,
            dstport,
            ttl,
            underlay_mtu,
            accept,
            vtep_fdb_limit,
        } => {
            // The switch takes socket paths as absolute (it has its own
            // working directory): a relative one is the caller's.
            let socket = match socket {
                Some(s) if s.is_relative() => Some(
                    std::env::current_dir()
                        .context("the current directory")?
                        .join(s),
                ),
                s => s,
            };
            let spec = PortSpec {
                name,
                kind: if tap {
                    PortKind::Tap
                } else if uplink.is_some() {
                    PortKind::Uplink
                } else if vxlan.is_some() {
                    PortKind::Vxlan
                } else {
                    PortKind::VhostUser
                },
                socket,
                mode,
                ifname: uplink.or(ifname),
                netns,
                vlan,
                trunk,
                native_vlan,
                mac,
                spoof_guard,
                qdisc_bypass,
                offloads,
                coalesce: policy.coalesce,
                lro: policy.lro,
                latency: policy.latency.unwrap_or_default(),
                core: policy.core,
                tx_poll_budget: policy.tx_poll_budget,
                share: policy.share,
                limit_mbps: policy.limit_mbps.filter(|&m| m > 0),
                reserve_mbps: policy.reserve_mbps.filter(|&m| m > 0),
                capacity_mbps,
                queues,
                uplink_queue,
                direct,
                cross_connect,
                fdb_limit: policy.fdb_limit,
                vni: vxlan,
                local,
                remotes,
                dstport,
                ttl,
                underlay_mtu,
                accept,
                vtep_fdb_limit,
            };
            let v = client.request(&Request::PortAdd { port: spec })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let p: PortInfo = serde_json::from_value(v)?;
                println!(
                    "added port {} (id {}) on {}",
                    p.name,
                    p.id,
                    p.socket.unwrap_or_default()
                );
            }
        }
        PortCmd::Set { name, policy } => {
            let u = policy.update();
            if u == PolicyUpdate::default() {
                anyhow::bail!("nothing to set: give --coalesce, --lro, --latency, --core, --tx-poll-budget, --share, --limit-mbps, --reserve-mbps or --fdb-limit");
            }
            let v = client.request(&Request::PortSet { name, set: u })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let p: PortInfo = serde_json::from_value(v)?;
                println!("port {}: {}", p.name, policy_text(&p));
            }
        }
        PortCmd::Del { name } => {
            client.request(&Request::PortDel { name: name.clone() })?;
            if !json {
                println!("removed port {name}");
            }
        }
        PortCmd::List => {
            let v = client.request(&Request::PortList)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let ports: Vec<PortInfo> = serde_json::from_value(v)?;
                print_ports(&ports);
            }
        }
        PortCmd::Stats { name } => {
            let v = client.request(&Request::Stats { name })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let m: std::collections::BTreeMap<String, PortStatsSnapshot> =
                    serde_json::from_value(v)?;
                print_stats(&m);
            }
        }
        PortCmd::Fdb => {
            let v = client.request(&Request::Fdb)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let rows: Vec<serde_json::Value> = serde_json::from_value(v)?;
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
        }
    }
    Ok(())
}
