//! Request-response over TCP: one data connection per session, requests
//! matched to responses in order (a FIFO of send stamps), closed loop with
//! `burst` in flight or open loop on the session's schedule. Separate from
//! UDP because TCP is a byte stream: no loss to count, partial reads and
//! writes to resume.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::PollFlags;

use super::{poll_wait, Extra, RrParams, MAX_OUTSTANDING, POLL, SEND_SPIN_NS};
use crate::run::SessionCtx;
use crate::session::{dirty_read, dirty_write, now, read_full, write_full, Ended, Recorder};
use crate::sys;

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

pub(super) fn tcp_closed(ctx: &SessionCtx, p: &RrParams, rec: &mut Recorder) -> Result<(), Ended> {
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

pub(super) fn tcp_open(
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
    let (mut arrivals, mut gaps) = ctx.arrivals(p.arrival, rate);
    let (mut write_left, mut read_off) = (0usize, 0usize);
    loop {
        let t = now();
        if ctx.window.over(t) {
            x.gaps = Some(gaps);
            return Ok(());
        }
        // Write every due request (a partial write resumes on the next turn).
        loop {
            if write_left == 0 {
                if arrivals.next_at() > t || intended.len() >= MAX_OUTSTANDING {
                    break;
                }
                let at = arrivals.take();
                if t > at + 1_000_000 {
                    x.late += 1;
                }
                gaps.sent(t, at);
                intended.push_back(at);
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
                arrivals.next_at()
            },
            SEND_SPIN_NS,
        );
    }
}
