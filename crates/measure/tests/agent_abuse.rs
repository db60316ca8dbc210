//! What a network client can do to `vnio agent`, on loopback against a real
//! agent: it cannot make the agent send to an address that did not prove it
//! receives there, escape the rate cap, hold a slot with a far start instant
//! or by saying nothing, or commit more threads and memory than the budget;
//! every refusal is one line and the agent keeps serving.

mod common;

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use vnio_measure::budget::Budget;
use vnio_measure::client::Control;
use vnio_measure::clock;
use vnio_measure::cookie;
use vnio_measure::proto::{
    read_msg, write_msg, Limits, Request, Response, TestSpec, Transport, Workload, PROTO_VERSION,
    UDP_COOKIE_SEQ, UDP_HELLO_SEQ, UDP_PROVEN_SEQ,
};
use vnio_measure::stream::{job, Direction, StreamParams};

fn spec(workload: Workload, sessions: u32) -> TestSpec {
    TestSpec {
        workload,
        sessions,
        duration_ms: 3000,
        cpus: vec![],
        busy_poll_us: None,
        start_at_unix_ns: clock::realtime_ns(),
        data_from: None,
    }
}

fn udp_echo(request: u32, response: u32) -> Workload {
    Workload::Echo {
        transport: Transport::Udp,
        request,
        response,
    }
}

/// A socket standing for a third party at 127.0.0.2 (on Linux all of
/// 127/8 is local): what it receives is what a victim would receive.
fn victim() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.2:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s
}

