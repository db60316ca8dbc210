//! The control protocol between a client and `vnio agent`: length-prefixed
//! JSON messages on one TCP connection per test, versioned by `PROTO_VERSION`.
//!
//! Data traffic then flows on separate sockets. Every data socket starts by
//! presenting the test's random key, so an agent only ever serves or sends to
//! the client whose control connection set the test up. A UDP address must
//! also prove it receives what the agent sends there before the agent sends
//! it anything bigger than what it got (see [`crate::cookie`]).

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::cpu::CpuTime;
use crate::env::Placement;

/// Bumped on any incompatible change of the messages below.
/// 2: UDP sessions prove their address with a cookie before data flows.
pub const PROTO_VERSION: u32 = 2;
/// A control message larger than this is garbage, not a test description.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Every UDP datagram starts with the test key and a sequence number.
pub const UDP_HEADER: usize = 16;
/// The largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: u32 = 65_507;
/// The sequence number a client sends to announce its address; the agent
/// answers with a cookie (never more bytes than the hello carried).
pub const UDP_HELLO_SEQ: u64 = u64::MAX;
/// The agent's cookie to an announced address, and the client's echo of it.
pub const UDP_COOKIE_SEQ: u64 = u64::MAX - 1;
/// The agent's acknowledgement: the address is proven, data may flow.
pub const UDP_PROVEN_SEQ: u64 = u64::MAX - 2;
/// Hello, cookie and acknowledgement datagrams: the header and the cookie.
pub const UDP_COOKIE_LEN: usize = UDP_HEADER + 8;
/// Most packets a paced source sends back to back.
pub const MAX_BURST: u32 = 65_536;

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        })
    }
}

/// What the agent does on each data session.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// Request-response: read `request` bytes, answer `response` bytes.
    Echo {
        transport: Transport,
        request: u32,
        response: u32,
    },
    /// Receive and count (client-to-agent stream).
    Sink { transport: Transport },
    /// Send (agent-to-client stream): `size` bytes per write or datagram;
    /// UDP paced at `rate_pps` per session in bursts of `burst` (0: as fast as
    /// the agent allows, i.e. its `--max-rate` shared among the sessions).
    Source {
        transport: Transport,
        size: u32,
        rate_pps: u64,
        burst: u32,
    },
}

impl Workload {
    pub fn transport(&self) -> Transport {
        match self {
            Workload::Echo { transport, .. }
            | Workload::Sink { transport }
            | Workload::Source { transport, .. } => *transport,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TestSpec {
    pub workload: Workload,
    pub sessions: u32,
    /// Upper bound on the test's life, warm-up included; the agent ends it then.
    pub duration_ms: u64,
    /// CPUs for the agent's session threads, used round-robin; empty: unpinned.
    pub cpus: Vec<usize>,
    pub busy_poll_us: Option<u32>,
    /// CLOCK_REALTIME instant at which sources start sending; an agent
    /// refuses one more than [`MAX_START_AHEAD_NS`] ahead of its clock.
    pub start_at_unix_ns: u64,
    /// The address data sessions come from when it is not the control
    /// connection's (a kernel-bypass endpoint on a switch port has its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_from: Option<std::net::IpAddr>,
}

/// How far ahead a test's start instant may be.
pub const MAX_START_AHEAD_NS: u64 = 10_000_000_000;

/// What an agent accepts from one client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    pub max_duration_ms: u64,
    pub max_sessions: u32,
    pub max_rate_pps: u64,
    pub max_message: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_duration_ms: 3_600_000,
            max_sessions: 64,
            max_rate_pps: 5_000_000,
            max_message: 1 << 20,
        }
    }
}

