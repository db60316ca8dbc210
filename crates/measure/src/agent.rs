//! `vnio agent`: the far side of every workload. One thread per control
//! connection, one per data session; a bad client costs only its own threads,
//! and every thread and socket of a test is gone when the test ends.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock;
use crate::cpu::CpuTime;
use crate::env::Placement;
use crate::pace::Schedule;
use crate::pin;
use crate::proto::{
    read_msg, write_msg, AgentReport, Counters, FrameError, Limits, Request, Response, TestSpec,
    Transport, Workload, PROTO_VERSION, UDP_HEADER, UDP_HELLO_SEQ,
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
        while !self.stop.load(Ordering::Relaxed) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    handlers.retain(|h| !h.is_finished());
                    let _ = stream.set_nonblocking(false);
                    if self.clients.load(Ordering::Relaxed) >= self.config.max_clients {
                        refuse(stream, "agent busy: too many clients at once, retry later");
                        continue;
                    }
                    self.clients.fetch_add(1, Ordering::Relaxed);
                    let (config, clients, stop) =
                        (self.config.clone(), self.clients.clone(), self.stop.clone());
                    let spawned = std::thread::Builder::new()
                        .name(format!("ctl-{peer}"))
                        .spawn(move || {
                            if let Err(e) = serve_client(stream, peer, &config, &stop) {
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

fn serve_client(
    mut ctl: TcpStream,
    peer: SocketAddr,
    config: &AgentConfig,
    agent_stop: &AtomicBool,
) -> Result<(), ClientError> {
    ctl.set_read_timeout(Some(HANDSHAKE))
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
        let req = match read_with_stop(&mut ctl, agent_stop, None) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
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
                if let Err(reason) = config.limits.check(&spec) {
                    write_msg(
                        &mut ctl,
                        &Response::Error {
                            message: format!("refused: {reason}"),
                        },
                    )?;
                    continue;
                }
                let test = match Test::start(&spec, local_ip, peer.ip()) {
                    Ok(t) => t,
                    Err(e) => {
                        write_msg(
                            &mut ctl,
                            &Response::Error {
                                message: format!("cannot set up the test: {e}"),
                            },
                        )?;
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
                let outcome = read_with_stop(&mut ctl, agent_stop, Some(deadline));
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

/// One running test: its data sockets and session threads.
struct Test {
    key: u64,
    ports: Vec<u16>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<SessionEnd>>,
}

struct Shared {
    stop: AtomicBool,
    foreign: AtomicU64,
    /// Session threads started by the TCP acceptor, joined at the end.
    late_threads: std::sync::Mutex<Vec<JoinHandle<SessionEnd>>>,
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
    fn start(spec: &TestSpec, local_ip: IpAddr, control_ip: IpAddr) -> std::io::Result<Test> {
        let key = random_key();
        // Data must come from the client's address (or the one it declared),
        // and carry the test's key.
        let client_ip = spec.data_from.unwrap_or(control_ip);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            foreign: AtomicU64::new(0),
            late_threads: Default::default(),
        });
        let mut threads = Vec::new();
        let mut ports = Vec::new();
        let sessions = spec.sessions as usize;
        match spec.workload.transport() {
            Transport::Tcp => {
                let listener = TcpListener::bind(SocketAddr::new(local_ip, 0))?;
                ports.push(listener.local_addr()?.port());
                listener.set_nonblocking(true)?;
                let (spec, shared2) = (spec.clone(), shared.clone());
                threads.push(
                    std::thread::Builder::new()
                        .name("tcp-accept".into())
                        .spawn(move || {
                            accept_sessions(listener, key, client_ip, &spec, &shared2);
                            SessionEnd {
                                index: usize::MAX,
                                ..Default::default()
                            }
                        })?,
                );
            }
            Transport::Udp => {
                let mut sockets = Vec::with_capacity(sessions);
                for _ in 0..sessions {
                    let s = UdpSocket::bind(SocketAddr::new(local_ip, 0))?;
                    s.set_read_timeout(Some(POLL))?;
                    ports.push(s.local_addr()?.port());
                    sockets.push(s);
                }
                for (i, s) in sockets.into_iter().enumerate() {
                    let (spec, shared2) = (spec.clone(), shared.clone());
                    threads.push(std::thread::Builder::new().name(format!("udp-{i}")).spawn(
                        move || {
                            run_session(i, &spec, |c| {
                                udp_session(&s, key, client_ip, &spec, &shared2, c)
                            })
                        },
                    )?);
                }
            }
        }
        Ok(Test {
            key,
            ports,
            shared,
            threads,
        })
    }

    /// Stops every session, joins every thread, sums what they did.
    fn finish(self) -> AgentReport {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut ends: Vec<SessionEnd> = self
            .threads
            .into_iter()
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

/// Runs one session's work on the calling thread with its placement and CPU
/// accounting around it.
fn run_session(index: usize, spec: &TestSpec, work: impl FnOnce(&mut Counters)) -> SessionEnd {
    let placement = pin::enter(
        format!("agent session {index}"),
        pin::pick(&spec.cpus, index),
    );
    let cpu0 = CpuTime::thread();
    let mut counters = Counters::default();
    work(&mut counters);
    SessionEnd {
        index,
        counters,
        cpu: CpuTime::thread().since(cpu0),
        placement: Some(pin::finish(placement)),
    }
}

fn accept_sessions(
    listener: TcpListener,
    key: u64,
    client_ip: IpAddr,
    spec: &TestSpec,
    shared: &Arc<Shared>,
) {
    let mut seen = vec![false; spec.sessions as usize];
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
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(HANDSHAKE));
        let mut hdr = [0u8; 12];
        let index = match stream.read_exact(&mut hdr) {
            Ok(())
                if peer.ip() == client_ip
                    && u64::from_be_bytes(hdr[..8].try_into().unwrap_or_default()) == key =>
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
        let (spec2, shared2) = (spec.clone(), shared.clone());
        let h = std::thread::Builder::new()
            .name(format!("tcp-{index}"))
            .spawn(move || {
                run_session(index, &spec2, |c| tcp_session(stream, &spec2, &shared2, c))
            });
        if let (Ok(h), Ok(mut late)) = (h, shared.late_threads.lock()) {
            late.push(h);
        }
    }
}

fn stopped(shared: &Shared) -> bool {
    shared.stop.load(Ordering::Relaxed)
}

fn tcp_session(mut s: TcpStream, spec: &TestSpec, shared: &Shared, c: &mut Counters) {
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
            let mut buf = vec![0u8; 256 * 1024];
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
        Workload::Source { size, .. } => {
            clock::sleep_until_realtime(spec.start_at_unix_ns);
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

fn udp_session(
    s: &UdpSocket,
    key: u64,
    client_ip: IpAddr,
    spec: &TestSpec,
    shared: &Shared,
    c: &mut Counters,
) {
    if let Some(us) = spec.busy_poll_us {
        let _ = sys::set_busy_poll(s.as_fd(), us);
    }
    let mut buf = vec![0u8; 65536];
    match spec.workload {
        Workload::Echo { response, .. } | Workload::Source { size: response, .. } => {
            let is_source = matches!(spec.workload, Workload::Source { .. });
            let mut out = vec![0x5au8; response as usize];
            while !stopped(shared) {
                let (n, from) = match s.recv_from(&mut buf) {
                    Ok(x) => x,
                    Err(_) => continue,
                };
                let seq = match datagram_header(&buf[..n], key) {
                    Some(seq) if from.ip() == client_ip => seq,
                    _ => {
                        shared.foreign.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                if is_source {
                    if seq == UDP_HELLO_SEQ {
                        udp_source(s, from, key, spec, shared, &mut out, c);
                        return;
                    }
                    continue;
                }
                c.packets_in += 1;
                c.bytes_in += n as u64;
                out[..UDP_HEADER].copy_from_slice(&buf[..UDP_HEADER]);
                if s.send_to(&out, from).is_ok() {
                    c.packets_out += 1;
                    c.bytes_out += out.len() as u64;
                }
            }
        }
        Workload::Sink { .. } => {
            while !stopped(shared) {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    if from.ip() == client_ip && datagram_header(&buf[..n], key).is_some() {
                        c.packets_in += 1;
                        c.bytes_in += n as u64;
                    } else {
                        shared.foreign.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Sends paced datagrams to the client that announced `to`.
fn udp_source(
    s: &UdpSocket,
    to: SocketAddr,
    key: u64,
    spec: &TestSpec,
    shared: &Shared,
    out: &mut [u8],
    c: &mut Counters,
) {
    let Workload::Source {
        rate_pps, burst, ..
    } = spec.workload
    else {
        return;
    };
    if s.connect(to).is_err() {
        return;
    }
    out[..8].copy_from_slice(&key.to_be_bytes());
    clock::sleep_until_realtime(spec.start_at_unix_ns);
    let start = clock::now_ns();
    let end = start + spec.duration_ms * 1_000_000;
    let schedule = (rate_pps > 0).then(|| Schedule::new(start, rate_pps, u64::from(burst)));
    let mut seq = 0u64;
    let mut k = 0u64;
    while !stopped(shared) {
        if let Some(sch) = &schedule {
            let due = sch.burst_at(k);
            if due >= end {
                break;
            }
            clock::wait_until(due);
            k += 1;
        } else if clock::now_ns() >= end {
            break;
        }
        for _ in 0..schedule.as_ref().map_or(32, |s| s.burst()) {
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
