//! Bad input and faults: the agent never dies from a bad client and leaks no
//! thread or socket; the client says what is wrong in one line.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use vnio_measure::client::{ClientError, Control};
use vnio_measure::proto::{
    read_msg, write_msg, Limits, Request, Response, TestSpec, Transport, Workload,
};
use vnio_measure::rr::{job, RrParams};
use vnio_measure::run::{run, RunError};

fn rr_params() -> RrParams {
    RrParams {
        transport: Transport::Tcp,
        request: 64,
        response: 64,
        burst: 1,
        nodelay: true,
        dirty: false,
        rate_per_session: None,
        arrival: Default::default(),
        busy_poll_us: None,
        rx_timestamp: false,
        via: None,
    }
}

fn echo_spec(sessions: u32) -> TestSpec {
    TestSpec {
        workload: Workload::Echo {
            transport: Transport::Tcp,
            request: 64,
            response: 64,
        },
        sessions,
        duration_ms: 1000,
        cpus: vec![],
        busy_poll_us: None,
        start_at_unix_ns: 0,
        data_from: None,
    }
}

/// Waits until the agent has finished with every client.
fn settle() {
    std::thread::sleep(Duration::from_millis(400));
}

#[test]
fn agent_survives_garbage_and_leaks_nothing() {
    let agent = TestAgent::default();
    settle();
    let (t0, f0) = (threads(), fds());
    // Garbage, a truncated frame, a huge length, a wrong first message, a
    // client that says hello and vanishes mid-test.
    for bytes in [
        &b"GET / HTTP/1.0\r\n\r\n"[..],
        &[0, 0, 0, 9, b'{'],
        &[0xff, 0xff, 0xff, 0xff],
        &[0, 0, 0, 2, b'{', b'}'],
    ] {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        s.write_all(bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    {
        let mut s = TcpStream::connect(agent.addr).unwrap();
        write_msg(&mut s, &Request::Stop).unwrap();
        let r: Response = read_msg(&mut s).unwrap();
        assert!(
            matches!(r, Response::Error { ref message } if message.contains("hello")),
            "{r:?}"
        );
    }
    {
        let mut c = Control::connect(agent.addr, None).unwrap();
        let (_key, ports) = c.start(&echo_spec(2)).unwrap();
        // A stranger connecting to the data port without the key is dropped.
        let mut intruder = TcpStream::connect(("127.0.0.1", ports[0])).unwrap();
        intruder.write_all(&[0u8; 12]).unwrap();
        drop(c); // vanish mid-test
    }
    settle();
    // The agent still serves a real run.
    let c = common(&[agent.addr], 1, 200);
    let doc = run(&c, &job(&c, rr_params()), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    settle();
    assert_eq!(threads(), t0, "agent threads leaked");
    assert_eq!(fds(), f0, "agent sockets leaked");
    agent.stop();
}

#[test]
fn token_version_and_limits_are_enforced_with_reasons() {
    let agent = TestAgent::start(
        Some("s3cret"),
        Limits {
            max_sessions: 2,
            ..Limits::default()
        },
    );
    let e = Control::connect(agent.addr, None).err().unwrap();
    assert!(
        matches!(e, ClientError::Refused { .. }) && e.to_string().contains("token"),
        "{e}"
    );
    let e = Control::connect(agent.addr, Some("wrong")).err().unwrap();
    assert!(e.to_string().contains("token"), "{e}");
    let mut c = Control::connect(agent.addr, Some("s3cret")).unwrap();
    let e = c.start(&echo_spec(3)).err().unwrap();
    assert!(e.to_string().contains("--max-sessions"), "{e}");
    // The refusal leaves the connection usable.
    c.start(&echo_spec(1)).unwrap();
    c.stop().unwrap();
    // A client from the future.
    let mut s = TcpStream::connect(agent.addr).unwrap();
    write_msg(
        &mut s,
        &Request::Hello {
            proto: 99,
            client: "future".into(),
            token: Some("s3cret".into()),
        },
    )
    .unwrap();
    let r: Response = read_msg(&mut s).unwrap();
    assert!(
        matches!(r, Response::Error { ref message } if message.contains("protocol version 99")),
        "{r:?}"
    );
}

#[test]
fn unreachable_agent_is_one_clear_error() {
    // A port nobody listens on: bind one, learn its number, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = common(&[format!("127.0.0.1:{port}").parse().unwrap()], 1, 100);
    let e = run(&c, &job(&c, rr_params()), no_stop(), &quiet)
        .err()
        .unwrap();
    assert!(matches!(
        e,
        RunError::Agent(ClientError::Unreachable { .. })
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("cannot reach agent") && msg.contains("vnio agent"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
}

#[test]
fn port_in_use_is_a_clear_error() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = vnio_measure::agent::Agent::bind(vnio_measure::agent::AgentConfig::new(
        busy.local_addr().unwrap(),
    ))
    .err()
    .unwrap();
    assert!(
        e.to_string().contains("another agent already listens"),
        "{e}"
    );
}

#[test]
fn agent_killed_mid_run_keeps_partial_results() {
    let agent = TestAgent::default();
    let addr = agent.addr;
    let c = common(&[addr], 1, 3000);
    // Stop the agent a second into the run: its sessions end, sockets close.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1200));
        agent.stop();
    });
    let doc = run(&c, &job(&c, rr_params()), no_stop(), &quiet).unwrap();
    killer.join().unwrap();
    let it = doc.chosen().expect("the partial iteration is kept");
    assert!(
        it.merged.ops > 0,
        "what was measured before the agent went is kept"
    );
    assert!(!doc.errors.is_empty());
    assert!(
        doc.errors.iter().any(|e| e.contains("closed")),
        "{:?}",
        doc.errors
    );
}

#[test]
fn stop_flag_ends_the_run_with_what_was_measured() {
    let agent = TestAgent::default();
    let c = common(&[agent.addr], 1, 10_000);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(900));
        s2.store(true, Ordering::Relaxed);
    });
    let t = std::time::Instant::now();
    let doc = run(&c, &job(&c, rr_params()), stop, &quiet).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the run stopped early"
    );
    assert!(doc.interrupted);
    let it = doc.chosen().unwrap();
    assert!(it.merged.ops > 0);
    assert!(
        it.seconds < 2.0,
        "the window is what was measured: {}",
        it.seconds
    );
}
