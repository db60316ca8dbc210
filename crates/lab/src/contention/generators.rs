//! The contention generators themselves: what runs inside the child
//! processes (`vnio lab load ...`) the runner starts in the hosts.
//!
//! - a load server answers 64-byte TCP requests, each after spending a set
//!   amount of its own CPU time (not wall time: a preempted server still
//!   owes the work, as a busy VM would);
//! - a load driver sends those requests at a set rate per server, open loop
//!   (a slow server does not slow the schedule down);
//! - a flood sends UDP datagrams of a set size at a set rate, in bursts;
//! - a sink counts what arrives.
//!
//! Each runs until its stop flag is set (SIGTERM in the child) and returns
//! counters, which the child prints as one JSON line.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use vnio_measure::clock;
use vnio_measure::cpu::CpuTime;
use vnio_measure::pace::Schedule;

/// Bytes of one load request and of its answer.
pub const LOAD_MESSAGE: usize = 64;
/// How often blocked threads look at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// Requests a driver lets pile up per server before it pauses sending.
const MAX_OUTSTANDING: u64 = 4096;

/// What a load server did.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ServeReport {
    /// Requests answered.
    pub requests: u64,
    /// CPU time the process used, in seconds.
    pub cpu_s: f64,
    /// Wall time served, in seconds.
    pub seconds: f64,
}

/// What a load driver did, over all its servers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DriveReport {
    /// Requests per second asked for, over all servers.
    pub requested_rate: f64,
    /// Requests sent.
    pub sent: u64,
    /// Answers received.
    pub answered: u64,
    /// Wall time driven, in seconds.
    pub seconds: f64,
    /// Servers that could not be reached.
    pub errors: Vec<String>,
}

/// What a flood sent or a sink received.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FloodReport {
    /// Packets per second asked for (flood; 0 for a sink).
    pub requested_rate: f64,
    /// Packets sent or received.
    pub packets: u64,
    /// Payload bytes sent or received.
    pub bytes: u64,
    /// Wall time, in seconds.
    pub seconds: f64,
}