impl Limits {
    /// Why `spec` is refused, if it is, with the agent's clock at `now_unix_ns`.
    pub fn check(&self, spec: &TestSpec, now_unix_ns: u64) -> Result<(), String> {
        let ahead = spec.start_at_unix_ns.saturating_sub(now_unix_ns);
        if ahead > MAX_START_AHEAD_NS {
            return Err(format!(
                "start instant {} s ahead of this agent's clock exceeds the limit of {} s \
                 (are both clocks synchronised?)",
                ahead / 1_000_000_000,
                MAX_START_AHEAD_NS / 1_000_000_000
            ));
        }
        if spec.sessions == 0 {
            return Err("a test needs at least one session".into());
        }
        if spec.sessions > self.max_sessions {
            return Err(format!(
                "{} sessions exceed this agent's limit of {} (--max-sessions)",
                spec.sessions, self.max_sessions
            ));
        }
        if spec.duration_ms > self.max_duration_ms {
            return Err(format!(
                "duration {} s exceeds this agent's limit of {} s (--max-duration)",
                spec.duration_ms / 1000,
                self.max_duration_ms / 1000
            ));
        }
        let sizes: &[u32] = match &spec.workload {
            Workload::Echo {
                request, response, ..
            } => &[*request, *response],
            Workload::Source {
                size,
                rate_pps,
                burst,
                ..
            } => {
                if *burst > MAX_BURST {
                    return Err(format!(
                        "burst {burst} exceeds this agent's limit of {MAX_BURST} packets"
                    ));
                }
                let total = rate_pps.saturating_mul(u64::from(spec.sessions));
                if total > self.max_rate_pps {
                    return Err(format!(
                        "rate {total} pps exceeds this agent's limit of {} pps (--max-rate)",
                        self.max_rate_pps
                    ));
                }
                std::slice::from_ref(size)
            }
            Workload::Sink { .. } => &[],
        };
        for &s in sizes {
            if s > self.max_message || s == 0 {
                return Err(format!(
                    "message size {s} outside 1..={} bytes",
                    self.max_message
                ));
            }
            if spec.workload.transport() == Transport::Udp && (s as usize) < UDP_HEADER {
                return Err(format!(
                    "UDP messages carry a {UDP_HEADER}-byte header: size {s} is too small"
                ));
            }
            if spec.workload.transport() == Transport::Udp && s > MAX_UDP_PAYLOAD {
                return Err(format!(
                    "a UDP datagram carries at most {MAX_UDP_PAYLOAD} bytes: size {s} is too large"
                ));
            }
        }
        Ok(())
    }
}

/// Client to agent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Hello {
        proto: u32,
        client: String,
        token: Option<String>,
    },
    Start {
        spec: TestSpec,
    },
    Stop,
}

/// Traffic counted on one data session.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
}

impl Counters {
    pub fn add(&mut self, o: &Counters) {
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        self.packets_out += o.packets_out;
        self.bytes_out += o.bytes_out;
    }
}

/// The agent's account of a test.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct AgentReport {
    /// CPU time of the threads that served this test, summed.
    pub cpu: CpuTime,
    pub sessions: Vec<Counters>,
    pub placement: Vec<Placement>,
    /// Datagrams or connections that did not present the test key, dropped.
    pub foreign_dropped: u64,
}

/// Agent to client.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Welcome {
        proto: u32,
        agent: String,
        limits: Limits,
    },
    /// The test is set up: its key, and the data port of each session
    /// (one listener for TCP, one socket per session for UDP).
    Ready {
        key: u64,
        ports: Vec<u16>,
    },
    Report {
        report: AgentReport,
    },
    Error {
        message: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error(
        "control message of {0} bytes exceeds the {MAX_MESSAGE}-byte limit (not a vnio peer?)"
    )]
    TooLarge(usize),
    #[error("malformed control message: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub fn write_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(msg)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

