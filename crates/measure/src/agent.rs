//! `vnio agent`: the far side of every workload. One thread per control
//! connection, one per data session; a bad client costs only its own threads,
//! and every thread and socket of a test is gone when the test ends.
//!
//! Anyone on the network may talk to an agent, so what a test commits is
//! reserved from a budget first ([`crate::budget`]), UDP addresses prove
//! they receive before the agent sends them more than they sent
//! ([`crate::cookie`]), every send rate is capped, and every wait ends when
//! the client or the agent stops.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::budget::{Budget, Ledger, Need, Reservation, SINK_BUF, UDP_BUF};
use crate::clock;
use crate::cookie::{self, Cookies};
use crate::cpu::CpuTime;
use crate::env::Placement;
use crate::pace::Schedule;
use crate::pin;
use crate::proto::{
    read_msg, write_msg, AgentReport, Counters, FrameError, Limits, Request, Response, TestSpec,
    Transport, Workload, PROTO_VERSION, UDP_COOKIE_LEN, UDP_COOKIE_SEQ, UDP_HEADER, UDP_HELLO_SEQ,
    UDP_PROVEN_SEQ,
};
use crate::session::{read_full, would_block, write_full};
use crate::sys;

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
    let config = &cx.config;
    ctl.set_read_timeout(Some(HANDSHAKE))
        .map_err(FrameError::from)?;
    ctl.set_write_timeout(Some(HANDSHAKE))
        .map_err(FrameError::from)?;
    ctl.set_nodelay(true).map_err(FrameError::from)?;
    let hello: Result<Request, _> = read_msg(&mut ctl);
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
                &mut ctl,
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
            &mut ctl,
            &Response::Error {
                message: message.clone(),
            },
        );
        return Err(ClientError::Refused(message));
    }
    write_msg(
        &mut ctl,
        &Response::Welcome {
            proto: PROTO_VERSION,
            agent: format!("vnio {}", env!("CARGO_PKG_VERSION")),
            limits: config.limits.clone(),
        },
    )?;
    let local_ip = ctl.local_addr().map_err(FrameError::from)?.ip();
    loop {
        ctl.set_read_timeout(Some(POLL)).map_err(FrameError::from)?;
        // Between tests a client holds a slot and a thread: only so long.
        let idle_until = clock::now_ns() + config.idle.as_nanos() as u64;
        let req = match read_with_stop(&mut ctl, &cx.stop, Some(idle_until)) {
            Ok(Some(r)) => r,
            Ok(None) if cx.stop.load(Ordering::Relaxed) => return Ok(()),
            Ok(None) => {
                let m = format!(
                    "idle: no request for {} s, closing the connection",
                    config.idle.as_secs_f64()
                );
                let _ = write_msg(&mut ctl, &Response::Error { message: m.clone() });
                return Err(ClientError::Refused(m));
            }
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => {
                let _ = write_msg(
                    &mut ctl,
                    &Response::Error {
                        message: e.to_string(),
                    },
                );
                return Err(e.into());
            }
        };
        match req {
            Request::Start { spec } => {
                if let Err(reason) = config.limits.check(&spec, clock::realtime_ns()) {
                    tell_refusal(&mut ctl, peer, &reason)?;
                    continue;
                }
                let budget = match cx.ledger.reserve(Need::of(&spec)) {
                    Ok(r) => r,
                    Err(e) => {
                        tell_refusal(&mut ctl, peer, &e.to_string())?;
                        continue;
                    }
                };
                let test = match Test::start(&spec, local_ip, peer.ip(), cx, budget) {
                    Ok(t) => t,
                    Err(e) => {
                        let m = format!("cannot set up the test: {e}");
                        tell_refusal(&mut ctl, peer, &m)?;
                        continue;
                    }
                };
                write_msg(
                    &mut ctl,
                    &Response::Ready {
                        key: test.key,
                        ports: test.ports.clone(),
                    },
                )?;
                let deadline =
                    clock::now_ns() + spec.duration_ms * 1_000_000 + GRACE.as_nanos() as u64;
                let outcome = read_with_stop(&mut ctl, &cx.stop, Some(deadline));
                let report = test.finish();
                match outcome {
                    Ok(Some(Request::Stop)) => write_msg(&mut ctl, &Response::Report { report })?,
                    Ok(Some(_)) => {
                        write_msg(
                            &mut ctl,
                            &Response::Error {
                                message: "expected stop during a test".into(),
                            },
                        )?;
                    }
                    // Deadline passed, agent stopping, or client gone: the test is over.
                    Ok(None) | Err(FrameError::Closed) => return Ok(()),
                    Err(e) => return Err(e.into()),
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
                    let cookies = cx.cookies_handle();
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

impl Context {
    /// The cookie secret, for a session thread.
    fn cookies_handle(&self) -> Arc<Cookies> {
        self.cookies.clone()
    }
}

/// Runs one session's work on the calling thread with its placement and CPU
/// accounting around it.
fn run_session(s: &Session, work: impl FnOnce(&mut Counters)) -> SessionEnd {
    let placement = pin::enter(
        format!("agent session {}", s.index),
        pin::pick(&s.spec.cpus, s.index),
    );
    let cpu0 = CpuTime::thread();
    let mut counters = Counters::default();
    work(&mut counters);
    SessionEnd {
        index: s.index,
        counters,
        cpu: CpuTime::thread().since(cpu0),
        placement: Some(pin::finish(placement)),
    }
}

fn accept_sessions(listener: TcpListener, test: &Session) {
    let shared = &test.shared;
    let mut seen = vec![false; test.spec.sessions as usize];
    while !shared.stop.load(Ordering::Relaxed) && seen.iter().any(|s| !s) {
        let (mut stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(POLL);
                continue;
            }
        };
        // Only the client that set up the test, presenting its key, is served.
        // A TCP handshake already proves the peer receives at its address.
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(HANDSHAKE));
        let mut hdr = [0u8; 12];
        let index = match stream.read_exact(&mut hdr) {
            Ok(())
                if peer.ip() == test.client_ip
                    && u64::from_be_bytes(hdr[..8].try_into().unwrap_or_default()) == test.key =>
            {
                u32::from_be_bytes(hdr[8..].try_into().unwrap_or_default()) as usize
            }
            _ => usize::MAX,
        };
        if index >= seen.len() || seen[index] {
            shared.foreign.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        seen[index] = true;
        let s = Session {
            index,
            key: test.key,
            client_ip: test.client_ip,
            spec: test.spec.clone(),
            max_pps: test.max_pps,
            shared: shared.clone(),
        };
        let h = std::thread::Builder::new()
            .name(format!("tcp-{index}"))
            .spawn(move || run_session(&s, |c| tcp_session(stream, &s, c)));
        match (h, shared.late_threads.lock()) {
            (Ok(h), Ok(mut late)) => late.push(h),
            (Ok(h), Err(_)) => drop(h.join()),
            // The connection closes with the dropped closure: the client sees it.
            (Err(e), _) => eprintln!("vnio agent: cannot start data session {index}: {e}"),
        }
    }
}

fn stopped(shared: &Shared) -> bool {
    shared.stop.load(Ordering::Relaxed)
}

/// Sleeps until CLOCK_REALTIME reaches `unix_ns` in slices, so that the end
/// of the test ends the wait; false if it ended it.
fn sleep_until_realtime(unix_ns: u64, shared: &Shared) -> bool {
    loop {
        if stopped(shared) {
            return false;
        }
        let left = unix_ns.saturating_sub(clock::realtime_ns());
        if left == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_nanos(left).min(POLL));
    }
}

/// Waits until CLOCK_MONOTONIC reaches `due_ns`, precisely at the end (see
/// [`clock::wait_until`]) and in slices before; false if the test ended.
fn wait_until(due_ns: u64, shared: &Shared) -> bool {
    let slice = POLL.as_nanos() as u64;
    while due_ns.saturating_sub(clock::now_ns()) > slice {
        if stopped(shared) {
            return false;
        }
        std::thread::sleep(POLL);
    }
    clock::wait_until(due_ns);
    !stopped(shared)
}

fn tcp_session(mut s: TcpStream, test: &Session, c: &mut Counters) {
    let (spec, shared) = (&test.spec, &*test.shared);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    if let Some(us) = spec.busy_poll_us {
        let _ = sys::set_busy_poll(s.as_fd(), us);
    }
    match spec.workload {
        Workload::Echo {
            request, response, ..
        } => {
            let mut req = vec![0u8; request as usize];
            let resp = vec![0x5au8; response as usize];
            let over = || stopped(shared);
            while read_full(&mut s, &mut req, over).is_ok() {
                c.packets_in += 1;
                c.bytes_in += u64::from(request);
                if write_full(&mut s, &resp, over).is_err() {
                    break;
                }
                c.packets_out += 1;
                c.bytes_out += u64::from(response);
            }
        }
        Workload::Sink { .. } => {
            let mut buf = vec![0u8; SINK_BUF];
            while !stopped(shared) {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        c.packets_in += 1;
                        c.bytes_in += n as u64;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(_) => break,
                }
            }
        }
        // TCP needs no pacing cap: the client's receive window bounds it.
        Workload::Source { size, .. } => {
            if !sleep_until_realtime(spec.start_at_unix_ns, shared) {
                return;
            }
            let buf = vec![0x5au8; size as usize];
            let end = clock::now_ns() + spec.duration_ms * 1_000_000;
            while !stopped(shared) && clock::now_ns() < end {
                match s.write(&buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        c.packets_out += 1;
                        c.bytes_out += n as u64;
                    }
                    Err(e) if would_block(&e) => {}
                    Err(_) => break,
                }
            }
        }
    }
}

