//! `vnio agent`, `vnio rr`, `vnio ping`, `vnio stream`: argument parsing and
//! rendering of the measurement engine's results. The value parsers are in
//! `measure/parse.rs`, the table and CSV in `measure/render.rs`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use vnio_measure::agent::{Agent, AgentConfig};
use vnio_measure::proto::{Limits, Transport};
use vnio_measure::result::Document;
use vnio_measure::run::Common;

mod parse;
mod render;

use self::parse::parse_transport;
pub use self::parse::{parse_cpus, parse_duration, parse_sizes, CpuList};
use self::render::{csv, table};

#[derive(clap::Args)]
pub struct AgentArgs {
    /// Address to listen on: ADDR or ADDR:PORT (default port 7700).
    #[arg(long, default_value = "0.0.0.0:7700")]
    listen: String,
    /// Require clients to present this token.
    #[arg(long)]
    token: Option<String>,
    /// Longest test a client may ask for.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    max_duration: Duration,
    /// Most sessions one test may ask for.
    #[arg(long, default_value_t = 64)]
    max_sessions: u32,
    /// Highest packet rate one test may ask the agent to send.
    #[arg(long, default_value_t = 5_000_000)]
    max_rate: u64,
    /// Most clients served at once.
    #[arg(long, default_value_t = 64)]
    max_clients: usize,
    /// Drop a client that asks for nothing this long after hello or a test.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    idle_timeout: Duration,
    /// Most session threads committed to all clients' tests at once.
    #[arg(long, default_value_t = 512)]
    max_threads: usize,
    /// Most MiB of session buffers committed to all clients' tests at once.
    #[arg(long, default_value_t = 1024)]
    max_memory: u64,
}

pub fn agent(a: AgentArgs) -> anyhow::Result<i32> {
    let listen =
        vnio_measure::client::resolve(&a.listen).map_err(|e| anyhow::anyhow!("--listen: {e}"))?;
    let limits = Limits {
        max_duration_ms: a.max_duration.as_millis() as u64,
        max_sessions: a.max_sessions,
        max_rate_pps: a.max_rate,
        ..Limits::default()
    };
    let mut config = AgentConfig::new(listen);
    config.token = a.token;
    config.limits = limits;
    config.max_clients = a.max_clients;
    config.idle = a.idle_timeout;
    config.budget.threads = a.max_threads;
    config.budget.bytes = a.max_memory << 20;
    let agent = Agent::bind(config)?;
    let stop = agent.stop_flag();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    eprintln!("vnio agent: listening on {}", agent.local_addr());
    agent.serve()?;
    Ok(0)
}

/// Options of every agent-backed workload.
#[derive(clap::Args, Clone)]
pub struct CommonArgs {
    /// Agents: HOST or HOST:PORT (default port 7700), comma-separated for several.
    #[arg(long, short = 't', value_delimiter = ',', required = true)]
    target: Vec<String>,
    /// Sessions per target, run in parallel.
    #[arg(long, default_value_t = 1)]
    sessions: u32,
    /// Measured time per iteration.
    #[arg(long, short = 'd', value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// Time run but not recorded before each iteration.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    /// Iterations; the median one (by mean round trip) is reported.
    #[arg(long, default_value_t = 1)]
    iterations: u32,
    /// CPUs for this side's session threads (round-robin): 1, 0,2, 0-3.
    #[arg(long, value_parser = parse_cpus)]
    cpu: Option<CpuList>,
    /// CPUs for the agents' session threads.
    #[arg(long, value_parser = parse_cpus)]
    agent_cpu: Option<CpuList>,
    /// SO_BUSY_POLL on data sockets, in microseconds.
    #[arg(long, value_name = "US")]
    busy_poll: Option<u32>,
    /// Token the agents require.
    #[arg(long)]
    token: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(clap::Args, Clone)]
pub struct OutputArgs {
    /// Print the result document (JSON) instead of the table.
    #[arg(long)]
    json: bool,
    /// Print CSV rows instead of the table.
    #[arg(long)]
    csv: bool,
    /// Also save the result document to this file.
    #[arg(long, short = 'o')]
    out: Option<std::path::PathBuf>,
}

impl CommonArgs {
    fn common(&self) -> Common {
        Common {
            targets: self.target.clone(),
            token: self.token.clone(),
            sessions: self.sessions,
            duration: self.duration,
            warmup: self.warmup,
            iterations: self.iterations,
            cpus: self.cpu.clone().map(|c| c.0).unwrap_or_default(),
            agent_cpus: self.agent_cpu.clone().map(|c| c.0).unwrap_or_default(),
            busy_poll_us: self.busy_poll,
            plain_echo: false,
            ci_goal: None,
        }
    }
}

