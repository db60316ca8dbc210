//! The poll-mode endpoint as the measurement engine's datagram path
//! (`vnio rr --via vhost-user:PATH,ip=A.B.C.D[,mac=M][,listen][,wait]`):
//! [`VhostUserVia`] is a [`PathOpener`], so the instrument's rr loops time
//! UDP round trips through a vhost-user port of the switch, the
//! kernel-bypass counterpart of a kernel socket, from the binary, the lab
//! or a test alike.
//!
//! The control connection to the agent still uses the kernel; the agent is
//! told the endpoint's address so it accepts (and answers) its datagrams.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use super::{Endpoint, EndpointConfig, EndpointError};
use crate::error_chain;
use crate::wire::EthernetAddress;
use vnio_measure::clock::now_ns;
use vnio_measure::path::{BoxedPath, Datagrams, PathOpener};

/// How long opening waits for the switch (connect) or for the switch to
/// connect (listen), and for the agent's ARP answer.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a receive waits before the loop looks at its clock again.
const RECV_WAIT_NS: u64 = 50_000_000;
/// UDP source port of session 0 (a fixed port makes captures readable).
const SOURCE_PORT: u16 = 40_000;
/// The UDP echo port (RFC 862) a responder answers on.
pub const ECHO_PORT: u16 = 7;

/// A parsed `--via vhost-user:...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VhostUserVia {
    /// The switch port's vhost-user socket.
    pub socket: PathBuf,
    /// The endpoint's IPv4 address.
    pub ip: Ipv4Addr,
    /// The endpoint's MAC (by default derived from `ip`).
    pub mac: EthernetAddress,
    /// Listen on `socket` for a switch port in client mode (default: connect).
    pub listen: bool,
    /// Sleep on the switch's notifications when idle instead of busy-polling.
    pub wait: bool,
    /// A second endpoint, on another port, that the same thread serves as a
    /// UDP echo responder (port 7): the far side of `--echo-server` runs
    /// without a process or a wake-up of its own, as DPDK's two-port
    /// ping-pong tools do.
    pub responder: Option<Box<VhostUserVia>>,
}

/// Parses `vhost-user:PATH,ip=A.B.C.D[,mac=02:..][,listen][,wait]`.
pub fn parse_via(s: &str) -> Result<VhostUserVia, String> {
    let usage =
        "try vhost-user:/run/vnio/p1.sock,ip=10.0.0.5[,mac=02:00:00:00:00:05][,listen][,wait]";
    let rest = s
        .strip_prefix("vhost-user:")
        .ok_or_else(|| format!("unknown path {s:?}: {usage}"))?;
    let mut parts = rest.split(',');
    let socket = PathBuf::from(parts.next().unwrap_or_default());
    if socket.as_os_str().is_empty() {
        return Err(format!("--via needs a socket path: {usage}"));
    }
    let (mut ip, mut mac, mut listen, mut wait) = (None, None, false, false);
    for opt in parts {
        match opt.split_once('=') {
            Some(("ip", v)) => {
                ip = Some(
                    v.parse::<Ipv4Addr>()
                        .map_err(|_| format!("ip={v:?} is not an IPv4 address"))?,
                )
            }
            Some(("mac", v)) => {
                mac = Some(
                    v.parse::<EthernetAddress>()
                        .map_err(|_| format!("mac={v:?} is not a MAC address"))?,
                )
            }
            None if opt == "listen" => listen = true,
            None if opt == "wait" => wait = true,
            _ => return Err(format!("unknown --via option {opt:?}: {usage}")),
        }
    }
    let ip = ip.ok_or_else(|| format!("--via needs the endpoint's ip=: {usage}"))?;
    // A locally administered MAC derived from the IP: stable across runs,
    // so the switch's FDB and the peer's ARP cache stay valid.
    let o = ip.octets();
    let mac = mac.unwrap_or(EthernetAddress([0x02, 0x76, o[0], o[1], o[2], o[3]]));
    Ok(VhostUserVia {
        socket,
        ip,
        mac,
        listen,
        wait,
        responder: None,
    })
}

impl PathOpener for VhostUserVia {
    fn open(&self, index: usize, agent: SocketAddr) -> Result<BoxedPath, String> {
        if index > 0 {
            return Err("a vhost-user endpoint carries one session (use --sessions 1)".into());
        }
        let SocketAddr::V4(agent) = agent else {
            return Err("the poll-mode endpoint speaks IPv4 only".into());
        };
        // The responder first: the client's ARP request must find it polled.
        let mut peer = match &self.responder {
            Some(r) => Some(r.endpoint(Some(ECHO_PORT))?),
            None => None,
        };
        let mut ep = self.endpoint(None)?;
        let deadline = std::time::Instant::now() + OPEN_TIMEOUT;
        let target = (*agent.ip()).into();
        let resolved = loop {
            if let Some(p) = peer.as_mut() {
                while p.poll().is_some() {}
            }
            match ep.resolve(target, Duration::from_millis(20)) {
                Ok(_) => break Ok(()),
                Err(_) if std::time::Instant::now() < deadline => {}
                Err(e) => break Err(e),
            }
        };
        resolved.map_err(|e| {
            format!(
                "no ARP answer from {} through {} ({}): is the agent on the switch's segment?",
                agent.ip(),
                self.socket.display(),
                error_chain(&e)
            )
        })?;
        Ok(Box::new(EndpointPath {
            ep,
            peer,
            agent,
            port: SOURCE_PORT + index as u16,
            wait: self.wait,
        }))
    }