pub fn read_msg<R: Read, T: for<'de> Deserialize<'de>>(r: &mut R) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    if let Err(e) = r.read_exact(&mut len) {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Closed
        } else {
            e.into()
        });
    }
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_MESSAGE {
        return Err(FrameError::TooLarge(n));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FrameError::Closed
        } else {
            e.into()
        }
    })?;
    Ok(serde_json::from_slice(&body)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(workload: Workload, sessions: u32) -> TestSpec {
        TestSpec {
            workload,
            sessions,
            duration_ms: 1000,
            cpus: vec![],
            busy_poll_us: None,
            start_at_unix_ns: 0,
            data_from: None,
        }
    }

    #[test]
    fn messages_round_trip() {
        let msgs = vec![
            Request::Hello {
                proto: 1,
                client: "t".into(),
                token: Some("s".into()),
            },
            Request::Start {
                spec: spec(
                    Workload::Echo {
                        transport: Transport::Udp,
                        request: 64,
                        response: 1024,
                    },
                    2,
                ),
            },
            Request::Stop,
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_msg(&mut buf, m).unwrap();
        }
        let mut r = buf.as_slice();
        for m in &msgs {
            assert_eq!(&read_msg::<_, Request>(&mut r).unwrap(), m);
        }
        assert!(matches!(
            read_msg::<_, Request>(&mut r),
            Err(FrameError::Closed)
        ));
    }

    #[test]
    fn garbage_and_truncation_are_errors() {
        let mut r: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        assert!(matches!(
            read_msg::<_, Request>(&mut r),
            Err(FrameError::TooLarge(_))
        ));
        let mut r: &[u8] = &[0, 0, 0, 5, b'{', b'x'];
        assert!(matches!(
            read_msg::<_, Request>(&mut r),
            Err(FrameError::Closed)
        ));
        let mut r: &[u8] = &[0, 0, 0, 2, b'{', b'x'];
        assert!(matches!(
            read_msg::<_, Request>(&mut r),
            Err(FrameError::Malformed(_))
        ));
        let mut r: &[u8] = &[0, 0, 0, 2, b'{', b'}'];
        assert!(matches!(
            read_msg::<_, Request>(&mut r),
            Err(FrameError::Malformed(_))
        ));
    }

    #[test]
    fn limits_refuse_with_reasons() {
        let l = Limits::default();
        let echo = Workload::Echo {
            transport: Transport::Tcp,
            request: 256,
            response: 256,
        };
        assert!(l.check(&spec(echo.clone(), 1), 0).is_ok());
        assert!(l
            .check(&spec(echo.clone(), 0), 0)
            .unwrap_err()
            .contains("at least one"));
        assert!(l
            .check(&spec(echo, 65), 0)
            .unwrap_err()
            .contains("--max-sessions"));
        let small = Workload::Echo {
            transport: Transport::Udp,
            request: 8,
            response: 64,
        };
        assert!(l.check(&spec(small, 1), 0).unwrap_err().contains("header"));
        let big = Workload::Echo {
            transport: Transport::Udp,
            request: 70_000,
            response: 64,
        };
        assert!(l.check(&spec(big, 1), 0).unwrap_err().contains("at most"));
        let fast = Workload::Source {
            transport: Transport::Udp,
            size: 64,
            rate_pps: 1_000_000,
            burst: 8,
        };
        assert!(l
            .check(&spec(fast, 8), 0)
            .unwrap_err()
            .contains("--max-rate"));
        let mut long = spec(
            Workload::Sink {
                transport: Transport::Tcp,
            },
            1,
        );
        long.duration_ms = 10 * 3_600_000;
        assert!(l.check(&long, 0).unwrap_err().contains("--max-duration"));
        let bursty = Workload::Source {
            transport: Transport::Udp,
            size: 64,
            rate_pps: 1,
            burst: u32::MAX,
        };
        assert!(l.check(&spec(bursty, 1), 0).unwrap_err().contains("burst"));
    }

    #[test]
    fn start_instant_far_ahead_is_refused() {
        let l = Limits::default();
        let mut s = spec(
            Workload::Sink {
                transport: Transport::Tcp,
            },
            1,
        );
        let now = 1_000 * 1_000_000_000;
        s.start_at_unix_ns = now + MAX_START_AHEAD_NS;
        assert!(l.check(&s, now).is_ok());
        s.start_at_unix_ns = now + 3600 * 1_000_000_000;
        assert!(l.check(&s, now).unwrap_err().contains("ahead"));
    }
}
