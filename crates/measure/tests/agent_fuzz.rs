//! A bounded fuzz of the agent's protocol: for a few seconds, seeded threads
//! throw random and mutated control messages and data datagrams at a live
//! agent on loopback while a well-behaved client keeps running tests. The
//! agent must never panic or die, and must serve the good client during and
//! after. `VNIO_FUZZ_SECS` (default 4) and `VNIO_FUZZ_SEED` (default 1)
//! lengthen a run or replay one.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use vnio_measure::clock;
use vnio_measure::proto::{
    read_msg, write_msg, Response, TestSpec, Transport, Workload, PROTO_VERSION, UDP_COOKIE_SEQ,
    UDP_HELLO_SEQ,
};
use vnio_measure::rr::{job, RrParams};
use vnio_measure::run::run;

static PANICS: AtomicUsize = AtomicUsize::new(0);
/// Tests the fuzzers got the agent to set up: the fuzz reaches the data plane.
static READY: AtomicUsize = AtomicUsize::new(0);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A valid start request, as JSON, to mutate.
fn valid_start(rng: &mut StdRng) -> Value {
    let transport = if rng.gen() {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    let workload = match rng.gen_range(0..3) {
        0 => Workload::Echo {
            transport,
            request: rng.gen_range(16..2048),
            response: rng.gen_range(16..2048),
        },
        1 => Workload::Sink { transport },
        _ => Workload::Source {
            transport,
            size: rng.gen_range(16..2048),
            rate_pps: rng.gen_range(0..2000),
            burst: rng.gen_range(0..8),
        },
    };
    let spec = TestSpec {
        workload,
        sessions: rng.gen_range(1..5),
        duration_ms: rng.gen_range(1..3000),
        cpus: vec![],
        busy_poll_us: None,
        start_at_unix_ns: clock::realtime_ns() + rng.gen_range(0..2_000_000_000),
        data_from: rng.gen_bool(0.3).then(|| "127.0.0.2".parse().unwrap()),
    };
    json!({ "type": "start", "spec": spec })
}

fn random_value(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..10) {
        0 => json!(u64::MAX),
        1 => json!(0),
        2 => json!(-1),
        3 => json!(1e300),
        4 => json!("x"),
        5 => Value::Null,
        6 => json!(true),
        7 => json!([1, 2, 3]),
        8 => json!({}),
        _ => json!(rng.gen::<u32>()),
    }
}

/// Sets one number of a start request's spec to a boundary value, keeping
/// the message well-formed so the agent's checks, not the parser, see it.
fn mutate_number(v: &mut Value, rng: &mut StdRng) {
    let field = [
        "sessions",
        "duration_ms",
        "start_at_unix_ns",
        "busy_poll_us",
    ][rng.gen_range(0..4)];
    let wfield = ["request", "response", "size", "rate_pps", "burst"][rng.gen_range(0..5)];
    let now = clock::realtime_ns();
    let value = [
        0,
        1,
        15,
        16,
        u64::from(u32::MAX),
        u64::MAX,
        now + 3_600_000_000_000,
        now.saturating_sub(3_600_000_000_000),
        65_507,
        70_000,
        1 << 20,
    ][rng.gen_range(0..11)];
    let spec = &mut v["spec"];
    if rng.gen() {
        spec[field] = json!(value);
    } else if spec["workload"].get(wfield).is_some() {
        spec["workload"][wfield] = json!(value);
    }
}

/// Replaces, removes or adds one random node of `v`.
fn mutate(v: &mut Value, rng: &mut StdRng) {
    match v {
        Value::Object(m) if !m.is_empty() && rng.gen_bool(0.7) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = &keys[rng.gen_range(0..keys.len())];
            match rng.gen_range(0..4) {
                0 => {
                    m.remove(k);
                }
                1 => {
                    m.insert(k.clone(), random_value(rng));
                }
                _ => {
                    if let Some(child) = m.get_mut(k) {
                        mutate(child, rng);
                    }
                }
            }
        }
        Value::Object(m) => {
            m.insert("extra".into(), random_value(rng));
        }
        Value::String(s) => {
            *s = [
                "tcp", "udp", "echo", "sink", "source", "start", "stop", "hello", "",
            ][rng.gen_range(0..9)]
            .into();
        }
        _ => *v = random_value(rng),
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn connect(agent: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&agent, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(700))).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(700))).ok()?;
    Some(s)
}

fn hello_json(rng: &mut StdRng) -> Value {
    let mut h = json!({ "type": "hello", "proto": PROTO_VERSION, "client": "fuzz", "token": null });
    if rng.gen_bool(0.2) {
        mutate(&mut h, rng);
    }
    h
}

