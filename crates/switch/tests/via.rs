//! The poll-mode endpoint as the instrument's datagram path, used as a
//! library (no binary, no root): the measurement engine's rr times UDP
//! round trips from one endpoint, through the switch, to a second endpoint
//! that the same thread serves as an echo responder (RFC 862), DPDK's
//! two-port ping-pong shape (`vnio rr --via ... --via-echo ...`).

mod common;

use common::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use vnio_measure::path::Via;
use vnio_measure::proto::Transport;
use vnio_measure::rr::{self, RrParams};
use vnio_measure::run::{self, Common};
use vnio_switch::endpoint::via::{parse_via, ECHO_PORT};

#[test]
fn the_instrument_times_round_trips_through_the_switch_and_two_endpoints() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("via");
        let _switch = switch(&dir, 2);
        let spec = |port: &str, ip: &str| {
            parse_via(&format!("vhost-user:{},ip={ip}", dir.sock(port).display())).unwrap()
        };
        let mut client = spec("p1", "10.0.0.5");
        client.responder = Some(Box::new(spec("p2", "10.0.0.9")));
        let common = Common {
            targets: vec![format!("10.0.0.9:{ECHO_PORT}")],
            token: None,
            sessions: 1,
            duration: Duration::from_millis(800),
            warmup: Duration::from_millis(200),
            iterations: 2,
            cpus: Vec::new(),
            agent_cpus: Vec::new(),
            busy_poll_us: None,
            plain_echo: true,
            ci_goal: None,
        };
        let params = RrParams {
            transport: Transport::Udp,
            request: 64,
            response: 64,
            burst: 1,
            nodelay: false,
            dirty: false,
            rate_per_session: None,
            arrival: Default::default(),
            busy_poll_us: None,
            rx_timestamp: false,
            via: Some(Via(Arc::new(client))),
        };
        let job = rr::job(&common, params);
        let stop = Arc::new(AtomicBool::new(false));
        let doc = run::run(&common, &job, stop, &|_| {}).unwrap();
        assert!(doc.errors.is_empty(), "{:?}", doc.errors);
        assert_eq!(doc.iterations.len(), 2);
        for it in &doc.iterations {
            let m = &it.merged;
            assert!(m.ops > 100, "iteration {}: {} round trips", it.index, m.ops);
            assert_eq!(m.lost, 0, "iteration {}", it.index);
            assert!(m.histogram.is_some(), "every round trip in a histogram");
            let l = m.latency.as_ref().unwrap();
            assert!(l.p50_ns > 0 && l.p50_ns <= l.p99_ns, "{l:?}");
        }
        let via = doc.params["rr"]["via"].as_str().unwrap();
        assert!(
            via.contains("p1.sock") && via.contains("echo responder"),
            "{via}"
        );
    });
}

#[test]
fn a_missing_switch_port_is_one_clear_error() {
    let dir = Dir::new("via-missing");
    let v = parse_via(&format!(
        "vhost-user:{},ip=10.0.0.5",
        dir.sock("none").display()
    ))
    .unwrap();
    let Err(err) = v.endpoint(None) else {
        panic!("connected to a missing socket")
    };
    assert!(err.contains("none.sock"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
