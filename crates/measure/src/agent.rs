//! `vnio agent`: the far side of every workload. One thread per control
//! connection, one per data session; a bad client costs only its own threads,
//! and every thread and socket of a test is gone when the test ends.
//!
//! Anyone on the network may talk to an agent, so what a test commits is
//! reserved from a budget first ([`crate::budget`]), UDP addresses prove
//! they receive before the agent sends them more than they sent
//! ([`crate::cookie`]), every send rate is capped, and every wait ends when
//! the client or the agent stops.

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::budget::{Budget, Ledger, Need, Reservation};
mod session;

use session::{accept_sessions, run_session, udp_session};

use crate::clock;
use crate::cookie::Cookies;
use crate::cpu::CpuTime;
use crate::env::Placement;
use crate::proto::{
    read_msg, write_msg, AgentReport, Counters, FrameError, Limits, Request, Response, TestSpec,
    Transport, PROTO_VERSION,
};

/// How often blocked threads look at their stop flag.
const POLL: Duration = Duration::from_millis(100);
/// A client has this long to say hello, and data sessions to present their key.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// An agent ends a test this long after its announced duration if the client
/// never says stop (it vanished without closing the connection).
const GRACE: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub limits: Limits,
    /// Control connections served at once; more are refused.
    pub max_clients: usize,
    /// A client that sends no request this long outside a test is dropped.
    pub idle: Duration,
    /// Threads and session buffers, per client and in total.
    pub budget: Budget,
}

/// The default idle timeout after hello.
pub const IDLE: Duration = Duration::from_secs(30);

impl AgentConfig {
    /// An agent on `listen` with the default limits, budget and timeouts.
    pub fn new(listen: SocketAddr) -> AgentConfig {
        AgentConfig {
            listen,
            token: None,
            limits: Limits::default(),
            max_clients: 64,
            idle: IDLE,
            budget: Budget::default(),
        }
    }
}

/// What every client thread shares.
struct Context {
    config: AgentConfig,
    ledger: Ledger,
    cookies: Arc<Cookies>,
    stop: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen on {addr}{hint}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("agent listener failed")]
    Accept(#[source] std::io::Error),
}

/// A bound agent, ready to serve.
pub struct Agent {
    listener: TcpListener,
    config: AgentConfig,
    stop: Arc<AtomicBool>,
    clients: Arc<AtomicUsize>,
}

