//! Request-response over TCP and UDP: closed loop with `burst` requests in
//! flight per session (netperf's burst), or open loop on a schedule with
//! latency counted from each request's intended send instant.
//!
//! Every transaction is timed individually: the send stamp of each request in
//! flight is kept (a FIFO for TCP, a sequence-indexed ring for UDP) and its
//! response is matched to it.

use std::collections::VecDeque;
use std::io::{ErrorKind, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, TimestampingFlag,
};
use serde::Serialize;

use crate::clock;
use crate::path::{Datagrams, KernelUdp, Via};
use crate::proto::{Transport, UDP_HEADER};
use crate::run::SessionCtx;
use crate::session::{
    dirty_read, dirty_write, now, read_full, write_full, Ended, Outcome, Recorder,
};
use crate::sys;

/// A UDP request unanswered this long is lost; the session sends a new one.
const UDP_LOSS_TIMEOUT: Duration = Duration::from_millis(200);
/// How often blocked sessions look at the clock and the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// Open loop: requests in flight beyond this mean the peer cannot keep up;
/// sending pauses (and those sends are counted late) instead of queueing forever.
const MAX_OUTSTANDING: usize = 1 << 16;

#[derive(Clone, Debug, Serialize)]
pub struct RrParams {
    pub transport: Transport,
    pub request: u32,
    pub response: u32,
    /// Requests in flight per session (closed loop).
    pub burst: u32,
    pub nodelay: bool,
    pub dirty: bool,
    /// Open loop: transactions per second per session.
    pub rate_per_session: Option<u64>,
    pub busy_poll_us: Option<u32>,
    /// Take the receive instant from the kernel's software timestamp
    /// (SO_TIMESTAMPING) instead of reading the clock after recv returns.
    pub rx_timestamp: bool,
    /// UDP through a path that is not a kernel socket (e.g. the switch's
    /// poll-mode endpoint); `None`: kernel sockets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
}

/// The runner's description of an rr run.
pub fn job(common: &crate::run::Common, p: RrParams) -> crate::run::Job {
    let params = serde_json::json!({ "common": common, "rr": &p });
    let workload = crate::proto::Workload::Echo {
        transport: p.transport,
        request: p.request,
        response: p.response,
    };
    let requested_rate = p
        .rate_per_session
        .map(|r| (r * u64::from(common.sessions)) as f64);
    crate::run::Job {
        name: "rr",
        params,
        workload,
        latency: true,
        requested_rate,
        data_from: p.via.as_ref().map(|v| v.0.source()),
        with_report: crate::run::no_report,
        session: std::sync::Arc::new(move |ctx| session(ctx, &p)),
    }
}

/// One session against one agent.
pub fn session(ctx: SessionCtx, p: &RrParams) -> Outcome {
    let placement = ctx.enter();
    let mut rec = Recorder::new(&ctx.window, ctx.intervals.clone());
    let mut extra = Extra::default();
    let result = match (p.transport, p.rate_per_session) {
        (Transport::Tcp, _) if p.via.is_some() => Err(Ended::Failed(
            "a non-kernel path (--via) carries UDP only; use --udp".into(),
        )),
        (_, _) if p.via.is_some() && p.rx_timestamp => Err(Ended::Failed(
            "kernel receive timestamps need a kernel socket, not --via".into(),
        )),
        (Transport::Tcp, None) => tcp_closed(&ctx, p, &mut rec),
        (Transport::Udp, None) => udp_closed(&ctx, p, &mut rec, &mut extra),
        (Transport::Tcp, Some(rate)) => tcp_open(&ctx, p, rate, &mut rec, &mut extra),
        (Transport::Udp, Some(rate)) => udp_open(&ctx, p, rate, &mut rec, &mut extra),
    };
    let mut out = Outcome::from_recorder(rec, ctx.target, crate::pin::finish(placement));
    out.sent = extra.sent;
    out.lost = extra.lost;
    out.late = extra.late;
    out.bytes = out.ops * u64::from(p.request + p.response);
    out.error = result.err().map(|e| ctx.describe(e));
    out
}

#[derive(Default)]
struct Extra {
    sent: u64,
    lost: u64,
    late: u64,
}

