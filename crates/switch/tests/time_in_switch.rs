//! Time in the switch (`crate::dwell`): every frame delivered to a
//! vhost-user port is counted once in its histogram, the percentiles are
//! ordered and bounded by the longest round, and the control socket's
//! counters carry them.

mod common;

use common::*;
use std::time::Duration;
use vnio_switch::control::{Client, Request};

/// `bursts` bursts of 8 unicast frames from p1 to p2, each received
/// before the next is sent; returns the frames sent.
fn stream(sw: &vnio_switch::daemon::Switch, dir: &Dir, bursts: usize) -> u64 {
    let (mut e1, mut e2) = (endpoint(dir, 1, 1), endpoint(dir, 2, 2));
    // p2's address first: the stream is unicast.
    e2.send_frame(&frame([0xff; 6], 2, 0x0800)).unwrap();
    wait_for("mac(2) learned", || {
        sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(2))
    });
    let f = frame(mac(2).0, 1, 0x0800);
    let mut buf = [0u8; 2048];
    let (mut sent, mut got) = (0u64, 0u64);
    for _ in 0..bursts {
        sent += e1.send_burst(&[&f[..]; 8]) as u64;
        while got < sent {
            if e2.poll_recv(&mut buf).is_some() {
                got += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
    sent
}

#[test]
fn every_delivered_frame_is_timed_once() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dwell");
        let sw = switch(&dir, 2);
        let sent = stream(&sw, &dir, 200);
        let p2 = port(sw.handle(), "p2");
        let t = p2
            .stats
            .time_in_switch
            .clone()
            .expect("p2 was delivered to");
        assert_eq!(t.frames, p2.stats.rx.packets, "{t:?}");
        assert!(t.frames >= sent, "{t:?} for {sent} sent");
        assert!(
            t.p50_ns > 0 && t.p50_ns <= t.p99_ns && t.p99_ns <= t.p999_ns,
            "{t:?}"
        );
        // A bucket's middle may sit a little above the longest value in it.
        assert!(t.p999_ns <= t.max_ns + t.max_ns / 32 + 1, "{t:?}");
        assert!(t.max_ns < 10_000_000_000, "{t:?}");
        assert_eq!(t.le.len(), vnio_switch::dwell::LE_NS.len());
        assert!(t.le.windows(2).all(|w| w[0] <= w[1]) && *t.le.last().unwrap() <= t.frames);
        // p1 was only sent from (and the flood from p2): at most that frame.
        let p1 = port(sw.handle(), "p1");
        assert_eq!(
            p1.stats.time_in_switch.map_or(0, |t| t.frames),
            p1.stats.rx.packets
        );
        // The same figures over the control socket, in `port stats --json`.
        let mut c = Client::connect(sw.control_path()).unwrap();
        let v = c
            .request(&Request::Stats {
                name: Some("p2".into()),
            })
            .unwrap();
        let text = v.to_string();
        assert!(
            text.contains("time_in_switch") && text.contains("p999_ns"),
            "{text}"
        );
        // And as a Prometheus histogram: cumulative buckets, +Inf = count.
        let metrics = c.request(&Request::Metrics).unwrap();
        let metrics = metrics
            .as_str()
            .map_or_else(|| metrics.to_string(), str::to_owned);
        let value = |what: &str| {
            metrics
                .lines()
                .find(|l| l.starts_with(what))
                .unwrap_or_else(|| panic!("no {what} in {metrics}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .parse::<f64>()
                .unwrap()
        };
        let now = port(sw.handle(), "p2").stats.time_in_switch.unwrap();
        let count = value("vnio_switch_time_in_switch_seconds_count{port=\"p2\"}");
        assert!(
            count >= t.frames as f64 && count <= now.frames as f64,
            "{count}"
        );
        let inf = value("vnio_switch_time_in_switch_seconds_bucket{port=\"p2\",le=\"+Inf\"}");
        assert_eq!(inf, count);
        assert!(metrics.contains("# TYPE vnio_switch_time_in_switch_seconds histogram"));
    });
}

#[test]
fn off_records_nothing_and_forwards_alike() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("dwell-off");
        let sw = switch_tuned(&dir, 2, |s| s.time_in_switch = false);
        let sent = stream(&sw, &dir, 50);
        let p2 = port(sw.handle(), "p2");
        assert!(p2.stats.rx.packets >= sent, "{:?}", p2.stats.rx);
        assert!(
            p2.stats.time_in_switch.is_none(),
            "{:?}",
            p2.stats.time_in_switch
        );
    });
}
