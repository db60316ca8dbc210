//! Request-response over TCP and UDP: closed loop with `burst` requests in
//! flight per session (netperf's burst), or open loop on a schedule with
//! latency counted from each request's intended send instant.
//!
//! Every transaction is timed individually: the send stamp of each request in
//! flight is kept (a FIFO for TCP, a sequence-indexed ring for UDP) and its
//! response is matched to it.
//!
//! Here: the parameters, the session and what TCP, UDP and ping share
//! (kernel receive stamps, the sequence ring, the paced wait); the loops
//! are in `rr/tcp.rs` and `rr/udp.rs`.

use std::io::IoSliceMut;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags};
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, TimestampingFlag,
};
use serde::Serialize;

use crate::clock;
use crate::path::Via;
use crate::proto::Transport;
use crate::run::SessionCtx;
use crate::session::{now, Ended, Outcome, Recorder};

mod tcp;
mod udp;

use self::tcp::{tcp_closed, tcp_open};
use self::udp::{udp_closed, udp_open};

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
    /// Open loop: how the sends are spaced.
    #[serde(skip_serializing_if = "is_fixed")]
    pub arrival: crate::arrivals::Arrival,
    pub busy_poll_us: Option<u32>,
    /// Take the receive instant from the kernel's software timestamp
    /// (SO_TIMESTAMPING) instead of reading the clock after recv returns.
    pub rx_timestamp: bool,
    /// UDP through a path that is not a kernel socket (e.g. the switch's
    /// poll-mode endpoint); `None`: kernel sockets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<Via>,
}

fn is_fixed(a: &crate::arrivals::Arrival) -> bool {
    *a == crate::arrivals::Arrival::Fixed
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
    out.gaps = extra.gaps;
    out.bytes = out.ops * u64::from(p.request + p.response);
    out.error = result.err().map(|e| ctx.describe(e));
    out
}

#[derive(Default)]
struct Extra {
    sent: u64,
    lost: u64,
    late: u64,
    /// Open loop: the gaps the sends really had.
    gaps: Option<crate::arrivals::GapSample>,
}

/// Turns on kernel software receive timestamps (SO_TIMESTAMPING) on `s`.
pub(crate) fn enable_rx_timestamps(s: &impl std::os::fd::AsFd) -> Result<(), Ended> {
    let flags = TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE;
    setsockopt(s, sockopt::Timestamping, &flags)
        .map_err(|e| Ended::Failed(format!("enabling SO_TIMESTAMPING: {e}")))
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

/// How close to a due send a timed loop stops sleeping and spins: a wake-up
/// from a timed sleep is late by the scheduler's latency (tens of µs on a
/// loaded or virtual host), which open-loop latency would count.
pub const SEND_SPIN_NS: u64 = 20_000;

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
    // Wake `spin_ns` early: the next turns spin to the instant.
    let wait = (next_due - spin_ns - t).min(POLL.as_nanos() as u64);
    let ts = nix::sys::time::TimeSpec::from_duration(Duration::from_nanos(wait));
    let mut fds = [PollFd::new(fd, events)];
    let _ = nix::poll::ppoll(&mut fds, Some(ts), None);
}

#[cfg(test)]
mod tests {
    use super::Ring;

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
}
