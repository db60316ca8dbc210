//! Waiting for a guest's agent: poll its control port until it answers
//! the protocol's hello, and report the time from QEMU's launch.

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
    let started = Instant::now();
    let mut last_err = String::from("no answer yet");
    loop {
        if interrupt.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        if !st.pid.is_some_and(|p| state::is_ours(p, dir)) {
            let serial = std::fs::read_to_string(dir.serial_log()).unwrap_or_default();
            return Err(Error::Guest(format!(
                "VM {} is not running (last console line: {})",
                st.spec.name,
                serial
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("none")
            )));
        }
        // A short TCP connect first: an address without a neighbour yet
        // would hold the hello's own connect for seconds.
        if TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok() {
            match vnio_measure::client::Control::connect(target, st.agent_token.as_deref()) {
                Ok(c) => {
                    let since_launch =
                        Duration::from_nanos(state::monotonic_ns().saturating_sub(st.launched_ns));
                    let waited = started.elapsed();
                    // Init prints its ready line once it sees the agent
                    // listening, which can be just after we got in.
                    let mut guest_uptime = None;
                    for _ in 0..40 {
                        let serial = std::fs::read_to_string(dir.serial_log()).unwrap_or_default();
                        guest_uptime = guest_ready_uptime(&serial);
                        if guest_uptime.is_some() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    return Ok(Ready {
                        addr: target,
                        agent: c.agent.clone(),
                        since_launch,
                        waited,
                        guest_uptime,
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
