//! rr against a real agent on loopback: TCP and UDP, bursts, sessions,
//! several agents, open loop, iterations.

mod common;

use common::*;
use vnio_measure::proto::Transport;
use vnio_measure::rr::{job, RrParams};
use vnio_measure::run::run;

fn params(transport: Transport, burst: u32) -> RrParams {
    RrParams {
        transport,
        request: 256,
        response: 256,
        burst,
        nodelay: true,
        dirty: false,
        rate_per_session: None,
        arrival: Default::default(),
        busy_poll_us: None,
        rx_timestamp: false,
        via: None,
    }
}

#[test]
fn tcp_rr_times_every_transaction() {
    let agent = TestAgent::default();
    let c = common(&[agent.addr], 2, 500);
    let doc = run(&c, &job(&c, params(Transport::Tcp, 1)), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let it = doc.chosen().unwrap();
    let l = it.merged.latency.clone().unwrap();
    assert!(it.merged.ops > 100, "only {} transactions", it.merged.ops);
    assert_eq!(
        l.count, it.merged.ops,
        "every transaction is in the histogram"
    );
    assert!(l.min_ns > 0 && l.min_ns <= l.p50_ns && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns);
    // The agent answered exactly what we counted (plus warm-up and the last in flight).
    let agent_cost = it.merged.agent_cost.clone().expect("agent report");
    assert!(agent_cost.cpu.total_ns() > 0, "agent CPU is accounted");
    assert!(it.client_cost.ns_per_op > 0.0);
    assert!(!it.intervals.is_empty());
    assert_eq!(
        it.intervals.iter().map(|p| p.ops).sum::<u64>(),
        it.merged.ops
    );
    assert_eq!(doc.schema, "vnio.result/2");
    assert!(!doc.environment.kernel.is_empty());
    agent.stop();
}

#[test]
fn tcp_burst_keeps_requests_in_flight() {
    let agent = TestAgent::default();
    let c = common(&[agent.addr], 1, 400);
    let d1 = run(&c, &job(&c, params(Transport::Tcp, 1)), no_stop(), &quiet).unwrap();
    let d4 = run(&c, &job(&c, params(Transport::Tcp, 4)), no_stop(), &quiet).unwrap();
    assert!(d4.errors.is_empty(), "{:?}", d4.errors);
    // With 4 in flight each transaction waits behind others: the mean round
    // trip grows while transactions keep flowing.
    let (l1, l4) = (d1.chosen().unwrap(), d4.chosen().unwrap());
    assert!(l4.merged.ops > 100);
    assert!(l4.merged.latency.as_ref().unwrap().count == l4.merged.ops);
    assert!(l1.merged.ops > 0);
}

#[test]
fn udp_rr_with_sizes_and_sessions() {
    let agent = TestAgent::default();
    let c = common(&[agent.addr], 3, 400);
    let mut p = params(Transport::Udp, 2);
    p.request = 64;
    p.response = 1024;
    p.dirty = true;
    let doc = run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let it = doc.chosen().unwrap();
    assert!(it.merged.ops > 100);
    assert_eq!(it.merged.bytes, it.merged.ops * (64 + 1024));
    assert_eq!(
        it.placement
            .iter()
            .filter(|p| p.role.starts_with("client"))
            .count(),
        3
    );
    assert_eq!(
        it.placement
            .iter()
            .filter(|p| p.role.starts_with("agent"))
            .count(),
        3
    );
}

#[test]
fn udp_rx_kernel_timestamps() {
    let agent = TestAgent::default();
    let c = common(&[agent.addr], 1, 300);
    let mut p = params(Transport::Udp, 1);
    p.rx_timestamp = true;
    let doc = run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let l = doc.chosen().unwrap().merged.latency.clone().unwrap();
    assert!(l.count > 50);
    // Kernel receive stamps come before recv returns: round trips stay sane.
    assert!(l.p50_ns > 0 && l.p50_ns < 50_000_000);
}

#[test]
fn several_agents_start_together_and_merge() {
    let (a, b) = (TestAgent::default(), TestAgent::default());
    let c = common(&[a.addr, b.addr], 1, 400);
    let doc = run(&c, &job(&c, params(Transport::Tcp, 1)), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let it = doc.chosen().unwrap();
    assert_eq!(it.per_target.len(), 2);
    let sum: u64 = it.per_target.iter().map(|m| m.ops).sum();
    assert_eq!(sum, it.merged.ops);
    let hsum: u64 = it
        .per_target
        .iter()
        .map(|m| m.latency.as_ref().unwrap().count)
        .sum();
    assert_eq!(hsum, it.merged.latency.as_ref().unwrap().count);
}

#[test]
fn open_loop_reports_achieved_rate() {
    let agent = TestAgent::default();
    for transport in [Transport::Tcp, Transport::Udp] {
        let c = common(&[agent.addr], 2, 1000);
        let mut p = params(transport, 1);
        p.rate_per_session = Some(500); // 1000/s in all
        let doc = run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
        assert!(doc.errors.is_empty(), "{transport}: {:?}", doc.errors);
        let m = &doc.chosen().unwrap().merged;
        assert_eq!(m.requested_rate, Some(1000.0));
        let got = m.achieved_rate.unwrap();
        assert!(
            (got - 1000.0).abs() < 100.0,
            "{transport}: achieved {got}/s for 1000/s"
        );
        assert!(m.latency.as_ref().unwrap().count > 800);
    }
}

#[test]
fn open_loop_checks_the_gaps_its_sends_really_had() {
    use vnio_measure::arrivals::Arrival;
    let agent = TestAgent::default();
    // Poisson arrivals keep the asked rate and carry the arrivals check.
    let c = common(&[agent.addr], 1, 1000);
    let mut p = params(Transport::Udp, 1);
    p.rate_per_session = Some(5_000);
    p.arrival = Arrival::Poisson;
    let doc = run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let m = &doc.chosen().unwrap().merged;
    let got = m.achieved_rate.unwrap();
    assert!((got - 5_000.0).abs() < 750.0, "achieved {got}/s for 5000/s");
    let check = doc
        .checks
        .iter()
        .find(|c| c.name == "arrivals")
        .expect("an arrivals check");
    assert!(check.samples.unwrap() >= 1_000, "{check:?}");
    assert!(
        check.statistic.is_finite() && check.statistic >= 0.0,
        "{check:?}"
    );
    assert_eq!(doc.params["rr"]["arrival"], "poisson");
    // A rate no sender keeps: the sends go back to back, and the check
    // says the load was not the one asked for.
    let c = common(&[agent.addr], 1, 1000);
    let mut p = params(Transport::Udp, 1);
    p.rate_per_session = Some(1_000_000);
    let doc = run(&c, &job(&c, p), no_stop(), &quiet).unwrap();
    let check = doc
        .checks
        .iter()
        .find(|c| c.name == "arrivals")
        .expect("an arrivals check");
    assert!(!check.passed && check.statistic > 0.5, "{check:?}");
    assert!(check.warning.contains("fell behind"), "{}", check.warning);
    // A closed loop has no arrivals to check.
    let doc = run(&c, &job(&c, params(Transport::Udp, 1)), no_stop(), &quiet).unwrap();
    assert!(doc.checks.iter().all(|c| c.name != "arrivals"));
    agent.stop();
}

#[test]
fn iterations_choose_the_median() {
    let agent = TestAgent::default();
    let mut c = common(&[agent.addr], 1, 200);
    c.iterations = 3;
    let doc = run(&c, &job(&c, params(Transport::Tcp, 1)), no_stop(), &quiet).unwrap();
    assert_eq!(doc.iterations.len(), 3);
    let means: Vec<f64> = doc
        .iterations
        .iter()
        .map(|i| i.merged.latency.as_ref().unwrap().mean_ns)
        .collect();
    let chosen = means[doc.chosen];
    assert_eq!(
        means.iter().filter(|&&m| m < chosen).count(),
        1,
        "{means:?} chose {chosen}"
    );
    assert!(doc.spread.mean_ns[0] <= chosen && chosen <= doc.spread.mean_ns[1]);
    // Histograms from every iteration merge without loss.
    let all = doc.merged_latency().unwrap();
    assert_eq!(
        all.count(),
        doc.iterations.iter().map(|i| i.merged.ops).sum::<u64>()
    );
}

#[test]
fn udp_rr_against_a_plain_echo_service() {
    // An RFC 862 echo loop: no agent, no control connection.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_millis(50)))
        .unwrap();
    let done = no_stop();
    let stop = done.clone();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut echoed = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
                echoed += 1;
            }
        }
        echoed
    });
    let mut c = common(&[addr], 1, 400);
    c.plain_echo = true;
    let doc = run(&c, &job(&c, params(Transport::Udp, 2)), no_stop(), &quiet).unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let echoed = echo.join().unwrap();
    assert!(doc.errors.is_empty(), "{:?}", doc.errors);
    let m = &doc.chosen().unwrap().merged;
    assert!(m.ops > 100, "only {} transactions", m.ops);
    assert!(echoed >= m.ops, "every timed transaction was echoed");
    assert_eq!(m.latency.as_ref().unwrap().count, m.ops);
    assert!(m.agent_cost.is_none(), "no agent, no agent figures");
}
