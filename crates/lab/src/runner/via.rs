//! A poll-mode client's workload: `vnio rr --via` as a process of its own.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use vnio_measure::result::Document;

use super::{RunnerOptions, ECHO_PORT};
use crate::scenario::{HostKind, Point, RunSpec};
use crate::testbed::Testbed;

/// A poll-mode client: `vnio rr --via vhost-user:...` drives the switch
/// port's endpoint. It runs as its own process, in the target's
/// namespace, where its control connection reaches the agent over the
/// kernel; the measured datagrams take the endpoint, the switch and the
/// target's tap.
pub(super) fn rr_via(
    bed: &Testbed,
    p: &Point,
    from: &crate::testbed::BedHost,
    to: &crate::testbed::BedHost,
    run: &RunSpec,
    opts: &RunnerOptions,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let w = &p.workload;
    let (sock, mac) = from
        .vhost_user
        .as_ref()
        .ok_or_else(|| format!("{} has no vhost-user port", from.name))?;
    let out = bed.scratch().join(format!("rr-via-{}.json", p.seq));
    let log = bed.scratch().join(format!("rr-via-{}.log", p.seq));
    let fmt = crate::scenario::humantime::format;
    // A poll-mode target answers UDP echo (RFC 862): no control connection,
    // so the client needs no namespace (the target may be on another machine).
    let (mut cmd, target) = if to.kind == HostKind::PollMode {
        let mut cmd = std::process::Command::new(&opts.vnio);
        cmd.arg("rr").arg("--echo-server");
        (cmd, SocketAddr::from((to.addr, ECHO_PORT)))
    } else {
        let ns = to
            .netns()
            .ok_or_else(|| format!("target {} is not a namespace host", to.name))?;
        let mut cmd = ns.command(&opts.vnio);
        cmd.arg("rr");
        (cmd, to.agent_addr())
    };
    cmd.args(["-p", "udp", "-t", &target.to_string()])
        .args(["-s", &format!("{},{}", w.size, w.response_size)])
        .args(["-b", &w.burst.to_string()])
        .args(["-d", &fmt(run.duration), "--warmup", &fmt(run.warmup)])
        .args(["--iterations", &run.iterations.to_string()])
        .arg("--via")
        .arg(format!(
            "vhost-user:{},ip={},mac={mac}{}",
            sock.display(),
            from.addr,
            if bed.description().knobs.poll_mode_wait == Some(true) {
                ",wait"
            } else {
                ""
            }
        ))
        .arg("-o")
        .arg(&out)
        .stdout(std::process::Stdio::null());
    if w.dirty {
        cmd.arg("--dirty");
    }
    if let Some(r) = w.rate {
        cmd.args(["--rate", &r.to_string()]);
        cmd.args(["--arrivals", &w.arrivals.to_string()]);
    }
    // The workload's confidence goal, as in-process runs take it.
    if let Some(ci) = &w.ci {
        cmd.args(["--ci", ci]);
        if let Some(m) = w.max_duration {
            cmd.args(["--max-duration", &fmt(m)]);
        }
    }
    let knobs = &bed.description().knobs;
    for (flag, cpus) in [
        ("--cpu", &knobs.client_cpus),
        ("--agent-cpu", &knobs.agent_cpus),
    ] {
        if let Some(c) = cpus {
            let list: Vec<String> = c.iter().map(|c| c.to_string()).collect();
            cmd.args([flag, &list.join(",")]);
        }
    }
    let child = crate::testbed::spawn(&mut cmd, &opts.journal, &log).map_err(|e| e.to_string())?;
    crate::testbed::wait_or_interrupt(child, stop, "vnio rr --via")?;
    let text = std::fs::read_to_string(&out).map_err(|_| {
        format!(
            "vnio rr --via wrote no result: {}",
            crate::testbed::log_tail(&log)
        )
    })?;
    serde_json::from_str(&text).map_err(|e| format!("vnio rr --via result {}: {e}", out.display()))
}
