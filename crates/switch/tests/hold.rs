//! Holds: how long a worker stays away from polling to do the control
//! plane's work (`vnio_switch::perf`). Ports added and deleted through the
//! control socket of a running switch must show as commands handled in
//! holds, with the holds' buckets, total time, count over 1 ms and longest
//! consistent with each other. Times themselves are the host's (a
//! preempted worker holds longer), so no bound on them is asserted.

mod common;

use common::*;
use std::time::Duration;
use vnio_switch::config::PortSpec;
use vnio_switch::control::{Client, Request};
use vnio_switch::perf::{hold_bucket_span, PerfSnapshot, HOLD_BUCKETS};
use vnio_switch::port::SocketMode;

/// Port adds and deletes, each one command to the worker.
const CYCLES: usize = 50;

fn perf(c: &mut Client) -> PerfSnapshot {
    let mut w: Vec<PerfSnapshot> =
        serde_json::from_value(c.request(&Request::Perf).unwrap()).unwrap();
    assert_eq!(w.len(), 1, "one shared worker: {w:?}");
    w.remove(0)
}

/// A reading the worker was not writing its holds into: two in a row that
/// agree (the worker sleeps between its ticks, so they soon do).
fn settled(c: &mut Client) -> PerfSnapshot {
    let mut last = perf(c);
    let mut got = None;
    wait_for("two readings of the holds that agree", || {
        let now = perf(c);
        let same = now.holds == last.holds
            && now.hold_nanos == last.hold_nanos
            && now.holds_over_1ms == last.holds_over_1ms
            && now.longest_hold_ns == last.longest_hold_ns
            && now.commands == last.commands
            && now.command_holds == last.command_holds
            && now.command_cpu_nanos == last.command_cpu_nanos;
        last = now;
        if same {
            got = Some(last.clone());
        }
        same
    });
    got.unwrap()
}

/// Each hold lies in its bucket, so the total time in holds lies between
/// the buckets' floors and tops (none for the last, open bucket).
fn check_buckets_against_total(d: &PerfSnapshot) {
    let (mut floor, mut top) = (0u64, Some(0u64));
    for (k, &n) in d.holds.iter().enumerate() {
        let (from_us, to_us) = hold_bucket_span(k);
        floor += from_us * 1_000 * n;
        if n > 0 {
            top = top.zip(to_us).map(|(t, to)| t + to * 1_000 * n);
        }
    }
    assert!(floor <= d.hold_nanos, "{floor} ns at least: {d:?}");
    if let Some(top) = top {
        assert!(d.hold_nanos < top, "under {top} ns: {d:?}");
    }
    // Buckets from 1.024 ms up hold only holds of 1 ms or more; those of
    // 1 ms or more are in the buckets from 512 µs up.
    let from_512us: u64 = d.holds[10..].iter().sum();
    let from_1024us: u64 = d.holds[11..].iter().sum();
    assert!(
        (from_1024us..=from_512us).contains(&d.holds_over_1ms),
        "{d:?}"
    );
}

#[test]
fn port_adds_and_deletes_are_held_commands() {
    bounded(Duration::from_secs(120), || {
        let dir = Dir::new("hold");
        let sw = switch(&dir, 2);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut c = Client::connect(&dir.sock("control")).unwrap();
        let before = settled(&mut c);
        for i in 0..CYCLES {
            let name = format!("x{i}");
            let port = PortSpec::vhost_user(&name, dir.sock(&name), SocketMode::Server);
            c.request(&Request::PortAdd { port }).unwrap();
            c.request(&Request::PortDel { name }).unwrap();
        }
        let after = settled(&mut c);
        let d = after.since(&before);
        println!(
            "{} holds, {} ns in all, {} of 1 ms or more, longest since start {} ns; {} commands in {} holds, {} ns on a CPU",
            d.hold_count(),
            d.hold_nanos,
            d.holds_over_1ms,
            after.longest_hold_ns,
            d.commands,
            d.command_holds,
            d.command_cpu_nanos
        );
        assert_eq!(d.holds.len(), HOLD_BUCKETS);
        // Every add and every delete is a command the worker handled in a
        // hold; several may share one.
        assert!(d.commands >= 2 * CYCLES as u64, "{d:?}");
        assert!(
            d.command_holds >= 1 && d.command_holds <= d.commands,
            "{d:?}"
        );
        assert!(d.hold_count() >= d.command_holds, "{d:?}");
        // Their work took CPU time; how many ran 1 ms on a CPU is a part of them.
        assert!(d.command_cpu_nanos > 0, "{d:?}");
        assert!(d.command_holds_over_1ms_cpu <= d.command_holds, "{d:?}");
        check_buckets_against_total(&d);
        check_buckets_against_total(&after);
        // The longest since the worker started covers the interval's.
        let top = d.longest_hold_bucket().expect("holds in the interval");
        assert!(
            after.longest_hold_ns >= hold_bucket_span(top).0 * 1_000
                && after.longest_hold_ns >= before.longest_hold_ns
                && after.longest_hold_ns <= after.hold_nanos,
            "{before:?} then {after:?}"
        );
        let f = d.figures();
        let mean = f.mean_hold_ns.expect("a mean hold");
        assert!(mean > 0.0 && mean * d.hold_count() as f64 <= d.hold_nanos as f64 + 1.0);
        assert!((0.0..=1.0).contains(&f.hold_share));
        // Prometheus, read later: counters that only grow, a histogram
        // whose +Inf bucket is its count.
        let text = c.request(&Request::Metrics).unwrap();
        let text = text.as_str().unwrap();
        let value = |series: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {series} in {text}"))
        };
        let inf = value("vnio_switch_worker_hold_seconds_bucket{worker=\"0\",le=\"+Inf\"}");
        assert_eq!(
            inf,
            value("vnio_switch_worker_hold_seconds_count{worker=\"0\"}")
        );
        assert!(inf >= after.hold_count() as f64);
        assert!(value("vnio_switch_worker_commands_total{worker=\"0\"}") >= after.commands as f64);
        assert!(
            value("vnio_switch_worker_longest_hold_seconds{worker=\"0\"}")
                >= after.longest_hold_ns as f64 / 1e9
        );
        assert!(text.contains("# TYPE vnio_switch_worker_holds_over_1ms_total counter"));
        // The worker still forwards between its first two ports.
        let mut to_b = [0x11u8; 64];
        to_b[..6].copy_from_slice(&mac(2).0);
        to_b[6..12].copy_from_slice(&mac(1).0);
        a.send_frame(&to_b).unwrap();
        let mut buf = [0u8; 2048];
        wait_for("b hears a", || b.poll_recv(&mut buf).is_some());
        drop(sw);
    });
}
