//! ICMP echo answered by the target's kernel: unprivileged ICMP sockets where
//! net.ipv4.ping_group_range allows them, raw sockets otherwise (root).
//! Requests leave on an absolute schedule (`--interval`), one socket and
//! identifier per session; every reply is matched by sequence number.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::PollFlags;
use serde::Serialize;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::clock;
use crate::cpu::{Cost, CpuTime, MachineTicks, MachineUse};
use crate::env::Environment;
use crate::pace::Schedule;
use crate::result::{Document, Iteration, Measured};
use crate::rr::{enable_rx_timestamps, poll_wait, recv_stamped, Ring};
use crate::session::{now, Intervals, Outcome, Recorder, Window};
use crate::stats::Latency;

#[derive(Clone, Debug, Serialize)]
pub struct PingParams {
    pub targets: Vec<String>,
    pub interval: Duration,
    pub sessions: u32,
    /// ICMP payload bytes.
    pub size: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub iterations: u32,
    pub cpus: Vec<usize>,
    pub rx_timestamp: bool,
    /// Measure in rounds of `duration` until this percentile is known
    /// ([`crate::goal`]); `iterations` is then the least number of rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_goal: Option<crate::goal::CiGoal>,
}

#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error("ping target {0:?} is not an IPv4 address or resolvable name")]
    Target(String),
    #[error("no permission for ICMP sockets: run as root, or allow unprivileged ping with `sysctl net.ipv4.ping_group_range=\"0 2147483647\"`")]
    Permission,
    #[error("cannot open an ICMP socket: {0}")]
    Socket(#[source] std::io::Error),
}

/// How a session's socket talks ICMP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// SOCK_DGRAM/IPPROTO_ICMP: the kernel sets identifier and checksum.
    Dgram,
    /// SOCK_RAW: we build the header, and replies arrive with the IP header.
    Raw,
}

fn open_socket() -> Result<(Socket, Kind), PingError> {
    match Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::ICMPV4)) {
        Ok(s) => return Ok((s, Kind::Dgram)),
        Err(e)
            if !matches!(e.kind(), ErrorKind::PermissionDenied)
                && e.raw_os_error() != Some(libc::EACCES) =>
        {
            return Err(PingError::Socket(e))
        }
        Err(_) => {}
    }
    match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)) {
        Ok(s) => Ok((s, Kind::Raw)),
        Err(e)
            if matches!(e.kind(), ErrorKind::PermissionDenied)
                || e.raw_os_error() == Some(libc::EPERM) =>
        {
            Err(PingError::Permission)
        }
        Err(e) => Err(PingError::Socket(e)),
    }
}

/// Keeps only echo replies carrying `id` on a raw socket. Without it every
/// raw ICMP socket on the host receives every reply: with N sessions each
/// reply wakes N threads, and at 10 sessions the instrument's own wake-ups
/// take the CPU the path under test needs.
fn keep_only_our_replies(sock: &Socket, id: u16) -> std::io::Result<()> {
    use libc::{
        sock_filter, BPF_B, BPF_H, BPF_IND, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_LDX, BPF_MSH,
        BPF_RET,
    };
    let op = |code: u32, jt: u8, jf: u8, k: u32| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let filter = [
        // X = the IP header's length; the ICMP header follows it.
        op(BPF_LDX | BPF_B | BPF_MSH, 0, 0, 0),
        op(BPF_LD | BPF_B | BPF_IND, 0, 0, 0),
        op(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 0), // type: echo reply
        op(BPF_LD | BPF_H | BPF_IND, 0, 0, 4),
        op(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, u32::from(id)),
        op(BPF_RET | BPF_K, 0, 0, u32::MAX),
        op(BPF_RET | BPF_K, 0, 0, 0),
    ];
    sock.attach_filter(&filter)
}