/// Everything `s` receives within `within`: (datagrams, bytes, largest).
fn drain(s: &UdpSocket, within: Duration) -> (usize, usize, usize) {
    let end = Instant::now() + within;
    let mut buf = vec![0u8; 65_536];
    let (mut n, mut bytes, mut largest) = (0, 0, 0);
    while Instant::now() < end {
        match s.recv(&mut buf) {
            Ok(len) => {
                n += 1;
                bytes += len;
                largest = largest.max(len);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    (n, bytes, largest)
}

fn datagram(key: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    d[..8].copy_from_slice(&key.to_be_bytes());
    d[8..16].copy_from_slice(&seq.to_be_bytes());
    d
}

#[test]
fn a_declared_address_gets_cookies_until_it_echoes_one() {
    let agent = TestAgent::default();
    let v = victim();
    let mut c = Control::connect(agent.addr, None).unwrap();
    let mut s = spec(udp_echo(24, 60_000), 1);
    s.data_from = Some("127.0.0.2".parse().unwrap());
    let (key, ports) = c.start(&s).unwrap();
    let data = SocketAddr::new(agent.addr.ip(), ports[0]);
    // Forged requests "from" the victim, carrying the key: 24 bytes each.
    for seq in 0..50u64 {
        v.send_to(&datagram(key, seq, 24), data).unwrap();
    }
    v.send_to(&datagram(key, UDP_HELLO_SEQ, 24), data).unwrap();
    let (n, bytes, largest) = drain(&v, Duration::from_millis(600));
    assert!(
        largest <= 24 && bytes <= 51 * 24,
        "the agent reflected {n} datagrams, {bytes} bytes, the largest {largest}, \
         to an address that never proved it receives there"
    );
    // An address that does receive there proves it and is answered.
    let mut buf = vec![0u8; 65_536];
    v.send_to(&datagram(key, UDP_HELLO_SEQ, 24), data).unwrap();
    let cookie = loop {
        let n = v.recv(&mut buf).unwrap();
        if buf[8..16] == UDP_COOKIE_SEQ.to_be_bytes() {
            break cookie::cookie_in(&buf[..n]).unwrap();
        }
    };
    v.send_to(&cookie::datagram(key, UDP_COOKIE_SEQ, cookie), data)
        .unwrap();
    let n = v.recv(&mut buf).unwrap();
    assert_eq!((n, &buf[8..16]), (24, &UDP_PROVEN_SEQ.to_be_bytes()[..]));
    v.send_to(&datagram(key, 7, 24), data).unwrap();
    assert_eq!(v.recv(&mut buf).unwrap(), 60_000);
    let report = c.stop().unwrap();
    assert!(report.foreign_dropped >= 50, "{report:?}");
}

#[test]
fn a_forged_hello_starts_no_stream() {
    let agent = TestAgent::default();
    let v = victim();
    let mut c = Control::connect(agent.addr, None).unwrap();
    let mut s = spec(
        Workload::Source {
            transport: Transport::Udp,
            size: 60_000,
            rate_pps: 1000,
            burst: 1,
        },
        1,
    );
    s.data_from = Some("127.0.0.2".parse().unwrap());
    let (key, ports) = c.start(&s).unwrap();
    let data = SocketAddr::new(agent.addr.ip(), ports[0]);
    v.send_to(&datagram(key, UDP_HELLO_SEQ, 24), data).unwrap();
    let (n, bytes, largest) = drain(&v, Duration::from_millis(600));
    assert!(
        largest <= 24 && n <= 1,
        "one forged hello made the agent send {n} datagrams ({bytes} bytes)"
    );
    c.stop().unwrap();
}

#[test]
fn an_unpaced_udp_source_is_held_to_max_rate() {
    let agent = TestAgent::start(
        None,
        Limits {
            max_rate_pps: 2000,
            ..Limits::default()
        },
    );
    let c = common(&[agent.addr], 2, 500);
    let p = StreamParams {
        transport: Transport::Udp,
        direction: Direction::Receive,
        size: 64,
        rate_per_session: None,
        burst: 1,
        busy_poll_us: None,
    };
    let doc = vnio_measure::run::run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    // 0.6 s of test at 2000 pps in all; the pacer's first bursts are due at once.
    let sent = doc.chosen().unwrap().merged.sent;
    assert!(
        sent > 0 && sent <= 1400,
        "an unpaced source sent {sent} packets in 0.6 s past --max-rate 2000"
    );
}

/// Hello on a raw control connection.
fn hello(agent: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(agent).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write_msg(
        &mut s,
        &Request::Hello {
            proto: PROTO_VERSION,
            client: "test".into(),
            token: None,
        },
    )
    .unwrap();
    let r: Response = read_msg(&mut s).unwrap();
    assert!(matches!(r, Response::Welcome { .. }), "{r:?}");
    s
}

#[test]
fn a_start_instant_beyond_ten_seconds_is_refused() {
    let agent = TestAgent::default();
    let mut c = Control::connect(agent.addr, None).unwrap();
    let mut s = spec(
        Workload::Sink {
            transport: Transport::Tcp,
        },
        1,
    );
    s.start_at_unix_ns = clock::realtime_ns() + 3600 * 1_000_000_000;
    let e = c.start(&s).expect_err("a start an hour ahead is refused");
    assert!(e.to_string().contains("ahead"), "{e}");
    // The connection stays usable.
    s.start_at_unix_ns = clock::realtime_ns();
    c.start(&s).unwrap();
    c.stop().unwrap();
}

/// A TCP source waiting for a start instant 9 s ahead, its data session open.
fn waiting_source(agent: SocketAddr) -> Control {
    let mut c = Control::connect(agent, None).unwrap();
    let mut s = spec(
        Workload::Source {
            transport: Transport::Tcp,
            size: 1024,
            rate_pps: 0,
            burst: 1,
        },
        1,
    );
    s.start_at_unix_ns = clock::realtime_ns() + 9_000_000_000;
    s.duration_ms = 20_000;
    let (key, ports) = c.start(&s).unwrap();
    let mut d = TcpStream::connect((agent.ip(), ports[0])).unwrap();
    let mut hdr = [0u8; 12];
    hdr[..8].copy_from_slice(&key.to_be_bytes());
    std::io::Write::write_all(&mut d, &hdr).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // Keep the data session open for as long as the test may run.
    std::mem::forget(d);
    c
}

#[test]
fn stop_ends_a_test_waiting_for_its_start() {
    let agent = TestAgent::default();
    let mut c = waiting_source(agent.addr);
    let t = Instant::now();
    c.stop().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "stop took {:?}: the session slept through it",
        t.elapsed()
    );
}

#[test]
fn agent_shutdown_ends_a_test_waiting_for_its_start() {
    let agent = TestAgent::default();
    let _c = waiting_source(agent.addr);
    let t = Instant::now();
    agent.stop();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        t.elapsed()
    );
}

#[test]
fn a_client_that_only_says_hello_is_dropped() {
    let mut cfg = config();
    cfg.idle = Duration::from_secs(1);
    let agent = TestAgent::with(cfg);
    let mut s = hello(agent.addr);
    let t = Instant::now();
    let r: Result<Response, _> = read_msg(&mut s);
    match r {
        Ok(Response::Error { message }) => assert!(message.contains("idle"), "{message}"),
        other => panic!(
            "expected an idle refusal, got {other:?} after {:?}",
            t.elapsed()
        ),
    }
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(
        read_msg::<_, Response>(&mut s).is_err(),
        "the connection is closed"
    );
}

#[test]
fn the_budget_refuses_over_commit_and_is_given_back() {
    let mut cfg = config();
    cfg.budget = Budget {
        threads: 4,
        bytes: 1 << 30,
        client_threads: 3,
        client_bytes: 1 << 30,
    };
    let agent = TestAgent::with(cfg);
    let mut a = Control::connect(agent.addr, None).unwrap();
    let mut b = Control::connect(agent.addr, None).unwrap();
    let e = b.start(&spec(udp_echo(64, 64), 4)).err().unwrap();
    assert!(e.to_string().contains("budget per client"), "{e}");
    a.start(&spec(udp_echo(64, 64), 3)).unwrap();
    let e = b.start(&spec(udp_echo(64, 64), 2)).err().unwrap();
    assert!(e.to_string().contains("budget"), "{e}");
    a.stop().unwrap();
    b.start(&spec(udp_echo(64, 64), 2)).unwrap();
    b.stop().unwrap();
    // Memory counts too: 3 sessions of 1 MiB requests and responses.
    let mut cfg = config();
    cfg.budget.bytes = 4 << 20;
    let agent = TestAgent::with(cfg);
    let mut a = Control::connect(agent.addr, None).unwrap();
    let tcp_echo = Workload::Echo {
        transport: Transport::Tcp,
        request: 1 << 20,
        response: 1 << 20,
    };
    let e = a.start(&spec(tcp_echo, 3)).err().unwrap();
    assert!(e.to_string().contains("MiB"), "{e}");
}