#[derive(clap::Args)]
pub struct RrArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    ci: CiArgs,
    /// tcp or udp.
    #[arg(long, short = 'p', value_parser = parse_transport, default_value = "tcp")]
    proto: Transport,
    /// Message sizes in bytes: 256, or request,response as 64,1024.
    #[arg(long, short = 's', value_parser = parse_sizes, default_value = "256")]
    size: (u32, u32),
    /// Requests in flight per session (netperf's burst).
    #[arg(long, short = 'b', default_value_t = 1)]
    burst: u32,
    /// TCP_NODELAY on the client's data sockets (the agent always sets it).
    #[arg(long)]
    nodelay: bool,
    /// Touch the data before sending and after receiving.
    #[arg(long)]
    dirty: bool,
    /// Open loop: transactions per second per target, spread over its sessions;
    /// latency counts from each request's intended send instant.
    #[arg(long, short = 'r')]
    rate: Option<u64>,
    /// Open loop: how sends are spaced, `fixed` (1/rate apart) or `poisson`
    /// (exponential gaps, as independent clients); the result checks the
    /// gaps the sends really had against it.
    #[arg(long, default_value = "fixed", requires = "rate")]
    arrivals: vnio_measure::arrivals::Arrival,
    /// Take receive instants from kernel software timestamps (SO_TIMESTAMPING; UDP).
    #[arg(long)]
    rx_timestamp: bool,
    /// Send and receive through the switch's poll-mode endpoint instead of a
    /// kernel socket (UDP, one session):
    /// vhost-user:SOCKET,ip=A.B.C.D[,mac=M][,listen][,wait].
    /// The target is the agent's address on the switch's segment.
    #[arg(long, value_parser = vnio_switch::endpoint::via::parse_via, value_name = "PATH")]
    via: Option<vnio_switch::endpoint::via::VhostUserVia>,
    /// With --via: a second poll-mode endpoint (vhost-user:SOCKET,ip=...) on
    /// another switch port, served by the same thread as a UDP echo
    /// responder; target it as IP:7 with --echo-server.
    #[arg(long, value_parser = vnio_switch::endpoint::via::parse_via, value_name = "PATH", requires = "via")]
    via_echo: Option<vnio_switch::endpoint::via::VhostUserVia>,
    /// The targets are plain UDP echo services (RFC 862, e.g. `vnio endpoint`'s
    /// echo port), not agents: UDP only, no agent-side figures. Give HOST:PORT.
    #[arg(long)]
    echo_server: bool,
}

/// Ctrl-C stops the measurement; what was measured is still printed and saved.
fn stop_on_signal() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    Ok(stop)
}

fn progress(msg: &str) {
    // "iteration 1/1" says nothing; several iterations are worth following.
    if !msg.ends_with(" 1/1") {
        eprintln!("vnio: {msg}");
    }
}

pub fn rr(a: RrArgs) -> anyhow::Result<i32> {
    if a.burst == 0 {
        bail!("--burst must be at least 1");
    }
    if a.proto == Transport::Udp && a.size.0.min(a.size.1) < 16 {
        bail!("UDP rr messages carry a 16-byte header: --size must be at least 16");
    }
    let mut common = a.common.common();
    common.plain_echo = a.echo_server;
    common.ci_goal = a.ci.goal()?;
    if a.echo_server && a.proto != Transport::Udp {
        bail!("--echo-server targets answer UDP only: add --proto udp");
    }
    if a.via.is_some() {
        if a.proto != Transport::Udp {
            bail!("--via carries UDP only: add --proto udp");
        }
        if common.sessions != 1 || common.targets.len() != 1 {
            bail!("--via drives one session to one target (one endpoint per vhost-user port)");
        }
        if a.rx_timestamp {
            bail!("--rx-timestamp needs a kernel socket; the endpoint path has no kernel stamps");
        }
        if a.via_echo.is_some() && (!a.echo_server || a.via.as_ref().is_some_and(|v| v.wait)) {
            bail!("--via-echo serves an echo responder from a busy-polling client: add --echo-server, drop ,wait");
        }
    }
    let rate_per_session = a
        .rate
        .map(|r| (r / u64::from(common.sessions.max(1))).max(1));
    let params = vnio_measure::rr::RrParams {
        transport: a.proto,
        request: a.size.0,
        response: a.size.1,
        burst: a.burst,
        nodelay: a.nodelay,
        dirty: a.dirty,
        rate_per_session,
        arrival: a.arrivals,
        busy_poll_us: common.busy_poll_us,
        rx_timestamp: a.rx_timestamp,
        via: a.via.map(|mut v| {
            v.responder = a.via_echo.map(Box::new);
            vnio_measure::path::Via(std::sync::Arc::new(v))
        }),
    };
    let job = vnio_measure::rr::job(&common, params);
    let doc = vnio_measure::run::run(&common, &job, stop_on_signal()?, &progress)?;
    emit(&doc, &a.common.output)
}

/// Prints (table, JSON or CSV), saves, and turns errors into the exit code.
pub fn emit(doc: &Document, out: &OutputArgs) -> anyhow::Result<i32> {
    if let Some(path) = &out.out {
        let body = serde_json::to_string_pretty(doc)?;
        std::fs::write(path, body)
            .with_context(|| format!("saving results to {}", path.display()))?;
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(doc)?);
    } else if out.csv {
        print!("{}", csv(doc));
    } else {
        print!("{}", table(doc));
    }
    for e in &doc.errors {
        eprintln!("vnio: error: {e}");
    }
    for w in &doc.environment.warnings {
        eprintln!("vnio: warning: {w}");
    }
    for c in doc.checks.iter().filter(|c| !c.passed) {
        eprintln!("vnio: warning: {}", c.warning);
    }
    Ok(if doc.interrupted {
        130
    } else if doc.errors.is_empty() {
        0
    } else {
        1
    })
}