/// Throws junk at the data ports of a test the fuzzer set up.
fn data_mischief(rng: &mut StdRng, agent: SocketAddr, key: u64, ports: &[u16]) {
    let socks: Vec<UdpSocket> = ["127.0.0.1:0", "127.0.0.2:0"]
        .iter()
        .filter_map(|a| UdpSocket::bind(a).ok())
        .collect();
    for _ in 0..rng.gen_range(0..40) {
        let port = ports[rng.gen_range(0..ports.len())];
        let to = SocketAddr::new(agent.ip(), port);
        if rng.gen_bool(0.3) {
            if let Ok(mut t) = TcpStream::connect_timeout(&to, Duration::from_millis(200)) {
                let mut hdr = [0u8; 12];
                rng.fill(&mut hdr[..]);
                if rng.gen() {
                    hdr[..8].copy_from_slice(&key.to_be_bytes());
                    hdr[8..].copy_from_slice(&rng.gen_range(0u32..6).to_be_bytes());
                }
                let _ = t.write_all(&hdr[..rng.gen_range(0..=12)]);
                let _ = t.set_read_timeout(Some(Duration::from_millis(50)));
                let _ = t.read(&mut [0u8; 4096]);
            }
            continue;
        }
        let mut d = vec![0u8; rng.gen_range(0..200)];
        rng.fill(&mut d[..]);
        if d.len() >= 16 && rng.gen() {
            d[..8].copy_from_slice(&key.to_be_bytes());
            let seq = [
                UDP_HELLO_SEQ,
                UDP_COOKIE_SEQ,
                rng.gen(),
                rng.gen_range(0..10),
            ][rng.gen_range(0..4)];
            d[8..16].copy_from_slice(&seq.to_be_bytes());
        }
        if let Some(s) = socks.get(rng.gen_range(0..socks.len().max(1))) {
            let _ = s.send_to(&d, to);
        }
    }
}

/// One round of abuse on one control connection.
fn round(rng: &mut StdRng, agent: SocketAddr) {
    let Some(mut s) = connect(agent) else { return };
    match rng.gen_range(0..4) {
        // Raw bytes, sometimes with a plausible length prefix.
        0 => {
            let mut b = vec![0u8; rng.gen_range(0..300)];
            rng.fill(&mut b[..]);
            let b = if rng.gen() { frame(&b) } else { b };
            let _ = s.write_all(&b);
        }
        // A sequence of valid and mutated messages.
        _ => {
            let _ = s.write_all(&frame(hello_json(rng).to_string().as_bytes()));
            let _: Result<Response, _> = read_msg(&mut s);
            for _ in 0..rng.gen_range(1..4) {
                let mut m = match rng.gen_range(0..5) {
                    0 => json!({ "type": "stop" }),
                    1 => hello_json(rng),
                    _ => valid_start(rng),
                };
                match rng.gen_range(0..4) {
                    0 => {}
                    1 => mutate(&mut m, rng),
                    _ if m.get("spec").is_some() => mutate_number(&mut m, rng),
                    _ => mutate(&mut m, rng),
                }
                let mut body = m.to_string().into_bytes();
                if rng.gen_bool(0.1) && !body.is_empty() {
                    let cut = rng.gen_range(0..body.len());
                    body.truncate(cut);
                }
                if s.write_all(&frame(&body)).is_err() {
                    return;
                }
                match read_msg::<_, Response>(&mut s) {
                    Ok(Response::Ready { key, ports }) if !ports.is_empty() => {
                        READY.fetch_add(1, Ordering::Relaxed);
                        data_mischief(rng, agent, key, &ports);
                        if rng.gen() {
                            let _ = write_msg(&mut s, &json!({ "type": "stop" }));
                            let _: Result<Response, _> = read_msg(&mut s);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }
    }
}

fn good_rr(agent: SocketAddr, transport: Transport) {
    let c = common(&[agent], 1, 150);
    let p = RrParams {
        transport,
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
    };
    let doc = run(&c, &job(&c, p), no_stop(), &quiet)
        .unwrap_or_else(|e| panic!("the good client failed: {e}"));
    assert!(doc.errors.is_empty(), "{transport}: {:?}", doc.errors);
    assert!(
        doc.chosen().unwrap().merged.ops > 0,
        "{transport}: no transaction"
    );
}

#[test]
fn fuzzed_protocol_never_kills_the_agent_nor_starves_a_good_client() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        default_hook(info);
    }));
    let mut cfg = config();
    cfg.idle = Duration::from_secs(1);
    let agent = TestAgent::with(cfg);
    let (secs, seed) = (env_u64("VNIO_FUZZ_SECS", 4), env_u64("VNIO_FUZZ_SEED", 1));
    let until = Instant::now() + Duration::from_secs(secs);
    let addr = agent.addr;
    let fuzzers: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 1000 + i);
                let mut rounds = 0u64;
                while Instant::now() < until {
                    round(&mut rng, addr);
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let mut good = 0;
    while Instant::now() < until {
        good_rr(addr, Transport::Udp);
        good_rr(addr, Transport::Tcp);
        good += 1;
    }
    let rounds: u64 = fuzzers.into_iter().map(|h| h.join().unwrap()).sum();
    // And after.
    good_rr(addr, Transport::Udp);
    good_rr(addr, Transport::Tcp);
    let ready = READY.load(Ordering::Relaxed);
    eprintln!("fuzz: {rounds} rounds, {ready} tests set up, {good} good runs during");
    assert!(
        good > 0 && rounds > 10 && ready > 0,
        "{good} good runs, {rounds} fuzz rounds, {ready} tests set up"
    );
    assert_eq!(PANICS.load(Ordering::Relaxed), 0, "a thread panicked");
    agent.stop();
}
