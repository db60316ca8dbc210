//! stream and ping against the real kernel on loopback.

mod common;

use std::time::Duration;

use common::*;
use vnio_measure::proto::Transport;
use vnio_measure::stream::{job, Direction, StreamParams};

fn sp(transport: Transport, direction: Direction, rate: Option<u64>) -> StreamParams {
    StreamParams {
        transport,
        direction,
        size: if transport == Transport::Tcp {
            65536
        } else {
            512
        },
        rate_per_session: rate,
        burst: 4,
        busy_poll_us: None,
    }
}

#[test]
fn tcp_stream_both_directions() {
    let agent = TestAgent::default();
    for dir in [Direction::Send, Direction::Receive] {
        let c = common(&[agent.addr], 2, 500);
        let doc = vnio_measure::run::run(
            &c,
            &job(&c, sp(Transport::Tcp, dir, None)),
            no_stop(),
            &quiet,
        )
        .unwrap();
        assert!(doc.errors.is_empty(), "{dir:?}: {:?}", doc.errors);
        let m = &doc.chosen().unwrap().merged;
        assert!(m.gbps > 0.05, "{dir:?}: {} Gbit/s", m.gbps);
        assert!(m.ops > 0, "{dir:?}: packets counted");
        assert!(m.latency.is_none());
    }
}

#[test]
fn paced_udp_keeps_its_rate_both_directions() {
    let agent = TestAgent::default();
    for dir in [Direction::Send, Direction::Receive] {
        let c = common(&[agent.addr], 1, 1000);
        let doc = vnio_measure::run::run(
            &c,
            &job(&c, sp(Transport::Udp, dir, Some(20_000))),
            no_stop(),
            &quiet,
        )
        .unwrap();
        assert!(doc.errors.is_empty(), "{dir:?}: {:?}", doc.errors);
        let m = &doc.chosen().unwrap().merged;
        assert_eq!(m.requested_rate, Some(20_000.0));
        let got = m.achieved_rate.unwrap();
        // 20 Kpps in bursts of 4: not a multiple of any timer tick. The
        // pacer must never run ahead of its rate; behind it only when the
        // host does not run it (a loaded CI machine), so the floor is loose:
        // the pacing's accuracy is a benchmark's business, not a test's.
        assert!(
            got < 21_000.0 && got > 10_000.0,
            "{dir:?}: achieved {got} pps for 20000"
        );
        assert!(m.sent > 0);
        assert!(
            m.loss_pct < 5.0,
            "{dir:?}: loss {}% on loopback at 20 Kpps",
            m.loss_pct
        );
    }
}

#[test]
fn ping_loopback_or_clear_permission_error() {
    let p = vnio_measure::ping::PingParams {
        targets: vec!["127.0.0.1".into()],
        interval: Duration::from_millis(1),
        sessions: 2,
        size: 56,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(50),
        iterations: 1,
        cpus: vec![],
        rx_timestamp: false,
        ci_goal: None,
    };
    match vnio_measure::ping::run(&p, no_stop(), &quiet) {
        Ok(doc) => {
            assert!(doc.errors.is_empty(), "{:?}", doc.errors);
            let m = &doc.chosen().unwrap().merged;
            // 2 sessions at 1 ms for 0.5 s: about 1000 echoes, all answered.
            assert!(m.ops > 700 && m.ops < 1200, "{} echoes", m.ops);
            assert_eq!(m.lost, 0);
            assert!(m.latency.as_ref().unwrap().p50_ns > 0);
            let mut ts = p.clone();
            ts.rx_timestamp = true;
            let doc = vnio_measure::ping::run(&ts, no_stop(), &quiet).unwrap();
            assert!(doc.chosen().unwrap().merged.ops > 300);
        }
        Err(e) => {
            // Only acceptable without root and without unprivileged ICMP.
            assert!(
                !nix::unistd::geteuid().is_root(),
                "root must be able to ping: {e}"
            );
            assert!(e.to_string().contains("ping_group_range"), "{e}");
        }
    }
}
