//! Bulk transfer over TCP and UDP in either direction, many sessions.
//!
//! Forward (client to agent) the client sends and the agent counts; reverse
//! the agent sends and the client counts. UDP can be paced precisely: bursts
//! on an absolute schedule (no 10 ms tick), with achieved against requested
//! rate and loss (sent minus received, counted on both sides).
//!
//! Rates are what the sending side moved in the measured window; loss
//! compares everything sent with everything received over the whole run.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use serde::Serialize;

use crate::clock;
use crate::pace::Schedule;
use crate::path::KernelUdp;
use crate::proto::{AgentReport, Transport, Workload, UDP_HEADER, UDP_PROVEN_SEQ};
use crate::result::Measured;
use crate::run::{Common, Job, SessionCtx};
use crate::session::{now, Ended, Outcome};
use crate::sys;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client to agent.
    Send,
    /// Agent to client.
    Receive,
}

#[derive(Clone, Debug, Serialize)]
pub struct StreamParams {
    pub transport: Transport,
    pub direction: Direction,
    /// Bytes per write (TCP) or per datagram (UDP).
    pub size: u32,
    /// UDP packets per second per session; None: as fast as possible.
    pub rate_per_session: Option<u64>,
    /// Packets sent back to back at each scheduled instant.
    pub burst: u32,
    pub busy_poll_us: Option<u32>,
}

const POLL: Duration = Duration::from_millis(50);

pub fn job(common: &Common, p: StreamParams) -> Job {
    let params = serde_json::json!({ "common": common, "stream": &p });
    let workload = match p.direction {
        Direction::Send => Workload::Sink {
            transport: p.transport,
        },
        Direction::Receive => Workload::Source {
            transport: p.transport,
            size: p.size,
            rate_pps: p.rate_per_session.unwrap_or(0),
            burst: p.burst.max(1),
        },
    };
    let requested_rate = p
        .rate_per_session
        .map(|r| (r * u64::from(common.sessions)) as f64);
    let with_report: fn(&mut Measured, &AgentReport, &[&Outcome]) = match (p.transport, p.direction)
    {
        (Transport::Udp, Direction::Send) => udp_loss_at_agent,
        (Transport::Udp, Direction::Receive) => udp_loss_at_client,
        _ => crate::run::no_report,
    };
    Job {
        name: "stream",
        params,
        workload,
        latency: false,
        requested_rate,
        data_from: None,
        with_report,
        session: std::sync::Arc::new(move |ctx| session(ctx, &p)),
    }
}

/// UDP forward: every packet the client sent that the agent never counted is lost.
fn udp_loss_at_agent(m: &mut Measured, r: &AgentReport, mine: &[&Outcome]) {
    let sent_total: u64 = mine.iter().map(|o| o.ops_total).sum();
    let received: u64 = r.sessions.iter().map(|s| s.packets_in).sum();
    m.lost = sent_total.saturating_sub(received);
    m.sent = sent_total;
}

/// UDP reverse: every packet the agent sent that the client never counted is lost.
fn udp_loss_at_client(m: &mut Measured, r: &AgentReport, mine: &[&Outcome]) {
    let received_total: u64 = mine.iter().map(|o| o.ops_total).sum();
    let sent: u64 = r.sessions.iter().map(|s| s.packets_out).sum();
    m.sent = sent;
    m.lost = sent.saturating_sub(received_total);
}

/// Counts what moved, split into warm-up and the measured window.
struct Tally<'a> {
    ctx: &'a SessionCtx,
    out: Outcome,
}

impl Tally<'_> {
    #[inline]
    fn add(&mut self, t: u64, packets: u64, bytes: u64) {
        self.out.ops_total += packets;
        if t >= self.ctx.window.measure_ns && t < self.ctx.window.end_ns {
            self.out.ops += packets;
            self.out.bytes += bytes;
        }
    }
}

pub fn session(ctx: SessionCtx, p: &StreamParams) -> Outcome {
    let placement = ctx.enter();
    let mut tally = Tally {
        ctx: &ctx,
        out: Outcome {
            target: ctx.target,
            ..Default::default()
        },
    };
    let r = match p.transport {
        Transport::Tcp => tcp(&ctx, p, &mut tally),
        Transport::Udp => udp(&ctx, p, &mut tally),
    };
    let mut out = tally.out;
    out.placement = crate::pin::finish(placement);
    if let Err(e) = r {
        if e != Ended::Stopped {
            out.error = Some(ctx.describe(e));
        }
    }
    out
}

