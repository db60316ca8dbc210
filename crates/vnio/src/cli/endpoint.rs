//! `vnio endpoint vhost-user:SOCKET,ip=A.B.C.D[,...]`: runs the switch's
//! poll-mode endpoint as a responder (ARP, ICMP echo, UDP echo on one port)
//! until stopped: the kernel-bypass far side for `vnio rr --via ...
//! --echo-server`, so a round trip crosses only switch and endpoints.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use vnio_switch::error_chain;

use crate::cli::measure::{parse_cpus, parse_duration, CpuList};
use vnio_switch::endpoint::via::{parse_via, VhostUserVia};

#[derive(clap::Args)]
pub struct Args {
    /// vhost-user:SOCKET,ip=A.B.C.D[,mac=M][,listen][,wait] (as `vnio rr --via`).
    #[arg(value_parser = parse_via, value_name = "PATH")]
    path: VhostUserVia,
    /// UDP port echoed back (RFC 862).
    #[arg(long, default_value_t = vnio_switch::endpoint::via::ECHO_PORT)]
    echo_port: u16,
    /// Pin the polling thread to this CPU.
    #[arg(long, value_parser = parse_cpus)]
    cpu: Option<CpuList>,
    /// Stop after this long (default: until SIGINT/SIGTERM).
    #[arg(long, short = 'd', value_parser = parse_duration)]
    duration: Option<Duration>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cpu = match a.cpu.map(|c| c.0) {
        Some(c) if c.len() == 1 => Some(c[0]),
        Some(_) => bail!("--cpu takes one CPU for the polling thread"),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handler")?;
    }
    let v = &a.path;
    let mut ep = v.endpoint(Some(a.echo_port)).map_err(anyhow::Error::msg)?;
    let placement = vnio_measure::pin::enter("endpoint".into(), cpu);
    if cpu.is_some() && !placement.pinned {
        eprintln!("vnio endpoint: warning: could not pin to CPU {cpu:?}");
    }
    eprintln!(
        "vnio endpoint: {} on {}, echo port {}, {}",
        v.ip,
        v.socket.display(),
        a.echo_port,
        if v.wait {
            "sleeping on notifications"
        } else {
            "busy-polling"
        }
    );
    let end = a.duration.map(|d| Instant::now() + d);
    let over = || stop.load(Ordering::Relaxed) || end.is_some_and(|e| Instant::now() >= e);
    if v.wait {
        ep.serve(a.duration.unwrap_or(Duration::MAX / 4), &over)
            .map_err(|e| anyhow::anyhow!("endpoint: {}", error_chain(&e)))?;
    } else {
        while !over() {
            // Poll the ring many times per look at the clock and the flag.
            for _ in 0..1024 {
                ep.poll();
            }
        }
    }
    let s = ep.stats();
    eprintln!(
        "vnio endpoint: received {} frames, sent {} ({} answers), {} kicks",
        s.rx_frames, s.tx_frames, s.replies, s.kicks
    );
    Ok(0)
}