fn connect_tcp(ctx: &SessionCtx, p: &RrParams) -> Result<TcpStream, Ended> {
    let addr = SocketAddr::new(ctx.agent.ip(), ctx.port);
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| Ended::Failed(format!("connecting data session to {addr}: {e}")))?;
    let _ = s.set_nodelay(p.nodelay);
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    if let Some(us) = p.busy_poll_us {
        sys::set_busy_poll(s.as_fd(), us)
            .map_err(|e| Ended::Failed(format!("SO_BUSY_POLL {us} us: {e}")))?;
    }
    let mut hdr = [0u8; 12];
    hdr[..8].copy_from_slice(&ctx.key.to_be_bytes());
    hdr[8..].copy_from_slice(&(ctx.index as u32).to_be_bytes());
    s.write_all(&hdr)
        .map_err(|e| Ended::Failed(e.to_string()))?;
    Ok(s)
}

fn tcp_closed(ctx: &SessionCtx, p: &RrParams, rec: &mut Recorder) -> Result<(), Ended> {
    if p.rx_timestamp {
        return Err(Ended::Failed(
            "software receive timestamps are supported for UDP rr and ping, not TCP".into(),
        ));
    }
    let mut s = connect_tcp(ctx, p)?;
    let mut req = vec![0u8; p.request as usize];
    let mut resp = vec![0u8; p.response as usize];
    let mut in_flight: VecDeque<u64> = VecDeque::with_capacity(p.burst as usize);
    let w = &ctx.window;
    let over = || w.over(now());
    ctx.wait_start();
    for _ in 0..p.burst.max(1) {
        in_flight.push_back(now());
        write_full(&mut s, &req, over)?;
    }
    let mut round = 0u64;
    loop {
        match read_full(&mut s, &mut resp, over) {
            Ok(()) => {}
            Err(Ended::Stopped) => return Ok(()),
            Err(e) => return Err(e),
        }
        let t = now();
        if let Some(sent) = in_flight.pop_front() {
            rec.record(t, t - sent);
        }
        if w.over(t) {
            return Ok(());
        }
        // The next request's stamp: the receive instant serves (a few ns of
        // recording are charged to it, never hidden) unless touching the
        // buffers came in between, which is not network time.
        let mut stamp = t;
        if p.dirty {
            dirty_read(&resp);
            round += 1;
            dirty_write(&mut req, round);
            stamp = now();
        }
        in_flight.push_back(stamp);
        match write_full(&mut s, &req, over) {
            Ok(()) | Err(Ended::Stopped) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A UDP socket set up for one session: connected to its agent port, with
/// optional busy polling and kernel receive timestamps.
pub(crate) fn enable_rx_timestamps(s: &impl std::os::fd::AsFd) -> Result<(), Ended> {
    let flags = TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE;
    setsockopt(s, sockopt::Timestamping, &flags)
        .map_err(|e| Ended::Failed(format!("enabling SO_TIMESTAMPING: {e}")))
}

fn udp_socket(ctx: &SessionCtx, p: &RrParams) -> Result<KernelUdp, Ended> {
    let fail = |what: &str, e: std::io::Error| Ended::Failed(format!("{what}: {e}"));
    let bind: SocketAddr = if ctx.agent.is_ipv4() {
        "0.0.0.0:0".parse()
    } else {
        "[::]:0".parse()
    }
    .map_err(|_| Ended::Failed("bad bind address".into()))?;
    let s = UdpSocket::bind(bind).map_err(|e| fail("binding UDP socket", e))?;
    s.connect(SocketAddr::new(ctx.agent.ip(), ctx.port))
        .map_err(|e| fail("connecting UDP socket", e))?;
    s.set_read_timeout(Some(POLL))
        .map_err(|e| fail("setting timeout", e))?;
    if let Some(us) = p.busy_poll_us {
        sys::set_busy_poll(s.as_fd(), us).map_err(|e| fail(&format!("SO_BUSY_POLL {us} us"), e))?;
    }
    if p.rx_timestamp {
        enable_rx_timestamps(&s)?;
    }
    Ok(KernelUdp {
        socket: s,
        stamped: p.rx_timestamp,
    })
}

/// Receives one datagram with its kernel software receive timestamp
/// (CLOCK_REALTIME), on a socket with SO_TIMESTAMPING enabled.
pub(crate) fn recv_stamped(
    s: &impl std::os::fd::AsRawFd,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<u64>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(nix::sys::socket::Timestamps);
    let msg = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty())
        .map_err(std::io::Error::from)?;
    let mut ts = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampsns(t) = c {
                ts = Some(clock::ts_ns(t.system));
            }
        }
    }
    Ok((msg.bytes, ts))
}