fn tcp(ctx: &SessionCtx, p: &StreamParams, tally: &mut Tally) -> Result<(), Ended> {
    let addr = SocketAddr::new(ctx.agent.ip(), ctx.port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| Ended::Failed(format!("connecting data session to {addr}: {e}")))?;
    s.set_read_timeout(Some(POLL))
        .map_err(|e| Ended::Failed(e.to_string()))?;
    s.set_write_timeout(Some(POLL))
        .map_err(|e| Ended::Failed(e.to_string()))?;
    if let Some(us) = p.busy_poll_us {
        sys::set_busy_poll(s.as_fd(), us)
            .map_err(|e| Ended::Failed(format!("SO_BUSY_POLL: {e}")))?;
    }
    let mut hdr = [0u8; 12];
    hdr[..8].copy_from_slice(&ctx.key.to_be_bytes());
    hdr[8..].copy_from_slice(&(ctx.index as u32).to_be_bytes());
    s.write_all(&hdr)
        .map_err(|e| Ended::Failed(e.to_string()))?;
    let mut buf = vec![0x5au8; p.size as usize];
    ctx.wait_start();
    let w = &ctx.window;
    // Segment counters at the window's edges give packets per second.
    let mut segs_at_start: Option<u32> = None;
    let segs = |s: &TcpStream| {
        sys::tcp_segments(s.as_fd())
            .ok()
            .map(|(o, i)| if p.direction == Direction::Send { o } else { i })
    };
    loop {
        let t = now();
        if w.over(t) {
            break;
        }
        if segs_at_start.is_none() && t >= w.measure_ns {
            segs_at_start = segs(&s).or(Some(0));
        }
        let r = if p.direction == Direction::Send {
            s.write(&buf)
        } else {
            s.read(&mut buf)
        };
        match r {
            Ok(0) => return Err(Ended::Closed),
            Ok(n) => tally.add(now(), 1, n as u64),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Err(Ended::Closed)
            }
            Err(e) => return Err(Ended::Failed(e.to_string())),
        }
    }
    // Packets are TCP segments in the window, when the kernel tells them.
    if let (Some(a), Some(b)) = (segs_at_start, segs(&s)) {
        if a > 0 {
            tally.out.ops = u64::from(b.wrapping_sub(a));
        }
    }
    Ok(())
}

fn udp(ctx: &SessionCtx, p: &StreamParams, tally: &mut Tally) -> Result<(), Ended> {
    let fail = |e: std::io::Error| Ended::Failed(format!("UDP: {e}"));
    let bind: SocketAddr = if ctx.agent.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let s = UdpSocket::bind(bind).map_err(fail)?;
    s.connect(SocketAddr::new(ctx.agent.ip(), ctx.port))
        .map_err(fail)?;
    s.set_read_timeout(Some(POLL)).map_err(fail)?;
    if let Some(us) = p.busy_poll_us {
        sys::set_busy_poll(s.as_fd(), us)
            .map_err(|e| Ended::Failed(format!("SO_BUSY_POLL: {e}")))?;
    }
    let mut buf = vec![0u8; (p.size as usize).max(UDP_HEADER).max(65536)];
    buf[..8].copy_from_slice(&ctx.key.to_be_bytes());
    let w = &ctx.window;
    match p.direction {
        Direction::Send => {
            let size = p.size as usize;
            ctx.wait_start();
            let sched = p
                .rate_per_session
                .map(|r| Schedule::new(w.start_ns, r, u64::from(p.burst.max(1))));
            let (mut seq, mut k) = (0u64, 0u64);
            loop {
                if let Some(sc) = &sched {
                    let due = sc.burst_at(k);
                    if due >= w.end_ns || w.over(now()) {
                        break;
                    }
                    clock::wait_until(due);
                    if now() > due + 100_000 {
                        tally.out.late += 1;
                    }
                    k += 1;
                } else if w.over(now()) {
                    break;
                }
                for _ in 0..sched.as_ref().map_or(32, |s| s.burst()) {
                    buf[8..16].copy_from_slice(&seq.to_be_bytes());
                    seq += 1;
                    match s.send(&buf[..size]) {
                        Ok(n) => tally.add(now(), 1, n as u64),
                        // The local queue is full: the datagram is dropped, which is loss.
                        Err(e)
                            if e.kind() == ErrorKind::WouldBlock
                                || e.raw_os_error() == Some(libc::ENOBUFS) =>
                        {
                            tally.out.ops_total += 1
                        }
                        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                            return Err(Ended::Closed)
                        }
                        Err(e) => return Err(Ended::Failed(format!("UDP send: {e}"))),
                    }
                }
            }
            Ok(())
        }
        Direction::Receive => {
            // The agent sends only once this address has proven itself.
            let mut path = KernelUdp {
                socket: s,
                stamped: false,
            };
            ctx.prove(&mut path)?;
            let s = path.socket;
            loop {
                let t = now();
                if w.over(t) {
                    return Ok(());
                }
                match s.recv(&mut buf) {
                    // Repeated handshake answers are not data.
                    Ok(n)
                        if n >= UDP_HEADER
                            && buf[..8] == ctx.key.to_be_bytes()
                            && buf[8..16] < UDP_PROVEN_SEQ.to_be_bytes()[..] =>
                    {
                        tally.add(now(), 1, n as u64);
                    }
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) => {}
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        return Err(Ended::Closed);
                    }
                    Err(e) => return Err(Ended::Failed(format!("UDP receive: {e}"))),
                }
            }
        }
    }
}