/// The Internet checksum (RFC 1071).
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in data.chunks(2) {
        let word = if chunk.len() == 2 {
            u16::from_be_bytes([chunk[0], chunk[1]])
        } else {
            u16::from(chunk[0]) << 8
        };
        sum += u32::from(word);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn build_echo(buf: &mut [u8], id: u16, seq: u16) {
    buf[0] = 8; // echo request
    buf[1] = 0;
    buf[2..4].fill(0);
    buf[4..6].copy_from_slice(&id.to_be_bytes());
    buf[6..8].copy_from_slice(&seq.to_be_bytes());
    let c = checksum(buf);
    buf[2..4].copy_from_slice(&c.to_be_bytes());
}

/// (identifier, sequence) of an echo reply; skips the IP header of raw sockets.
fn parse_reply(buf: &[u8], kind: Kind) -> Option<(u16, u16)> {
    let icmp = match kind {
        Kind::Dgram => buf,
        Kind::Raw => {
            let ihl = usize::from(buf.first()? & 0x0f) * 4;
            buf.get(ihl..)?
        }
    };
    if icmp.len() < 8 || icmp[0] != 0 {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

fn resolve_v4(t: &str) -> Result<Ipv4Addr, PingError> {
    if let Ok(ip) = t.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    use std::net::ToSocketAddrs;
    (t, 0)
        .to_socket_addrs()
        .map_err(|_| PingError::Target(t.into()))?
        .find_map(|a| match a {
            SocketAddr::V4(v4) => Some(*v4.ip()),
            _ => None,
        })
        .ok_or_else(|| PingError::Target(t.into()))
}

/// Runs ping for every iteration against every target.
pub fn run(
    p: &PingParams,
    stop: Arc<AtomicBool>,
    progress: &dyn Fn(&str),
) -> Result<Document, PingError> {
    let targets: Vec<Ipv4Addr> = p
        .targets
        .iter()
        .map(|t| resolve_v4(t))
        .collect::<Result<_, _>>()?;
    // Fail before measuring when ICMP is not allowed at all.
    drop(open_socket()?);
    let params = serde_json::to_value(p).unwrap_or_default();
    let mut doc = Document::new("ping", params, p.targets.clone(), Environment::capture(250));
    let wanted = p.iterations.max(1) as usize;
    for i in 0.. {
        let more = p.ci_goal.is_some_and(|g| g.another_round(&doc, p.duration));
        if i >= wanted && !more {
            break;
        }
        progress(&crate::run::round_name(i, wanted, p.ci_goal.is_some()));
        let it = iteration(i, p, &targets, stop.clone());
        doc.errors.extend(it.errors.iter().cloned());
        let failed = !it.errors.is_empty();
        doc.iterations.push(it);
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            doc.interrupted = true;
            break;
        }
        if failed {
            break;
        }
    }
    if let Some(last) = doc.iterations.last() {
        doc.environment.set_during(last.machine, 0);
        doc.environment.placement = last.placement.clone();
    }
    doc.conclude();
    if let Some(g) = &p.ci_goal {
        g.conclude(&mut doc);
    }
    Ok(doc)
}

fn iteration(
    index: usize,
    p: &PingParams,
    targets: &[Ipv4Addr],
    stop: Arc<AtomicBool>,
) -> Iteration {
    let start = clock::now_ns() + 100_000_000;
    let window = Window::new(
        start,
        p.warmup.as_nanos() as u64,
        p.duration.as_nanos() as u64,
        stop,
    );
    let intervals = Arc::new(Intervals::default());
    let mut handles = Vec::new();
    let mut n = 0;
    for (t, &ip) in targets.iter().enumerate() {
        for s in 0..p.sessions as usize {
            let (w, iv, p2) = (window.clone(), intervals.clone(), p.clone());
            let cpu = crate::pin::pick(&p.cpus, n);
            let id = (std::process::id() as u16)
                .wrapping_mul(31)
                .wrapping_add(n as u16);
            n += 1;
            handles.push(std::thread::spawn(move || {
                session(t, s, ip, id, cpu, &p2, &w, iv)
            }));
        }
    }
    clock::wait_until(start);
    let (cpu0, ticks0) = (CpuTime::process(), MachineTicks::read());
    let outcomes: Vec<Outcome> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    let end = clock::now_ns();
    let (cpu1, ticks1) = (CpuTime::process(), MachineTicks::read());
    let mut it = Iteration {
        index,
        ..Default::default()
    };
    it.seconds = end.min(window.end_ns).saturating_sub(window.measure_ns) as f64 / 1e9;
    if let (Some(a), Some(b)) = (ticks0, ticks1) {
        it.machine = MachineUse::between(a, b);
    }
    let mut all = Latency::new();
    let mut merged = Measured {
        target: "all".into(),
        ..Default::default()
    };
    let mut ops_total = 0;
    for (t, ip) in targets.iter().enumerate() {
        let mine: Vec<&Outcome> = outcomes.iter().filter(|o| o.target == t).collect();
        let (mut m, lat, target_ops_total) =
            crate::session::sum_target(&mine, ip.to_string(), &mut it);
        m.finish(Some(&lat), it.seconds);
        all.merge(&lat);
        merged.add_counts(&m);
        ops_total += target_ops_total;
        it.per_target.push(m);
    }
    merged.finish(Some(&all), it.seconds);
    it.merged = merged;
    it.client_cost = Cost::new(cpu1.since(cpu0), ops_total, it.merged.bytes);
    it.intervals = intervals.points();
    it
}

#[allow(clippy::too_many_arguments)]
fn session(
    target: usize,
    index: usize,
    ip: Ipv4Addr,
    id: u16,
    cpu: Option<usize>,
    p: &PingParams,
    w: &Window,
    iv: Arc<Intervals>,
) -> Outcome {
    let placement = crate::pin::enter(format!("ping session {index} to {ip}"), cpu);
    let mut rec = Recorder::new(w, iv);
    let mut n = Counts::default();
    let result = ping(ip, id, index, p, w, &mut rec, &mut n);
    let mut out = Outcome::from_recorder(rec, target, crate::pin::finish(placement));
    out.sent = n.sent;
    out.lost = n.sent.saturating_sub(n.answered);
    out.late = n.late;
    out.bytes = out.ops * (8 + p.size as u64) * 2;
    out.error = result.err();
    out
}

/// A session's echoes: sent, answered, and sent over a millisecond late.
#[derive(Default)]
struct Counts {
    sent: u64,
    answered: u64,
    late: u64,
}

/// Session `index`'s echoes to `ip` (identifier `id`) on schedule through
/// the window, then the replies still on their way.
fn ping(
    ip: Ipv4Addr,
    id: u16,
    index: usize,
    p: &PingParams,
    w: &Window,
    rec: &mut Recorder,
    n: &mut Counts,
) -> Result<(), String> {
    let mut e = Echoes::open(id, p)?;
    let dest = SockAddr::from(SocketAddrV4::new(ip, 0));
    let mut req = vec![0u8; 8 + p.size];
    clock::wait_until(w.start_ns);
    let rate = (1e9 / p.interval.as_nanos().max(1) as f64).round().max(1.0) as u64;
    // A target's sessions are spread evenly over the interval, as
    // independent pingers are: N sessions make a steady N requests per
    // interval, not a burst of N that queues behind itself.
    let phase = p.interval.as_nanos() as u64 * index as u64 / u64::from(p.sessions.max(1));
    let sched = Schedule::new(w.start_ns + phase, rate, 1);
    let mut next = 0u64;
    let mut last_reply = now();
    while !w.over(now()) {
        let t = now();
        if next < sched.due_by(t) {
            let at = sched.send_at(next);
            if t > at + 1_000_000 {
                n.late += 1;
            }
            let seq = (next & 0xffff) as u16;
            build_echo(&mut req, id, seq);
            // The ring is keyed by the 16-bit sequence: older ones are lost.
            e.ring.put(u64::from(seq), e.clock_now());
            next += 1;
            n.sent += 1;
            match e.sock.send_to(&req, &dest) {
                Ok(_) => {}
                Err(err) if err.kind() == ErrorKind::WouldBlock => {}
                Err(err) => return Err(format!("ICMP send to {ip}: {err}")),
            }
        }
        if e.recv_all(rec, &mut n.answered)? {
            last_reply = now();
        }
        // No spin before a send: ping times each echo from its actual
        // send, so a late wake-up costs no accuracy, while spinning costs
        // a core at 10 sessions and steals it from the path under test.
        poll_wait(e.sock.as_fd(), PollFlags::POLLIN, sched.send_at(next), 0);
    }
    // Replies still on their way are not lost: wait up to a second.
    let drain = now() + 1_000_000_000;
    while n.answered < n.sent && now() < drain && now() - last_reply < 1_000_000_000 {
        if e.recv_all(rec, &mut n.answered)? {
            last_reply = now();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// A session's ICMP socket and the echoes it has in flight.
struct Echoes<'a> {
    sock: Socket,
    kind: Kind,
    /// Our echo identifier.
    id: u16,
    p: &'a PingParams,
    /// Send times by sequence number.
    ring: Ring,
    buf: Vec<u8>,
}

impl<'a> Echoes<'a> {
    /// The socket (a raw one filtered to our replies), non-blocking, with
    /// receive timestamps when asked.
    fn open(id: u16, p: &'a PingParams) -> Result<Self, String> {
        let (sock, kind) = open_socket().map_err(|e| e.to_string())?;
        if kind == Kind::Raw {
            keep_only_our_replies(&sock, id)
                .map_err(|e| format!("filtering the raw ICMP socket: {e}"))?;
        }
        sock.set_nonblocking(true).map_err(|e| e.to_string())?;
        if p.rx_timestamp {
            enable_rx_timestamps(&sock).map_err(|e| format!("{e:?}"))?;
        }
        Ok(Echoes {
            sock,
            kind,
            id,
            p,
            ring: Ring::new(4096),
            buf: vec![0u8; 65536 + 64],
        })
    }

    /// Now on the clock receive timestamps use (send times likewise).
    fn clock_now(&self) -> u64 {
        if self.p.rx_timestamp {
            clock::realtime_ns()
        } else {
            now()
        }
    }

    /// Takes every reply waiting, recording the answered ones' round
    /// trips; whether there was any.
    fn recv_all(&mut self, rec: &mut Recorder, answered: &mut u64) -> Result<bool, String> {
        let mut any = false;
        loop {
            let got = if self.p.rx_timestamp {
                recv_stamped(&self.sock, &mut self.buf)
            } else {
                self.sock
                    .recv(crate::sys::as_uninit(&mut self.buf))
                    .map(|n| (n, None))
            };
            match got {
                Ok((n, ts)) => {
                    let t = now();
                    if let Some((rid, rseq)) = parse_reply(&self.buf[..n], self.kind) {
                        // Raw sockets see every reply on the host: keep ours.
                        if self.kind == Kind::Raw && rid != self.id {
                            continue;
                        }
                        if let Some(s) = self.ring.take(u64::from(rseq)) {
                            let at = ts.unwrap_or_else(|| self.clock_now());
                            rec.record(t, at.saturating_sub(s));
                            *answered += 1;
                            any = true;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(any),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("ICMP receive: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_session_receives_only_its_own_replies() {
        let open = |id| {
            let s = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4)).ok()?;
            keep_only_our_replies(&s, id).expect("attach the filter");
            s.set_read_timeout(Some(Duration::from_millis(300))).ok()?;
            Some(s)
        };
        let (Some(ours), Some(other)) = (open(0x1234), open(0x4321)) else {
            eprintln!("skipped: raw ICMP sockets need root (CAP_NET_RAW)");
            return;
        };
        let mut req = [0u8; 16];
        build_echo(&mut req, 0x1234, 7);
        let lo = SockAddr::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        ours.send_to(&req, &lo).expect("send an echo to loopback");
        let mut buf = [0u8; 256];
        // Our socket gets the reply (raw sockets also see the request: the
        // filter drops it, as it is not a reply).
        let n = ours
            .recv(crate::sys::as_uninit(&mut buf))
            .expect("our reply arrives");
        assert_eq!(parse_reply(&buf[..n], Kind::Raw), Some((0x1234, 7)));
        let e = other
            .recv(crate::sys::as_uninit(&mut buf))
            .expect_err("the other session sees nothing");
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        );
    }

    #[test]
    fn checksum_of_a_known_echo() {
        // type 8, code 0, id 0x1234, seq 1, no payload
        let mut b = [0u8; 8];
        build_echo(&mut b, 0x1234, 1);
        assert_eq!(checksum(&b), 0, "a packet with its checksum sums to zero");
        assert_eq!(
            u16::from_be_bytes([b[2], b[3]]),
            !(0x0800u16 + 0x1234 + 0x0001)
        );
        let mut odd = [0u8; 9];
        build_echo(&mut odd, 7, 9);
        assert_eq!(checksum(&odd), 0);
    }

    #[test]
    fn replies_are_parsed_for_both_socket_kinds() {
        let mut icmp = [0u8; 16];
        build_echo(&mut icmp, 77, 5);
        icmp[0] = 0; // reply
        assert_eq!(parse_reply(&icmp, Kind::Dgram), Some((77, 5)));
        let mut ip = vec![0x45u8];
        ip.extend([0u8; 19]);
        ip.extend(icmp);
        assert_eq!(parse_reply(&ip, Kind::Raw), Some((77, 5)));
        // A request, a truncated reply, an IHL past the end: ignored.
        icmp[0] = 8;
        assert_eq!(parse_reply(&icmp, Kind::Dgram), None);
        assert_eq!(parse_reply(&icmp[..4], Kind::Dgram), None);
        assert_eq!(parse_reply(&[0x4f, 0, 0], Kind::Raw), None);
    }
}