/// Send stamps of requests in flight, indexed by sequence number.
pub(crate) struct Ring {
    slots: Vec<(u64, u64)>,
    mask: u64,
}

impl Ring {
    pub(crate) fn new(min: usize) -> Ring {
        let n = min.next_power_of_two().max(64);
        Ring {
            slots: vec![(u64::MAX, 0); n],
            mask: n as u64 - 1,
        }
    }
    #[inline]
    pub(crate) fn put(&mut self, seq: u64, t: u64) {
        self.slots[(seq & self.mask) as usize] = (seq, t);
    }
    /// Forgets every request in flight (they were declared lost).
    pub(crate) fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| s.0 = u64::MAX);
    }

    /// The send stamp of `seq` if it is still in flight; marks it answered.
    #[inline]
    pub(crate) fn take(&mut self, seq: u64) -> Option<u64> {
        let slot = &mut self.slots[(seq & self.mask) as usize];
        if slot.0 != seq {
            return None;
        }
        slot.0 = u64::MAX;
        Some(slot.1)
    }
}

#[inline]
fn stamp_header(buf: &mut [u8], key: u64, seq: u64) {
    buf[..8].copy_from_slice(&key.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

#[inline]
fn header_seq(buf: &[u8], key: u64) -> Option<u64> {
    if buf.len() < UDP_HEADER || buf[..8] != key.to_be_bytes() {
        return None;
    }
    Some(u64::from_be_bytes(buf[8..16].try_into().ok()?))
}

fn send_err(e: std::io::Error) -> Ended {
    match e.kind() {
        ErrorKind::ConnectionRefused => Ended::Closed,
        _ => Ended::Failed(format!("UDP send: {e}")),
    }
}

fn udp_closed(
    ctx: &SessionCtx,
    p: &RrParams,
    rec: &mut Recorder,
    x: &mut Extra,
) -> Result<(), Ended> {
    match &p.via {
        None => udp_closed_on(ctx, p, rec, x, udp_socket(ctx, p)?),
        Some(via) => udp_closed_on(ctx, p, rec, x, open_via(ctx, via)?),
    }
}

/// Opens this session's non-kernel path.
fn open_via(ctx: &SessionCtx, via: &crate::path::Via) -> Result<crate::path::BoxedPath, Ended> {
    via.0
        .open(ctx.index, SocketAddr::new(ctx.agent.ip(), ctx.port))
        .map_err(Ended::Failed)
}

fn udp_closed_on<D: Datagrams>(
    ctx: &SessionCtx,
    p: &RrParams,
    rec: &mut Recorder,
    x: &mut Extra,
    mut s: D,
) -> Result<(), Ended> {
    let clock_now = || {
        if p.rx_timestamp {
            clock::realtime_ns()
        } else {
            now()
        }
    };
    let mut req = vec![0u8; p.request as usize];
    let mut buf = vec![0u8; 65536];
    let burst = u64::from(p.burst.max(1));
    let mut ring = Ring::new(burst as usize * 4);
    let (mut seq, mut outstanding, mut last_answer) = (0u64, 0u64, now());
    let w = &ctx.window;
    ctx.prove(&mut s)?;
    ctx.wait_start();
    let mut send =
        |s: &mut D, seq: &mut u64, ring: &mut Ring, req: &mut [u8]| -> Result<(), Ended> {
            stamp_header(req, ctx.key, *seq);
            ring.put(*seq, clock_now());
            *seq += 1;
            x.sent += 1;
            match s.send(req) {
                // A full transmit queue loses the request: the loss timeout counts it.
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
                r => r.map_err(send_err),
            }
        };
    while !w.over(now()) {
        while outstanding < burst {
            send(&mut s, &mut seq, &mut ring, &mut req)?;
            outstanding += 1;
        }
        match s.recv_wait(&mut buf) {
            Ok(None) => {}
            Ok(Some((n, ts))) => {
                let t_recv = ts.unwrap_or_else(clock_now);
                let t = now();
                if let Some(sent) = header_seq(&buf[..n], ctx.key).and_then(|q| ring.take(q)) {
                    rec.record(t, t_recv.saturating_sub(sent));
                    outstanding -= 1;
                    last_answer = t;
                    if p.dirty {
                        dirty_read(&buf[..n]);
                        dirty_write(&mut req[UDP_HEADER..], seq);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(Ended::Closed),
            Err(e) => return Err(Ended::Failed(format!("UDP receive: {e}"))),
        }
        if outstanding > 0 && now() - last_answer > UDP_LOSS_TIMEOUT.as_nanos() as u64 {
            // The requests in flight are lost: forget them, start a new burst.
            x.lost += outstanding;
            outstanding = 0;
            last_answer = now();
            ring.clear();
        }
    }
    Ok(())
}

/// How close to a due send a timed loop stops sleeping and spins: a wake-up
/// from a timed sleep is late by the scheduler's latency (tens of µs on a
/// loaded or virtual host), which open-loop latency would count.
pub(crate) const SEND_SPIN_NS: u64 = 20_000;

/// The wait before the next due send: poll with this timeout, or return (to
/// spin) when it is within `spin_ns`.
pub(crate) fn poll_wait(
    fd: std::os::fd::BorrowedFd<'_>,
    events: PollFlags,
    next_due: u64,
    spin_ns: u64,
) {
    let t = now();
    if next_due <= t + spin_ns {
        return;
    }
    let wait = (next_due - t).min(POLL.as_nanos() as u64);
    let ts = nix::sys::time::TimeSpec::from_duration(Duration::from_nanos(wait));
    let mut fds = [PollFd::new(fd, events)];
    let _ = nix::poll::ppoll(&mut fds, Some(ts), None);
}

fn tcp_open(
    ctx: &SessionCtx,
    p: &RrParams,
    rate: u64,
    rec: &mut Recorder,
    x: &mut Extra,
) -> Result<(), Ended> {
    if p.rx_timestamp {
        return Err(Ended::Failed(
            "software receive timestamps are supported for UDP rr and ping, not TCP".into(),
        ));
    }
    let mut s = connect_tcp(ctx, p)?;
    s.set_nonblocking(true)
        .map_err(|e| Ended::Failed(e.to_string()))?;
    let req = vec![0u8; p.request as usize];
    let mut resp = vec![0u8; p.response as usize];
    let mut intended: VecDeque<u64> = VecDeque::with_capacity(4096);
    ctx.wait_start();
    let sched = ctx.schedule(rate);
    let (mut started, mut write_left, mut read_off) = (0u64, 0usize, 0usize);
    loop {
        let t = now();
        if ctx.window.over(t) {
            return Ok(());
        }
        let due = sched.due_by(t);
        // Write every due request (a partial write resumes on the next turn).
        loop {
            if write_left == 0 {
                if started >= due || intended.len() >= MAX_OUTSTANDING {
                    break;
                }
                let at = sched.send_at(started);
                if t > at + 1_000_000 {
                    x.late += 1;
                }
                intended.push_back(at);
                started += 1;
                x.sent += 1;
                write_left = req.len();
            }
            match s.write(&req[req.len() - write_left..]) {
                Ok(n) => write_left -= n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) =>
                {
                    return Err(Ended::Closed)
                }
                Err(e) => return Err(Ended::Failed(e.to_string())),
            }
        }
        // Read every complete response.
        loop {
            match s.read(&mut resp[read_off..]) {
                Ok(0) => return Err(Ended::Closed),
                Ok(n) => {
                    read_off += n;
                    if read_off == resp.len() {
                        read_off = 0;
                        let t = now();
                        if let Some(at) = intended.pop_front() {
                            rec.record(t, t.saturating_sub(at));
                        }
                        if p.dirty {
                            dirty_read(&resp);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e)
                    if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) =>
                {
                    return Err(Ended::Closed)
                }
                Err(e) => return Err(Ended::Failed(e.to_string())),
            }
        }
        let mut events = PollFlags::POLLIN;
        if write_left > 0 {
            events |= PollFlags::POLLOUT;
        }
        poll_wait(
            s.as_fd(),
            events,
            if write_left > 0 {
                now() + POLL.as_nanos() as u64
            } else {
                sched.send_at(started)
            },
            SEND_SPIN_NS,
        );
    }
}

fn udp_open(
    ctx: &SessionCtx,
    p: &RrParams,
    rate: u64,
    rec: &mut Recorder,
    x: &mut Extra,
) -> Result<(), Ended> {
    if p.rx_timestamp {
        return Err(Ended::Failed(
            "software receive timestamps are used with closed-loop UDP rr, not --rate".into(),
        ));
    }
    match &p.via {
        None => udp_open_on(ctx, p, rate, rec, x, udp_socket(ctx, p)?),
        Some(via) => udp_open_on(ctx, p, rate, rec, x, open_via(ctx, via)?),
    }
}

fn udp_open_on<D: Datagrams>(
    ctx: &SessionCtx,
    p: &RrParams,
    rate: u64,
    rec: &mut Recorder,
    x: &mut Extra,
    mut s: D,
) -> Result<(), Ended> {
    let mut req = vec![0u8; p.request as usize];
    let mut buf = vec![0u8; 65536];
    // A ring wide enough for one second of requests at this rate.
    let mut ring = Ring::new((rate as usize).clamp(64, MAX_OUTSTANDING));
    ctx.prove(&mut s)?;
    ctx.wait_start();
    let sched = ctx.schedule(rate);
    let mut seq = 0u64;
    let mut answered = 0u64;
    loop {
        let t = now();
        if ctx.window.over(t) {
            break;
        }
        while seq < sched.due_by(t) {
            let at = sched.send_at(seq);
            if t > at + 1_000_000 {
                x.late += 1;
            }
            stamp_header(&mut req, ctx.key, seq);
            ring.put(seq, at);
            seq += 1;
            x.sent += 1;
            match s.send(&req) {
                Ok(()) => {}
                // A full socket buffer loses the request: it counts as lost.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(send_err(e)),
            }
        }
        loop {
            match s.recv_now(&mut buf) {
                Ok(Some(n)) => {
                    let t = now();
                    if let Some(at) = header_seq(&buf[..n], ctx.key).and_then(|q| ring.take(q)) {
                        rec.record(t, t.saturating_sub(at));
                        answered += 1;
                    }
                }
                Ok(None) => break,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(Ended::Closed),
                Err(e) => return Err(Ended::Failed(format!("UDP receive: {e}"))),
            }
        }
        s.idle_until(sched.send_at(seq));
    }
    // Answers still on their way are not lost: give them a moment.
    let drain_end = now() + UDP_LOSS_TIMEOUT.as_nanos() as u64;
    while now() < drain_end && answered < seq {
        match s.recv_now(&mut buf) {
            Ok(Some(n)) => {
                if header_seq(&buf[..n], ctx.key)
                    .and_then(|q| ring.take(q))
                    .is_some()
                {
                    answered += 1;
                }
            }
            _ => s.idle_until(now() + 1_000_000),
        }
    }
    x.lost = seq - answered;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_matches_only_in_flight_sequences() {
        let mut r = Ring::new(4); // rounds up to 64 slots
        r.put(1, 100);
        r.put(2, 200);
        assert_eq!(r.take(2), Some(200));
        assert_eq!(r.take(2), None, "an answer is matched once");
        r.put(65, 300); // overwrites slot of 1: 1 is forgotten
        assert_eq!(r.take(1), None);
        assert_eq!(r.take(65), Some(300));
    }

    #[test]
    fn header_needs_the_key() {
        let mut b = [0u8; 32];
        stamp_header(&mut b, 7, 42);
        assert_eq!(header_seq(&b, 7), Some(42));
        assert_eq!(header_seq(&b, 8), None);
        assert_eq!(header_seq(&b[..10], 7), None);
    }
}
