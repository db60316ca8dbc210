//! Waiting for a guest's agent: poll its control port until it answers
//! the protocol's hello, and report the time from QEMU's launch. The
//! guest's own address is polled only when this host has a route of its
//! own into the guest's network ([`crate::reach`]); otherwise the agent is
//! looked for from inside the guest, through its command channel, rather
//! than asking whatever answers at that address elsewhere.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::init::READY_MARKER;
use crate::state::{self, State, VmDir};

/// An agent that answered.
#[derive(Debug, Clone)]
pub struct Ready {
    /// Where it answered.
    pub addr: SocketAddr,
    /// Its self-description from the hello.
    pub agent: String,
    /// From QEMU's launch to the first answer.
    pub since_launch: Duration,
    /// How long this call waited.
    pub waited: Duration,
    /// The guest's uptime when init printed its ready line (from the serial log).
    pub guest_uptime: Option<f64>,
    /// How the agent was reached (a route, the address given, or the
    /// command channel and why).
    pub path: String,
}

/// The guest's uptime in its `vnio-guest: ready at N s` console line.
pub fn guest_ready_uptime(serial: &str) -> Option<f64> {
    let line = serial.lines().find(|l| l.contains(READY_MARKER))?;
    let rest = line.split(READY_MARKER).nth(1)?;
    let n = rest.trim_start().strip_prefix("at ")?;
    n.split('s').next()?.trim().parse().ok()
}

/// The agent's address: `addr` if given, else the VM's first address.
pub fn agent_addr(st: &State, addr: Option<IpAddr>) -> Result<SocketAddr> {
    if st.agent_port == 0 {
        return Err(Error::Invalid(format!(
            "VM {} runs no agent (--agent-port 0)",
            st.spec.name
        )));
    }
    let ip = match addr {
        Some(a) => a,
        None => st
            .addrs
            .first()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "VM {} has no address: give its NIC ip=ADDR/PREFIX, or pass --address",
                    st.spec.name
                ))
            })?,
    };
    Ok(SocketAddr::new(ip, st.agent_port))
}

/// Polls until the agent of the VM in `dir` answers, QEMU dies, `timeout`
/// passes or `interrupt` is set. Run it where the guest's address is
/// reachable (e.g. inside the namespace of a switch tap port).
pub fn wait_agent(
    dir: &VmDir,
    addr: Option<IpAddr>,
    timeout: Duration,
    interrupt: &AtomicBool,
) -> Result<Ready> {
    let st = State::load(dir)?;
    let target = agent_addr(&st, addr)?;
    let path = match addr {
        Some(_) => "the address given".to_string(),
        None => match crate::reach::path_to(&st, target.ip()) {
            crate::reach::Path::Channel(why) => {
                return wait_in_guest(dir, &st, target, why, timeout, interrupt)
            }
            route => route.to_string(),
        },
    };
    let started = Instant::now();
    let mut last_err = String::from("no answer yet");
    loop {
        if interrupt.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        if let Some(e) = not_running(dir, &st) {
            return Err(e);
        }
        // A short TCP connect first: an address without a neighbour yet
        // would hold the hello's own connect for seconds.
        if TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok() {
            match vnio_measure::client::Control::connect(target, st.agent_token.as_deref()) {
                Ok(c) => {
                    let since_launch =
                        Duration::from_nanos(state::monotonic_ns().saturating_sub(st.launched_ns));
                    let waited = started.elapsed();
                    return Ok(Ready {
                        addr: target,
                        agent: c.agent.clone(),
                        since_launch,
                        waited,
                        guest_uptime: uptime_from_console(dir),
                        path,
                    });
                }
                Err(e) => last_err = vnio_measure::client::one_line(&e),
            }
        }
        if started.elapsed() > timeout {
            return Err(Error::Guest(format!(
                "VM {}: the agent at {target} did not answer within {} s ({last_err})",
                st.spec.name,
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Init prints its ready line once it sees the agent listening, which can
/// be just after the agent was found: its guest uptime, read from the
/// console log within 2 s.
fn uptime_from_console(dir: &VmDir) -> Option<f64> {
    for _ in 0..40 {
        let serial = std::fs::read_to_string(dir.serial_log()).unwrap_or_default();
        if let Some(u) = guest_ready_uptime(&serial) {
            return Some(u);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The VM is not running: an error with its console's last line.
fn not_running(dir: &VmDir, st: &State) -> Option<Error> {
    if st.pid.is_some_and(|p| state::is_ours(p, dir)) {
        return None;
    }
    let serial = std::fs::read_to_string(dir.serial_log()).unwrap_or_default();
    Some(Error::Guest(format!(
        "VM {} is not running (last console line: {})",
        st.spec.name,
        serial
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("none")
    )))
}

/// Waits from inside the guest, over its command channel, until its agent
/// listens on its port (`why`: this host has no route of its own to it).
fn wait_in_guest(
    dir: &VmDir,
    st: &State,
    target: SocketAddr,
    why: String,
    timeout: Duration,
    interrupt: &AtomicBool,
) -> Result<Ready> {
    let started = Instant::now();
    let port = target.port();
    let check = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("netstat -ltn 2>/dev/null | grep -q ':{port} '"),
    ];
    loop {
        if interrupt.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        if let Some(e) = not_running(dir, st) {
            return Err(e);
        }
        let last = match crate::exec::exec(dir, &check, Duration::from_secs(5)) {
            Ok(o) if o.success() => {
                return Ok(Ready {
                    addr: target,
                    agent: format!("vnio agent listening on port {port} inside the guest"),
                    since_launch: Duration::from_nanos(
                        state::monotonic_ns().saturating_sub(st.launched_ns),
                    ),
                    waited: started.elapsed(),
                    guest_uptime: uptime_from_console(dir),
                    path: format!("the guest's command channel ({why})"),
                })
            }
            Ok(_) => format!("nothing listens on port {port} inside the guest yet"),
            Err(e) => e.to_string(),
        };
        if started.elapsed() > timeout {
            return Err(Error::Guest(format!(
                "VM {}: the agent did not listen within {} s, looked for through the command channel since {why} ({last})",
                st.spec.name,
                timeout.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_uptime_is_read_from_the_ready_line() {
        let log = "noise\nvnio-guest: init at 2.44s\nvnio-guest: ready at 3.31s host t1 addrs agent 7700\n";
        assert_eq!(guest_ready_uptime(log), Some(3.31));
        assert_eq!(guest_ready_uptime("vnio-guest: init at 1s"), None);
    }
}