/// Spend `work` of this thread's CPU time.
fn burn(work: Duration) {
    let target = work.as_nanos() as u64;
    let start = CpuTime::thread().total_ns();
    let mut x = 0u64;
    while CpuTime::thread().total_ns().saturating_sub(start) < target {
        // Some real work between clock reads, kept from being optimised away.
        for i in 0..64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

/// Serve load requests on `listener` until `stop`: one thread per
/// connection; each request costs `work` of CPU before its answer.
pub fn serve_load(
    listener: TcpListener,
    work: Duration,
    stop: &AtomicBool,
) -> io::Result<ServeReport> {
    let started = Instant::now();
    let cpu0 = CpuTime::process();
    let requests = Arc::new(AtomicU64::new(0));
    listener.set_nonblocking(true)?;
    std::thread::scope(|s| {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let requests = requests.clone();
                    s.spawn(move || answer(conn, work, stop, &requests));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(TICK / 4),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })?;
    Ok(ServeReport {
        requests: requests.load(Ordering::Relaxed),
        cpu_s: CpuTime::process().since(cpu0).total_ns() as f64 / 1e9,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn answer(mut conn: TcpStream, work: Duration, stop: &AtomicBool, requests: &AtomicU64) {
    let _ = conn.set_nodelay(true);
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(TICK));
    let mut buf = [0u8; LOAD_MESSAGE];
    let mut have = 0;
    while !stop.load(Ordering::Relaxed) {
        match conn.read(&mut buf[have..]) {
            Ok(0) => return,
            Ok(n) => {
                have += n;
                if have == LOAD_MESSAGE {
                    have = 0;
                    burn(work);
                    if conn.write_all(&buf).is_err() {
                        return;
                    }
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// Connect to `addr`, retrying while the server is still starting.
fn connect(addr: SocketAddr, stop: &AtomicBool) -> io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline || stop.load(Ordering::Relaxed) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Drive every server in `targets` at `rate` requests per second each,
/// open loop, until `stop`.
pub fn drive_loads(targets: &[SocketAddr], rate: u64, stop: &AtomicBool) -> DriveReport {
    let started = Instant::now();
    let sent = AtomicU64::new(0);
    let answered = AtomicU64::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for &addr in targets {
            let (sent, answered, errors) = (&sent, &answered, &errors);
            s.spawn(move || {
                if let Err(e) = drive_one(addr, rate, stop, sent, answered) {
                    if let Ok(mut errs) = errors.lock() {
                        errs.push(format!("load server {addr}: {e}"));
                    }
                }
            });
        }
    });
    DriveReport {
        requested_rate: (rate * targets.len() as u64) as f64,
        sent: sent.load(Ordering::Relaxed),
        answered: answered.load(Ordering::Relaxed),
        seconds: started.elapsed().as_secs_f64(),
        errors: errors.into_inner().unwrap_or_default(),
    }
}

fn drive_one(
    addr: SocketAddr,
    rate: u64,
    stop: &AtomicBool,
    sent_total: &AtomicU64,
    answered_total: &AtomicU64,
) -> io::Result<()> {
    let conn = connect(addr, stop)?;
    conn.set_nodelay(true)?;
    let mut reader = conn.try_clone()?;
    reader.set_read_timeout(Some(TICK))?;
    conn.set_write_timeout(Some(TICK))?;
    let answered = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; LOAD_MESSAGE];
            let mut have = 0;
            while !done.load(Ordering::Relaxed) {
                match reader.read(&mut buf[have..]) {
                    Ok(0) => break,
                    Ok(n) => {
                        have += n;
                        if have == LOAD_MESSAGE {
                            have = 0;
                            answered.fetch_add(1, Ordering::Relaxed);
                            answered_total.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) => {}
                    Err(_) => break,
                }
            }
        });
        let result = send_paced(&conn, rate, stop, &answered, sent_total);
        done.store(true, Ordering::Relaxed);
        result
    })
}

fn send_paced(
    mut conn: &TcpStream,
    rate: u64,
    stop: &AtomicBool,
    answered: &AtomicU64,
    sent_total: &AtomicU64,
) -> io::Result<()> {
    let request = [0x5au8; LOAD_MESSAGE];
    let schedule = Schedule::new(clock::now_ns(), rate, 1);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let due = schedule.send_at(n);
        // Sleep at most a tick so the stop flag is seen.
        let now = clock::now_ns();
        if due > now {
            clock::wait_until(due.min(now + TICK.as_nanos() as u64));
            continue;
        }
        if n.saturating_sub(answered.load(Ordering::Relaxed)) >= MAX_OUTSTANDING {
            // The server is saturated: wait for it rather than queue forever.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if !write_until_stopped(&mut conn, &request, stop)? {
            break;
        }
        n += 1;
        sent_total.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Write all of `buf`, giving up when `stop` is set: a saturated server
/// stops reading, the socket's buffer fills, and a plain blocking write
/// would then outlast SIGTERM. Needs a write timeout on the socket.
/// False when stopped before all of it went.
fn write_until_stopped(conn: &mut &TcpStream, buf: &[u8], stop: &AtomicBool) -> io::Result<bool> {
    let mut done = 0;
    while done < buf.len() {
        match conn.write(&buf[done..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::Relaxed) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Send `size`-byte UDP datagrams to `target` at `rate` per second in bursts
/// of `burst`, until `stop`.
pub fn flood(
    target: SocketAddr,
    rate: u64,
    size: usize,
    burst: u64,
    stop: &AtomicBool,
) -> io::Result<FloodReport> {
    let socket = UdpSocket::bind(if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    socket.connect(target)?;
    let payload = vec![0xa5u8; size];
    let started = Instant::now();
    let schedule = Schedule::new(clock::now_ns(), rate.max(1), burst.max(1));
    let (mut packets, mut bytes, mut k) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let due = schedule.burst_at(k);
        let now = clock::now_ns();
        if due > now {
            clock::wait_until(due.min(now + TICK.as_nanos() as u64));
            continue;
        }
        for _ in 0..schedule.burst() {
            match socket.send(&payload) {
                Ok(n) => {
                    packets += 1;
                    bytes += n as u64;
                }
                // A full socket buffer or an ICMP error from the receiver:
                // the packet is lost, the schedule goes on.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock
                            | ErrorKind::ConnectionRefused
                            | ErrorKind::Interrupted
                    ) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) => return Err(e),
            }
        }
        k += 1;
    }
    Ok(FloodReport {
        requested_rate: rate as f64,
        packets,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Count UDP datagrams arriving on `socket` until `stop`.
pub fn sink(socket: UdpSocket, stop: &AtomicBool) -> io::Result<FloodReport> {
    socket.set_read_timeout(Some(TICK))?;
    // A deep receive buffer so the sink, not the socket, is what is measured.
    let _ = nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::RcvBuf, &(8 << 20));
    let started = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let (mut packets, mut bytes) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        match socket.recv(&mut buf) {
            Ok(n) => {
                packets += 1;
                bytes += n as u64;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(FloodReport {
        requested_rate: 0.0,
        packets,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}
