//! Request-response over UDP, through a kernel socket or a non-kernel path
//! (`--via`): each request carries the session key and a sequence number,
//! its send stamp waits in a [`Ring`] until the answer with that number
//! comes, and a request unanswered for long enough is counted lost.
//! Separate from TCP because datagrams are matched by number, not order,
//! and can be lost.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use super::{enable_rx_timestamps, Extra, Ring, RrParams, MAX_OUTSTANDING, POLL, UDP_LOSS_TIMEOUT};
use crate::clock;
use crate::path::{Datagrams, KernelUdp};
use crate::proto::UDP_HEADER;
use crate::run::SessionCtx;
use crate::session::{dirty_read, dirty_write, now, Ended, Recorder};
use crate::sys;

/// A UDP socket set up for one session: connected to its agent port, with
/// optional busy polling and kernel receive timestamps.
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

pub(super) fn udp_closed(
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

pub(super) fn udp_open(
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
    let (mut arrivals, mut gaps) = ctx.arrivals(p.arrival, rate);
    let mut seq = 0u64;
    let mut answered = 0u64;
    loop {
        let t = now();
        if ctx.window.over(t) {
            break;
        }
        while arrivals.next_at() <= t {
            let at = arrivals.take();
            if t > at + 1_000_000 {
                x.late += 1;
            }
            gaps.sent(t, at);
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
        s.idle_until(arrivals.next_at());
    }
    x.gaps = Some(gaps);
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
    use super::{header_seq, stamp_header};

    #[test]
    fn header_needs_the_key() {
        let mut b = [0u8; 32];
        stamp_header(&mut b, 7, 42);
        assert_eq!(header_seq(&b, 7), Some(42));
        assert_eq!(header_seq(&b, 8), None);
        assert_eq!(header_seq(&b[..10], 7), None);
    }
}