impl Agent {
    pub fn bind(config: AgentConfig) -> Result<Agent, AgentError> {
        let listener = TcpListener::bind(config.listen).map_err(|source| {
            let hint = match source.kind() {
                ErrorKind::AddrInUse => {
                    " (another agent already listens there? choose another port with --listen)"
                }
                ErrorKind::PermissionDenied => " (ports below 1024 need root)",
                ErrorKind::AddrNotAvailable => " (no interface has that address)",
                _ => "",
            };
            AgentError::Bind {
                addr: config.listen,
                source,
                hint,
            }
        })?;
        Ok(Agent {
            listener,
            config,
            stop: Arc::new(AtomicBool::new(false)),
            clients: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// Setting this flag makes [`Agent::serve`] return.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Control connections being served now.
    pub fn active_clients(&self) -> Arc<AtomicUsize> {
        self.clients.clone()
    }

    /// Serves clients until the stop flag is set; waits for them to finish.
    pub fn serve(self) -> Result<(), AgentError> {
        self.listener
            .set_nonblocking(true)
            .map_err(AgentError::Accept)?;
        let mut handlers: Vec<JoinHandle<()>> = Vec::new();
        let cx = Arc::new(Context {
            ledger: Ledger::new(self.config.budget),
            cookies: Arc::default(),
            config: self.config.clone(),
            stop: self.stop.clone(),
        });
        while !self.stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    handlers.retain(|h| !h.is_finished());
                    let _ = stream.set_nonblocking(false);
                    if self.clients.load(Ordering::Relaxed) >= self.config.max_clients {
                        let m = "agent busy: too many clients at once (--max-clients), retry later";
                        eprintln!("vnio agent: client {peer}: refused: {m}");
                        refuse(stream, m);
                        continue;
                    }
                    self.clients.fetch_add(1, Ordering::Relaxed);
                    let (cx, clients) = (cx.clone(), self.clients.clone());
                    let spawned = std::thread::Builder::new()
                        .name(format!("ctl-{peer}"))
                        .spawn(move || {
                            if let Err(e) = serve_client(stream, peer, &cx) {
                                eprintln!("vnio agent: client {peer}: {e}");
                            }
                            clients.fetch_sub(1, Ordering::Relaxed);
                        });
                    match spawned {
                        Ok(h) => handlers.push(h),
                        Err(e) => {
                            self.clients.fetch_sub(1, Ordering::Relaxed);
                            eprintln!("vnio agent: cannot start a thread for {peer}: {e}");
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Out of descriptors and the like: say so, keep serving others.
                Err(e) => {
                    eprintln!("vnio agent: accept failed: {e}");
                    std::thread::sleep(POLL);
                }
            }
        }
        for h in handlers {
            let _ = h.join();
        }
        Ok(())
    }
}

fn refuse(mut stream: TcpStream, message: &str) {
    let _ = stream.set_write_timeout(Some(POLL));
    let _ = write_msg(
        &mut stream,
        &Response::Error {
            message: message.into(),
        },
    );
}

#[derive(Debug, thiserror::Error)]
enum ClientError {
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("refused: {0}")]
    Refused(String),
}

/// Tells the client why, in one line, and logs the same line.
fn tell_refusal(ctl: &mut TcpStream, peer: SocketAddr, message: &str) -> Result<(), FrameError> {
    eprintln!("vnio agent: client {peer}: refused: {message}");
    write_msg(
        ctl,
        &Response::Error {
            message: format!("refused: {message}"),
        },
    )
}

fn serve_client(mut ctl: TcpStream, peer: SocketAddr, cx: &Context) -> Result<(), ClientError> {
    handshake(&mut ctl, &cx.config)?;
    let local_ip = ctl.local_addr().map_err(FrameError::from)?.ip();
    loop {
        let Some(req) = next_request(&mut ctl, cx)? else {
            return Ok(());
        };
        match req {
            Request::Start { spec } => {
                if run_test(&mut ctl, peer, local_ip, cx, &spec)?.is_break() {
                    return Ok(());
                }
            }
            Request::Stop => write_msg(
                &mut ctl,
                &Response::Error {
                    message: "no test is running".into(),
                },
            )?,
            Request::Hello { .. } => write_msg(
                &mut ctl,
                &Response::Error {
                    message: "already said hello".into(),
                },
            )?,
        }
    }
}

/// The client's hello, within [`HANDSHAKE`]: the protocol version and
/// token checked, welcomed with the agent's limits or refused in one line.
fn handshake(ctl: &mut TcpStream, config: &AgentConfig) -> Result<(), ClientError> {
    ctl.set_read_timeout(Some(HANDSHAKE))
        .map_err(FrameError::from)?;
    ctl.set_write_timeout(Some(HANDSHAKE))
        .map_err(FrameError::from)?;
    ctl.set_nodelay(true).map_err(FrameError::from)?;
    let hello: Result<Request, _> = read_msg(ctl);
    let refusal = match hello {
        Ok(Request::Hello { proto, token, .. }) => {
            if proto != PROTO_VERSION {
                Some(format!("protocol version {proto} not supported: this agent speaks {PROTO_VERSION} (vnio {})", env!("CARGO_PKG_VERSION")))
            } else if config.token.is_some() && token != config.token {
                Some("wrong or missing token (--token)".to_string())
            } else {
                None
            }
        }
        Ok(_) => Some("expected hello first".to_string()),
        Err(e @ (FrameError::TooLarge(_) | FrameError::Malformed(_))) => {
            let _ = write_msg(
                ctl,
                &Response::Error {
                    message: e.to_string(),
                },
            );
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(message) = refusal {
        let _ = write_msg(
            ctl,
            &Response::Error {
                message: message.clone(),
            },
        );
        return Err(ClientError::Refused(message));
    }
    write_msg(
        ctl,
        &Response::Welcome {
            proto: PROTO_VERSION,
            agent: format!("vnio {}", env!("CARGO_PKG_VERSION")),
            limits: config.limits.clone(),
        },
    )?;
    Ok(())
}

/// The client's next request between tests; `None` when the connection
/// ends quietly (closed, or the agent stopping). An idle client is told
/// and dropped: it holds a slot and a thread.
fn next_request(ctl: &mut TcpStream, cx: &Context) -> Result<Option<Request>, ClientError> {
    let config = &cx.config;
    ctl.set_read_timeout(Some(POLL)).map_err(FrameError::from)?;
    // Between tests a client holds a slot and a thread: only so long.
    let idle_until = clock::now_ns() + config.idle.as_nanos() as u64;
    match read_with_stop(ctl, &cx.stop, Some(idle_until)) {
        Ok(Some(r)) => Ok(Some(r)),
        Ok(None) if cx.stop.load(Ordering::Relaxed) => Ok(None),
        Ok(None) => {
            let m = format!(
                "idle: no request for {} s, closing the connection",
                config.idle.as_secs_f64()
            );
            let _ = write_msg(ctl, &Response::Error { message: m.clone() });
            Err(ClientError::Refused(m))
        }
        Err(FrameError::Closed) => Ok(None),
        Err(e) => {
            let _ = write_msg(
                ctl,
                &Response::Error {
                    message: e.to_string(),
                },
            );
            Err(e.into())
        }
    }
}

/// A test the client asked for: within the limits and the ledger's
/// budget, or refused (the client may ask again); run until the client's
/// stop, then reported. `Break` when the connection is over.
fn run_test(
    ctl: &mut TcpStream,
    peer: SocketAddr,
    local_ip: IpAddr,
    cx: &Context,
    spec: &TestSpec,
) -> Result<ControlFlow<()>, ClientError> {
    if let Err(reason) = cx.config.limits.check(spec, clock::realtime_ns()) {
        tell_refusal(ctl, peer, &reason)?;
        return Ok(ControlFlow::Continue(()));
    }
    let budget = match cx.ledger.reserve(Need::of(spec)) {
        Ok(r) => r,
        Err(e) => {
            tell_refusal(ctl, peer, &e.to_string())?;
            return Ok(ControlFlow::Continue(()));
        }
    };
    let test = match Test::start(spec, local_ip, peer.ip(), cx, budget) {
        Ok(t) => t,
        Err(e) => {
            let m = format!("cannot set up the test: {e}");
            tell_refusal(ctl, peer, &m)?;
            return Ok(ControlFlow::Continue(()));
        }
    };
    write_msg(
        ctl,
        &Response::Ready {
            key: test.key,
            ports: test.ports.clone(),
        },
    )?;
    let deadline = clock::now_ns() + spec.duration_ms * 1_000_000 + GRACE.as_nanos() as u64;
    let outcome = read_with_stop(ctl, &cx.stop, Some(deadline));
    let report = test.finish();
    match outcome {
        Ok(Some(Request::Stop)) => write_msg(ctl, &Response::Report { report })?,
        Ok(Some(_)) => {
            write_msg(
                ctl,
                &Response::Error {
                    message: "expected stop during a test".into(),
                },
            )?;
        }
        // Deadline passed, agent stopping, or client gone: the test is over.
        Ok(None) | Err(FrameError::Closed) => return Ok(ControlFlow::Break(())),
        Err(e) => return Err(e.into()),
    }
    Ok(ControlFlow::Continue(()))
}

/// Reads one request, waking every POLL to honour the agent's stop flag and an
/// optional deadline; None when either ends the wait.
fn read_with_stop(
    ctl: &mut TcpStream,
    stop: &AtomicBool,
    deadline_ns: Option<u64>,
) -> Result<Option<Request>, FrameError> {
    loop {
        if stop.load(Ordering::Relaxed) || deadline_ns.is_some_and(|d| clock::now_ns() > d) {
            return Ok(None);
        }
        // Peek for the first byte so a timeout never splits a frame.
        let mut b = [0u8; 1];
        match ctl.peek(&mut b) {
            Ok(0) => return Err(FrameError::Closed),
            Ok(_) => {
                ctl.set_read_timeout(Some(HANDSHAKE))?;
                let r = read_msg(ctl);
                ctl.set_read_timeout(Some(POLL))?;
                return r.map(Some);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// One running test: its data sockets, session threads and budget. Dropping
/// it (a set-up that failed half-way included) stops and joins every thread
/// it started and gives the budget back.
struct Test {
    key: u64,
    ports: Vec<u16>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<SessionEnd>>,
    _budget: Reservation,
}

struct Shared {
    stop: AtomicBool,
    foreign: AtomicU64,
    /// Session threads started by the TCP acceptor, joined at the end.
    late_threads: std::sync::Mutex<Vec<JoinHandle<SessionEnd>>>,
}

/// What a session needs to know besides its socket.
struct Session {
    index: usize,
    key: u64,
    /// Data must come from here: the control connection's address, or the
    /// one the client declared.
    client_ip: IpAddr,
    spec: TestSpec,
    /// The agent's ceiling on what this session sends per second.
    max_pps: u64,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct SessionEnd {
    index: usize,
    counters: Counters,
    cpu: CpuTime,
    placement: Option<Placement>,
}

fn random_key() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        return clock::realtime_ns() ^ (u64::from(std::process::id()) << 32);
    }
    u64::from_ne_bytes(b)
}

impl Test {
    fn start(
        spec: &TestSpec,
        local_ip: IpAddr,
        control_ip: IpAddr,
        cx: &Context,
        budget: Reservation,
    ) -> std::io::Result<Test> {
        let mut test = Test {
            key: random_key(),
            ports: Vec::new(),
            shared: Arc::new(Shared {
                stop: AtomicBool::new(false),
                foreign: AtomicU64::new(0),
                late_threads: Default::default(),
            }),
            threads: Vec::new(),
            _budget: budget,
        };
        let sessions = spec.sessions as usize;
        let session = |index| Session {
            index,
            key: test.key,
            client_ip: spec.data_from.unwrap_or(control_ip),
            spec: spec.clone(),
            // Sessions share the agent's rate cap; an unpaced source gets its share.
            max_pps: (cx.config.limits.max_rate_pps / sessions.max(1) as u64).max(1),
            shared: test.shared.clone(),
        };
        // Every `?` below drops `test`, which stops what was started.
        match spec.workload.transport() {
            Transport::Tcp => {
                let listener = TcpListener::bind(SocketAddr::new(local_ip, 0))?;
                test.ports.push(listener.local_addr()?.port());
                listener.set_nonblocking(true)?;
                let s = session(usize::MAX);
                test.threads.push(
                    std::thread::Builder::new()
                        .name("tcp-accept".into())
                        .spawn(move || {
                            accept_sessions(listener, &s);
                            SessionEnd {
                                index: usize::MAX,
                                ..Default::default()
                            }
                        })?,
                );
            }
            Transport::Udp => {
                for i in 0..sessions {
                    let sock = UdpSocket::bind(SocketAddr::new(local_ip, 0))?;
                    sock.set_read_timeout(Some(POLL))?;
                    test.ports.push(sock.local_addr()?.port());
                    let s = session(i);
                    let cookies = cx.cookies.clone();
                    test.threads.push(
                        std::thread::Builder::new()
                            .name(format!("udp-{i}"))
                            .spawn(move || {
                                run_session(&s, |c| udp_session(&sock, &s, &cookies, c))
                            })?,
                    );
                }
            }
        }
        Ok(test)
    }

    /// Stops every session and joins every thread; what they did.
    fn join_all(&mut self) -> Vec<SessionEnd> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut ends: Vec<SessionEnd> = self
            .threads
            .drain(..)
            .filter_map(|h| h.join().ok())
            .collect();
        let late: Vec<_> = self
            .shared
            .late_threads
            .lock()
            .map(|mut v| v.drain(..).collect())
            .unwrap_or_default();
        ends.extend(
            late.into_iter()
                .filter_map(|h: JoinHandle<SessionEnd>| h.join().ok()),
        );
        ends
    }

    /// Ends the test; the sum of what its sessions did.
    fn finish(mut self) -> AgentReport {
        let mut ends = self.join_all();
        ends.retain(|e| e.index != usize::MAX);
        ends.sort_by_key(|e| e.index);
        let mut report = AgentReport {
            foreign_dropped: self.shared.foreign.load(Ordering::Relaxed),
            ..Default::default()
        };
        for e in ends {
            report.cpu.add(e.cpu);
            report.sessions.push(e.counters);
            report.placement.extend(e.placement);
        }
        report
    }
}

impl Drop for Test {
    fn drop(&mut self) {
        self.join_all();
    }
}
