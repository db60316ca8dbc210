//! The client end of the control protocol: one connection per agent.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::proto::{
    read_msg, write_msg, AgentReport, FrameError, Limits, Request, Response, TestSpec,
    PROTO_VERSION,
};

/// The default port of `vnio agent`.
pub const DEFAULT_PORT: u16 = 7700;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot resolve agent address {0:?}: {1}")]
    Resolve(String, String),
    #[error("cannot reach agent at {addr}{hint}")]
    Unreachable {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("agent at {addr} refused: {message}")]
    Refused { addr: SocketAddr, message: String },
    #[error("agent at {addr} speaks protocol {theirs}, this client {ours}: run the same vnio version on both sides")]
    Version {
        addr: SocketAddr,
        theirs: u32,
        ours: u32,
    },
    #[error("agent at {addr} closed the control connection (killed, or restarted?)")]
    Gone { addr: SocketAddr },
    #[error("agent at {addr} did not answer within {secs} s")]
    Timeout { addr: SocketAddr, secs: u64 },
    #[error("agent at {addr} sent an invalid control message ({detail}): is it a vnio agent?")]
    Protocol { addr: SocketAddr, detail: String },
}

/// An error and its causes on one line: "what failed: why: why".
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Parses `HOST[:PORT]` (default port 7700); IPv6 as `[addr]:port`.
pub fn resolve(target: &str) -> Result<SocketAddr, ClientError> {
    let with_port = if target.parse::<std::net::IpAddr>().is_ok() {
        // A bare address, including IPv6 without brackets.
        return Ok(SocketAddr::new(
            target
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
            DEFAULT_PORT,
        ));
    } else if target
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        target.to_string()
    } else {
        format!("{target}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| ClientError::Resolve(target.into(), e.to_string()))?
        .next()
        .ok_or_else(|| ClientError::Resolve(target.into(), "no address".into()))
}

/// An open control connection to an agent.
pub struct Control {
    stream: TcpStream,
    pub addr: SocketAddr,
    pub limits: Limits,
    pub agent: String,
}

/// How long a control answer may take.
const ANSWER: Duration = Duration::from_secs(10);

impl Control {
    pub fn connect(addr: SocketAddr, token: Option<&str>) -> Result<Control, ClientError> {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|source| {
                let hint = match source.kind() {
                    ErrorKind::ConnectionRefused => " (is `vnio agent` running there?)",
                    ErrorKind::TimedOut | ErrorKind::WouldBlock => {
                        " (no answer: wrong address, or a firewall?)"
                    }
                    _ => "",
                };
                ClientError::Unreachable { addr, source, hint }
            })?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(ANSWER));
        let mut c = Control {
            stream,
            addr,
            limits: Limits::default(),
            agent: String::new(),
        };
        let hello = Request::Hello {
            proto: PROTO_VERSION,
            client: format!("vnio {}", env!("CARGO_PKG_VERSION")),
            token: token.map(String::from),
        };
        match c.call(&hello)? {
            Response::Welcome {
                proto,
                agent,
                limits,
            } => {
                if proto != PROTO_VERSION {
                    return Err(ClientError::Version {
                        addr,
                        theirs: proto,
                        ours: PROTO_VERSION,
                    });
                }
                c.limits = limits;
                c.agent = agent;
                Ok(c)
            }
            other => Err(c.unexpected(other)),
        }
    }

    /// Sets up a test; returns its key and data ports.
    pub fn start(&mut self, spec: &TestSpec) -> Result<(u64, Vec<u16>), ClientError> {
        match self.call(&Request::Start { spec: spec.clone() })? {
            Response::Ready { key, ports } => Ok((key, ports)),
            other => Err(self.unexpected(other)),
        }
    }

    /// Ends the running test and returns the agent's account of it.
    pub fn stop(&mut self) -> Result<AgentReport, ClientError> {
        match self.call(&Request::Stop)? {
            Response::Report { report } => Ok(report),
            other => Err(self.unexpected(other)),
        }
    }

    fn call(&mut self, req: &Request) -> Result<Response, ClientError> {
        let addr = self.addr;
        let map = |e: FrameError| match e {
            FrameError::Closed => ClientError::Gone { addr },
            FrameError::Io(io)
                if matches!(io.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                ClientError::Timeout {
                    addr,
                    secs: ANSWER.as_secs(),
                }
            }
            FrameError::Io(io)
                if matches!(
                    io.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
                ) =>
            {
                ClientError::Gone { addr }
            }
            other => ClientError::Protocol {
                addr,
                detail: other.to_string(),
            },
        };
        write_msg(&mut self.stream, req).map_err(map)?;
        read_msg(&mut self.stream).map_err(map)
    }

    fn unexpected(&self, r: Response) -> ClientError {
        match r {
            Response::Error { message } => ClientError::Refused {
                addr: self.addr,
                message,
            },
            other => ClientError::Protocol {
                addr: self.addr,
                detail: format!("unexpected {other:?}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_forms() {
        assert_eq!(
            resolve("127.0.0.1").unwrap(),
            "127.0.0.1:7700".parse().unwrap()
        );
        assert_eq!(
            resolve("127.0.0.1:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(resolve("::1").unwrap(), "[::1]:7700".parse().unwrap());
        assert_eq!(resolve("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(resolve("localhost:9").unwrap().port(), 9);
        assert!(resolve("no.such.host.invalid").is_err());
    }
}