/// Key and sequence number of a datagram from the client, if it is one.
fn datagram_header(buf: &[u8], key: u64) -> Option<u64> {
    if buf.len() < UDP_HEADER || u64::from_be_bytes(buf[..8].try_into().ok()?) != key {
        return None;
    }
    Some(u64::from_be_bytes(buf[8..16].try_into().ok()?))
}

fn udp_session(sock: &UdpSocket, test: &Session, cookies: &Cookies, c: &mut Counters) {
    let (spec, shared, key) = (&test.spec, &*test.shared, test.key);
    if let Some(us) = spec.busy_poll_us {
        let _ = sys::set_busy_poll(sock.as_fd(), us);
    }
    let mut buf = vec![0u8; UDP_BUF];
    let is_source = matches!(spec.workload, Workload::Source { .. });
    let response = match spec.workload {
        Workload::Echo { response, .. } | Workload::Source { size: response, .. } => response,
        // A sink sends nothing, so its senders need prove nothing.
        Workload::Sink { .. } => {
            while !stopped(shared) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    if from.ip() == test.client_ip && datagram_header(&buf[..n], key).is_some() {
                        c.packets_in += 1;
                        c.bytes_in += n as u64;
                    } else {
                        shared.foreign.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            return;
        }
    };
    let mut out = vec![0x5au8; response as usize];
    // The one address this session answers, once it has echoed its cookie.
    let mut proven: Option<SocketAddr> = None;
    while !stopped(shared) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        let seq = match datagram_header(&buf[..n], key) {
            Some(seq) if from.ip() == test.client_ip => seq,
            _ => {
                shared.foreign.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let cookie = cookies.of(key, test.index, from);
        match seq {
            // Never answer with more bytes than came: no amplification.
            UDP_HELLO_SEQ if n >= UDP_COOKIE_LEN => {
                let _ = sock.send_to(&cookie::datagram(key, UDP_COOKIE_SEQ, cookie), from);
            }
            UDP_COOKIE_SEQ if cookie::cookie_in(&buf[..n]) == Some(cookie) => {
                proven = Some(from);
                let _ = sock.send_to(&cookie::datagram(key, UDP_PROVEN_SEQ, cookie), from);
                if is_source {
                    udp_source(sock, from, test, &mut out, c);
                    return;
                }
            }
            _ if proven == Some(from) && !is_source => {
                c.packets_in += 1;
                c.bytes_in += n as u64;
                out[..UDP_HEADER].copy_from_slice(&buf[..UDP_HEADER]);
                if sock.send_to(&out, from).is_ok() {
                    c.packets_out += 1;
                    c.bytes_out += out.len() as u64;
                }
            }
            _ => {
                shared.foreign.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Sends paced datagrams to the client at `to` (a proven address), at the
/// rate it asked for or, unpaced, at the session's share of `--max-rate`.
fn udp_source(s: &UdpSocket, to: SocketAddr, test: &Session, out: &mut [u8], c: &mut Counters) {
    let (spec, shared) = (&test.spec, &*test.shared);
    let Workload::Source {
        rate_pps, burst, ..
    } = spec.workload
    else {
        return;
    };
    if s.connect(to).is_err() {
        return;
    }
    let (rate, burst) = if rate_pps == 0 {
        (test.max_pps, 32.min(test.max_pps))
    } else {
        (rate_pps.min(test.max_pps), u64::from(burst))
    };
    out[..8].copy_from_slice(&test.key.to_be_bytes());
    if !sleep_until_realtime(spec.start_at_unix_ns, shared) {
        return;
    }
    let start = clock::now_ns();
    let end = start + spec.duration_ms * 1_000_000;
    let schedule = Schedule::new(start, rate, burst);
    let mut seq = 0u64;
    for k in 0.. {
        let due = schedule.burst_at(k);
        if due >= end || !wait_until(due, shared) {
            break;
        }
        for _ in 0..schedule.burst() {
            out[8..16].copy_from_slice(&seq.to_be_bytes());
            seq += 1;
            // A full socket buffer drops the datagram: that is what UDP loss is.
            if s.send(out).is_ok() {
                c.packets_out += 1;
                c.bytes_out += out.len() as u64;
            }
        }
    }
}