#[derive(clap::Args)]
pub struct PingArgs {
    /// Hosts to ping (IPv4), comma-separated.
    #[arg(long, short = 't', value_delimiter = ',', required = true)]
    target: Vec<String>,
    /// Time between echo requests of one session.
    #[arg(long, short = 'i', value_parser = parse_duration, default_value = "1ms")]
    interval: Duration,
    /// Sessions per target, each with its own socket and identifier, their sends spread evenly over the interval.
    #[arg(long, default_value_t = 1)]
    sessions: u32,
    /// ICMP payload bytes.
    #[arg(long, short = 's', default_value_t = 56)]
    size: usize,
    #[arg(long, short = 'd', value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    warmup: Duration,
    #[arg(long, default_value_t = 1)]
    iterations: u32,
    /// CPUs for session threads, round-robin.
    #[arg(long, value_parser = parse_cpus)]
    cpu: Option<CpuList>,
    /// Take receive instants from kernel software timestamps (SO_TIMESTAMPING).
    #[arg(long)]
    rx_timestamp: bool,
    #[command(flatten)]
    ci: CiArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// `--ci PCT:WIDTH` and `--max-duration`, for the latency workloads.
#[derive(clap::Args, Clone)]
pub struct CiArgs {
    /// Keep measuring, in rounds of --duration, until this percentile's 95%
    /// confidence interval is within WIDTH of it: 99:5% (p99 within ±5%).
    #[arg(long, value_name = "PCT:WIDTH")]
    ci: Option<String>,
    /// With --ci: measured time after which the run ends, goal met or not.
    #[arg(long, value_parser = parse_duration, default_value = "60s", requires = "ci")]
    max_duration: Duration,
}

impl CiArgs {
    fn goal(&self) -> anyhow::Result<Option<vnio_measure::goal::CiGoal>> {
        self.ci
            .as_deref()
            .map(|s| vnio_measure::goal::CiGoal::parse(s, self.max_duration))
            .transpose()
            .map_err(anyhow::Error::msg)
    }
}

pub fn ping(a: PingArgs) -> anyhow::Result<i32> {
    if a.size > 65_000 {
        bail!("--size {} is larger than an ICMP echo can carry", a.size);
    }
    let p = vnio_measure::ping::PingParams {
        targets: a.target,
        interval: a.interval,
        sessions: a.sessions.max(1),
        size: a.size,
        duration: a.duration,
        warmup: a.warmup,
        iterations: a.iterations,
        cpus: a.cpu.map(|c| c.0).unwrap_or_default(),
        rx_timestamp: a.rx_timestamp,
        ci_goal: a.ci.goal()?,
    };
    let doc = vnio_measure::ping::run(&p, stop_on_signal()?, &progress)?;
    emit(&doc, &a.output)
}

#[derive(clap::Args)]
pub struct StreamArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// tcp or udp.
    #[arg(long, short = 'p', value_parser = parse_transport, default_value = "tcp")]
    proto: Transport,
    /// Agent sends, this side receives.
    #[arg(long, short = 'R')]
    reverse: bool,
    /// Bytes per write (TCP, default 128 KiB) or per datagram (UDP, default 1472).
    #[arg(long, short = 's')]
    size: Option<u32>,
    /// UDP: packets per second per target, spread over its sessions.
    #[arg(long, short = 'r')]
    rate: Option<u64>,
    /// UDP: packets sent back to back at each scheduled instant.
    #[arg(long, short = 'b', default_value_t = 1)]
    burst: u32,
}

pub fn stream(a: StreamArgs) -> anyhow::Result<i32> {
    use vnio_measure::stream::{Direction, StreamParams};
    if a.rate.is_some() && a.proto == Transport::Tcp {
        bail!("--rate paces UDP streams; TCP streams run as fast as TCP allows");
    }
    let size = a.size.unwrap_or(if a.proto == Transport::Tcp {
        128 * 1024
    } else {
        1472
    });
    if a.proto == Transport::Udp && !(16..=65_507).contains(&size) {
        bail!("UDP --size must be 16..=65507 bytes (a 16-byte header is carried)");
    }
    let common = a.common.common();
    let p = StreamParams {
        transport: a.proto,
        direction: if a.reverse {
            Direction::Receive
        } else {
            Direction::Send
        },
        size,
        rate_per_session: a
            .rate
            .map(|r| (r / u64::from(common.sessions.max(1))).max(1)),
        burst: a.burst.max(1),
        busy_poll_us: common.busy_poll_us,
    };
    let job = vnio_measure::stream::job(&common, p);
    let doc = vnio_measure::run::run(&common, &job, stop_on_signal()?, &progress)?;
    emit(&doc, &a.common.output)
}
