//! `vnio switch`: runs the switch daemon, and talks to a running one over
//! its control socket. Rendering only; `vnio_switch` does the work.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use vnio_switch::coalesce::Coalesce;
use vnio_switch::config::{Config, Latency, PolicyUpdate, PortKind, PortSpec};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::perf::PerfSnapshot;
use vnio_switch::port::SocketMode;
use vnio_switch::stats::PortStatsSnapshot;
use vnio_switch::worker::PortInfo;

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
    /// cost per frame, frames per burst and transmit queue depths.
    Perf {
        /// Measure over this many seconds (default: since each worker started).
        #[arg(long, value_name = "SECONDS")]
        interval: Option<f64>,
    },
    /// Stop a running switch.
    Shutdown,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum PortCmd {
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
        /// An uplink port on this host interface (AF_PACKET).
        #[arg(long, value_name = "IFNAME", conflicts_with = "tap")]
        uplink: Option<String>,
        /// A tap port (interface --ifname, default the port name).
        #[arg(long)]
        tap: bool,
        /// tap interface name.
        #[arg(long, requires = "tap")]
        ifname: Option<String>,
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
        /// Uplink: egress capacity the shares divide, Mbit/s (default: the link speed).
        #[arg(long, requires = "uplink", value_name = "MBPS")]
        capacity_mbps: Option<u64>,
        /// vhost-user: direct mode, bound 1:1 to a receive queue of this uplink port, no switching (needs --mac).
        #[arg(long, value_name = "UPLINK_PORT", requires = "socket")]
        direct: Option<String>,
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
struct PolicyArgs {
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
        Cmd::Metrics => {
            let v = client.request(&Request::Metrics)?;
            print!("{}", v.as_str().unwrap_or_default());
        }
        Cmd::Shutdown => {
            client.request(&Request::Shutdown)?;
        }
        Cmd::Perf { interval } => {
            let take = |c: &mut Client| -> anyhow::Result<Vec<PerfSnapshot>> {
                Ok(serde_json::from_value(c.request(&Request::Perf)?)?)
            };
            let mut now = take(&mut client)?;
            if let Some(secs) = interval {
                if !(secs > 0.0 && secs <= 3600.0) {
                    anyhow::bail!("--interval {secs}: give 0 to 3600 seconds");
                }
                let before = now;
                std::thread::sleep(std::time::Duration::from_secs_f64(secs));
                now = take(&mut client)?
                    .into_iter()
                    .map(|w| match before.iter().find(|b| b.worker == w.worker) {
                        Some(b) => w.since(b),
                        None => w,
                    })
                    .collect();
            }
            if json {
                let doc: Vec<_> = now
                    .iter()
                    .map(|w| serde_json::json!({ "counters": w, "figures": w.figures() }))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print!("{}", render_perf(&now));
            }
        }
        Cmd::Port { command } => match command {
            PortCmd::Add {
                name,
                socket,
                tap,
                uplink,
                ifname,
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
                offloads,
                vxlan,
                local,
                remotes,
                dstport,
                ttl,
                underlay_mtu,
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
                    fdb_limit: policy.fdb_limit,
                    vni: vxlan,
                    local,
                    remotes,
                    dstport,
                    ttl,
                    underlay_mtu,
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
        },
    }
    Ok(0)
}

/// "coalesce adaptive:4000, lro on, latency normal, tx-poll-budget 64".
fn policy_text(p: &PortInfo) -> String {
    let core = p
        .policy
        .core
        .map(|c| format!(" (core {c})"))
        .unwrap_or_default();
    format!(
        "coalesce {}, lro {}, latency {}{core}, tx-poll-budget {}",
        p.policy.coalesce,
        if p.policy.lro { "on" } else { "off" },
        p.policy.latency,
        p.policy.tx_poll_budget
    )
}

fn print_ports(ports: &[PortInfo]) {
    println!(
        "{:<12} {:>3}  {:<10} {:<6} {:<17} {:>10} {:>10} {:>7}  {:<16} {:<3} {:<7}  SOCKET",
        "NAME",
        "ID",
        "KIND",
        "MODE",
        "STATE",
        "TX-PKTS",
        "RX-PKTS",
        "DROPS",
        "COALESCE",
        "LRO",
        "LATENCY"
    );
    for p in ports {
        let state = match (p.running, p.connected, &p.queues) {
            // A multiqueue vNIC: pairs running of pairs offered, and the
            // worker serving each pair when they are spread over workers.
            (true, _, Some(q)) if !q.workers.is_empty() => format!(
                "running {}/{}q w{}",
                q.running,
                q.pairs,
                q.workers
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            (true, _, Some(q)) => format!("running {}/{}q", q.running, q.pairs),
            (true, _, None) => "running".into(),
            (false, true, _) => "connected".into(),
            (false, false, _) => "waiting".into(),
        };
        let drops: u64 = p
            .stats
            .tx
            .drops
            .values()
            .chain(p.stats.rx.drops.values())
            .sum();
        let mode = match p.mode {
            Some(SocketMode::Server) => "server",
            Some(SocketMode::Client) => "client",
            None => "-",
        };
        let latency = match p.policy.core {
            Some(c) => format!("{}@{c}", p.policy.latency),
            None => p.policy.latency.to_string(),
        };
        println!(
            "{:<12} {:>3}  {:<10} {:<6} {:<17} {:>10} {:>10} {:>7}  {:<16} {:<3} {:<7}  {}",
            p.name,
            p.id,
            p.kind,
            mode,
            state,
            p.stats.tx.packets,
            p.stats.rx.packets,
            drops,
            p.policy.coalesce.to_string(),
            if p.policy.lro { "on" } else { "off" },
            latency,
            p.socket.as_deref().unwrap_or("-")
        );
    }
}

fn print_stats(m: &std::collections::BTreeMap<String, PortStatsSnapshot>) {
    for (name, s) in m {
        println!(
            "port {name}  (resets {}, connections {})",
            s.resets, s.connections
        );
        for (dir, q) in [("tx (from frontend)", &s.tx), ("rx (to frontend)", &s.rx)] {
            let drops: Vec<String> = q
                .drops
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "  {dir:<19} packets {:>10}  bytes {:>12}  notify sent {:>8} coalesced {:>8} declined {:>8}  recv {:>8}  drops {}",
                q.packets,
                q.bytes,
                q.notifications_sent,
                q.notifications_coalesced,
                q.notifications_suppressed,
                q.notifications_received,
                if drops.is_empty() {
                    "0".to_string()
                } else {
                    drops.join(" ")
                }
            );
        }
        for q in &s.uplink_queues {
            println!(
                "  queue {:<3} {:<16} {:<17} packets {:>10}  bytes {:>12}  kernel drops {}",
                q.queue,
                q.owner
                    .as_deref()
                    .unwrap_or(if q.queue == 0 { "(shared)" } else { "(free)" }),
                q.mac.as_deref().unwrap_or("-"),
                q.packets,
                q.bytes,
                q.kernel_drops
            );
        }
        for q in &s.queue_pairs {
            println!(
                "  queue pair {:<2} tx packets {:>10} bytes {:>12}  rx packets {:>10} bytes {:>12}",
                q.queue, q.tx_packets, q.tx_bytes, q.rx_packets, q.rx_bytes
            );
        }
        for v in &s.vteps {
            println!(
                "  vtep {:<15} in packets {:>10} bytes {:>12}  out packets {:>10} bytes {:>12}",
                if v.remote == "0.0.0.0" {
                    "(others)"
                } else {
                    &v.remote
                },
                v.packets_in,
                v.bytes_in,
                v.packets_out,
                v.bytes_out
            );
        }
    }
}

/// One block per worker: shares of its time, cost per frame, then the
/// bursts and queue depths it saw as histograms (share of bursts).
fn render_perf(workers: &[PerfSnapshot]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for w in workers {
        let f = w.figures();
        let core = w.core.map_or("shared".into(), |c| format!("core {c}"));
        let _ = writeln!(
            out,
            "worker {} ({core}) over {:.3} s: busy {:.1}%, idle polling {:.1}%, other {:.1}% (sleeping, commands)",
            w.worker,
            w.nanos as f64 / 1e9,
            100.0 * f.busy_share,
            100.0 * f.idle_poll_share,
            100.0 * f.other_share
        );
        let _ = writeln!(
            out,
            "  {} frames ({}% on the fast case), {:.3} Mpps; busy time per frame {} ns, {} cycles ({:.2} per ns); {} busy rounds, {} idle",
            w.frames,
            opt(f.fast_share.map(|s| 100.0 * s), 1),
            f.frames_per_sec / 1e6,
            opt(f.ns_per_frame, 1),
            opt(f.cycles_per_frame, 0),
            f.ticks_per_ns,
            w.busy_rounds,
            w.idle_rounds
        );
        let bursts: u64 = w.bursts.iter().sum();
        if bursts > 0 {
            let groups = [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 32)];
            let cells: Vec<String> = groups
                .iter()
                .map(|&(a, b)| {
                    let k: u64 = w.bursts.iter().take(b + 1).skip(a).sum();
                    let label = if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    };
                    format!("{label}: {:.1}%", 100.0 * k as f64 / bursts as f64)
                })
                .collect();
            let _ = writeln!(
                out,
                "  transmit bursts ({bursts}, mean {} chains): {}",
                opt(f.mean_burst, 1),
                cells.join("  ")
            );
            let depths: Vec<String> = w
                .depth
                .iter()
                .enumerate()
                .filter(|(_, &k)| k > 0)
                .map(|(i, &k)| {
                    let label = match i {
                        0 => "0".to_string(),
                        i if i + 1 == w.depth.len() => format!("{}+", 1u32 << (i - 1)),
                        i => format!("{}-{}", 1u32 << (i - 1), (1u32 << i) - 1),
                    };
                    format!("{label}: {:.1}%", 100.0 * k as f64 / bursts as f64)
                })
                .collect();
            let _ = writeln!(out, "  queue depth when polled: {}", depths.join("  "));
        }
    }
    out
}