    fn source(&self) -> IpAddr {
        IpAddr::V4(self.ip)
    }

    fn sessions(&self) -> usize {
        1
    }

    fn describe(&self) -> String {
        let mut d = format!(
            "vhost-user:{} as {} ({}, {})",
            self.socket.display(),
            self.ip,
            self.mac,
            if self.wait { "wait" } else { "busy-poll" }
        );
        if let Some(r) = &self.responder {
            d.push_str(&format!(
                ", echo responder vhost-user:{} as {} in the same thread",
                r.socket.display(),
                r.ip
            ));
        }
        d
    }
}

impl VhostUserVia {
    /// Connects (or listens for) the endpoint this spec describes.
    pub fn endpoint(&self, echo_port: Option<u16>) -> Result<Endpoint, String> {
        let mut cfg = EndpointConfig::new(self.mac, self.ip.into());
        cfg.echo_port = echo_port;
        cfg.connect_timeout = OPEN_TIMEOUT;
        if self.listen {
            Endpoint::listen(&self.socket, cfg, OPEN_TIMEOUT)
        } else {
            Endpoint::connect(&self.socket, cfg)
        }
        .map_err(|e| {
            format!(
                "vhost-user endpoint on {}: {}",
                self.socket.display(),
                error_chain(&e)
            )
        })
    }
}

/// One session's endpoint.
struct EndpointPath {
    ep: Endpoint,
    peer: Option<Endpoint>,
    agent: SocketAddrV4,
    port: u16,
    wait: bool,
}

impl Datagrams for EndpointPath {
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        match self.ep.udp_send_to(self.agent, self.port, payload) {
            Ok(()) => Ok(()),
            Err(EndpointError::TxFull) => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => Err(io::Error::other(error_chain(&e))),
        }
    }

    fn recv_wait(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<u64>)>> {
        let deadline = now_ns() + RECV_WAIT_NS;
        loop {
            // Poll-mode: look at the ring many times per clock read.
            for _ in 0..64 {
                if let Some(n) = self.recv_now(buf)? {
                    return Ok(Some((n, None)));
                }
            }
            let t = now_ns();
            if t >= deadline {
                return Ok(None);
            }
            if self.wait {
                self.sleep(deadline - t)?;
            }
        }
    }

    #[inline]
    fn recv_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if let Some(p) = self.peer.as_mut() {
            while p.poll().is_some() {}
        }
        while let Some((src, dst_port, n)) = self.ep.udp_recv(buf) {
            if src == self.agent && dst_port == self.port {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    fn idle_until(&mut self, next_due: u64) {
        let t = now_ns();
        if self.wait && next_due > t + 100_000 {
            let _ = self.sleep(next_due - t - 50_000);
        }
        // Busy-polling: return, the caller polls the ring again.
    }
}

impl EndpointPath {
    fn sleep(&mut self, ns: u64) -> io::Result<()> {
        // At most 50 ms, so a stop request is seen soon.
        self.ep
            .wait(Duration::from_nanos(ns.min(50_000_000)))
            .map(|_| ())
            .map_err(|e| io::Error::other(error_chain(&e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_spec() {
        let v = parse_via("vhost-user:/run/p1.sock,ip=10.0.0.5,mac=02:00:00:00:00:09,listen,wait")
            .unwrap();
        assert_eq!(v.socket, PathBuf::from("/run/p1.sock"));
        assert_eq!(v.ip, Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(v.mac, EthernetAddress([2, 0, 0, 0, 0, 9]));
        assert!(v.listen && v.wait);
    }

    #[test]
    fn derives_a_stable_local_mac_from_the_ip() {
        let v = parse_via("vhost-user:/s,ip=10.1.2.3").unwrap();
        assert_eq!(v.mac, EthernetAddress([2, 0x76, 10, 1, 2, 3]));
        assert!(!v.listen && !v.wait);
    }

    #[test]
    fn rejects_what_it_cannot_use() {
        for (bad, says) in [
            ("tap:/x", "unknown path"),
            ("vhost-user:", "socket path"),
            ("vhost-user:/s", "ip="),
            ("vhost-user:/s,ip=10.0.0.300", "not an IPv4"),
            ("vhost-user:/s,ip=10.0.0.1,mac=zz", "not a MAC"),
            ("vhost-user:/s,ip=10.0.0.1,turbo", "unknown --via option"),
        ] {
            let e = parse_via(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
