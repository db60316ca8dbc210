//! What a data session of a test does: serve TCP connections that present
//! the test key, echo or count UDP datagrams from a proven address, or send
//! to it at a capped rate; every wait ends when the test does.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Session, SessionEnd, Shared, HANDSHAKE, POLL};
use crate::budget::{SINK_BUF, UDP_BUF};
use crate::clock;
use crate::cookie::{self, Cookies};
use crate::cpu::CpuTime;
use crate::pace::Schedule;
use crate::pin;
use crate::proto::{
    Counters, Workload, UDP_COOKIE_LEN, UDP_COOKIE_SEQ, UDP_HEADER, UDP_HELLO_SEQ, UDP_PROVEN_SEQ,
};
use crate::session::{read_full, would_block, write_full};
use crate::sys;

/// Runs one session's work on the calling thread with its placement and CPU
/// accounting around it.
pub(super) fn run_session(s: &Session, work: impl FnOnce(&mut Counters)) -> SessionEnd {
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

pub(super) fn accept_sessions(listener: TcpListener, test: &Session) {
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

pub(super) fn udp_session(sock: &UdpSocket, test: &Session, cookies: &Cookies, c: &mut Counters) {
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
