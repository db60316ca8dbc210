//! Interrupt coalescing toward a port, seen from a poll-mode endpoint that
//! behaves like a NAPI guest (drain, arm its call with EVENT_IDX, sleep):
//! when its call eventfd fires under each policy, that a live `port_set`
//! takes effect, and that a driver which does not ask for calls gets none.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::PolicyUpdate;
use vnio_switch::control::{Client, Request};
use vnio_switch::endpoint::Endpoint;

fn frame_to(dst: u8, src: u8) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&mac(dst).0);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

fn set(sw: &vnio_switch::daemon::Switch, port: &str, coalesce: &str) {
    sw.handle()
        .set_port(
            port,
            PolicyUpdate {
                coalesce: Some(coalesce.parse().unwrap()),
                ..Default::default()
            },
        )
        .unwrap();
}

/// Drains `b`, arms its call, and returns how long until the call (or `limit`).
fn time_to_call(b: &mut Endpoint, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    call_at(b, limit).map(|t| t - t0)
}

/// When the next call comes (within `limit`), after draining what is there.
fn call_at(b: &mut Endpoint, limit: Duration) -> Option<Instant> {
    let mut buf = [0u8; 2048];
    while b.poll_recv(&mut buf).is_some() {}
    // A call left over from earlier frames (taken by polling) is consumed first.
    let _ = b.wait(Duration::ZERO);
    while b.poll_recv(&mut buf).is_some() {}
    match b.wait(limit) {
        Ok(true) => Some(Instant::now()),
        _ => None,
    }
}

fn stats(sw: &vnio_switch::daemon::Switch, port: &str) -> vnio_switch::stats::QueueSnapshot {
    sw.handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == port)
        .unwrap()
        .stats
        .rx
}

/// Two endpoints, each known to the switch; b has drained everything.
fn pair(dir: &Dir) -> (vnio_switch::daemon::Switch, Endpoint, Endpoint) {
    let sw = switch(dir, 2);
    let mut a = endpoint(dir, 1, 1);
    let mut b = endpoint(dir, 2, 2);
    b.send_frame(&frame_to(1, 2)).unwrap();
    a.send_frame(&frame_to(2, 1)).unwrap();
    let mut buf = [0u8; 2048];
    let end = Instant::now() + T;
    while b.poll_recv(&mut buf).is_none() && Instant::now() < end {}
    while a.poll_recv(&mut buf).is_none() && Instant::now() < end {}
    (sw, a, b)
}

#[test]
fn static_policy_calls_after_n_frames_or_t() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("coalesce-static");
        let (sw, mut a, mut b) = pair(&dir);
        set(&sw, "p2", "static:4:1000000");
        // One frame: the call waits (here for up to 1 s). Instants, not the
        // waiting thread's own clock: on a loaded host it may start late.
        let t = std::thread::spawn(move || {
            let r = call_at(&mut b, Duration::from_secs(5));
            (r, b)
        });
        std::thread::sleep(Duration::from_millis(20));
        let first_at = Instant::now();
        a.send_frame(&frame_to(2, 1)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let before = stats(&sw, "p2").notifications_sent;
        // Three more make four: the call goes at once, long before the bound.
        let sent_at = Instant::now();
        for _ in 0..3 {
            a.send_frame(&frame_to(2, 1)).unwrap();
        }
        let (r, mut b) = t.join().unwrap();
        let called = r.expect("a call came");
        assert!(
            called - first_at >= Duration::from_millis(95),
            "held: {:?}",
            called - first_at
        );
        assert!(
            called - sent_at < Duration::from_millis(500),
            "the fourth frame released it ({:?} after it, the bound is 900 ms after it)",
            called - sent_at
        );
        let q = stats(&sw, "p2");
        assert_eq!(q.notifications_sent, before + 1);
        assert!(q.notifications_coalesced >= 1, "{q:?}");

        // A lone frame with a 30 ms bound: the call comes when the time is up,
        // even though the worker sleeps meanwhile (its timer wakes it).
        set(&sw, "p2", "static:1000:30000");
        let t = std::thread::spawn(move || time_to_call(&mut b, Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        let sent_at = Instant::now();
        a.send_frame(&frame_to(2, 1)).unwrap();
        let _ = t.join().unwrap().expect("a call came");
        let held = sent_at.elapsed();
        assert!(
            held >= Duration::from_millis(29) && held < Duration::from_millis(500),
            "{held:?}"
        );
    });
}

#[test]
fn adaptive_does_not_delay_a_slow_exchange_and_off_is_live() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("coalesce-adaptive");
        let (sw, mut a, mut b) = pair(&dir);
        // The default policy, at a few hundred frames per second.
        let before = stats(&sw, "p2");
        let t = std::thread::spawn(move || {
            // Like a NAPI guest: take what is there, arm the call, sleep.
            let mut buf = [0u8; 2048];
            let mut got = 0;
            let end = Instant::now() + T;
            while got < 20 && Instant::now() < end {
                while b.poll_recv(&mut buf).is_some() {
                    got += 1;
                }
                let _ = b.wait(Duration::from_millis(100));
            }
            (got, b)
        });
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(3));
            a.send_frame(&frame_to(2, 1)).unwrap();
        }
        let (got, mut b) = t.join().unwrap();
        assert_eq!(got, 20);
        let q = stats(&sw, "p2");
        assert_eq!(
            q.notifications_coalesced, before.notifications_coalesced,
            "{q:?}"
        );
        // (Two frames may share a call if the worker is descheduled between them.)
        assert!(
            q.notifications_sent >= before.notifications_sent + 10,
            "{q:?}"
        );

        // Through the control socket: static with a long bound, then off.
        let mut c = Client::connect(&dir.sock("control")).unwrap();
        let v = c
            .request(&Request::PortSet {
                name: "p2".into(),
                set: PolicyUpdate {
                    coalesce: Some("static:100:1000000".parse().unwrap()),
                    ..Default::default()
                },
            })
            .unwrap();
        assert_eq!(v["policy"]["coalesce"], "static:100:1000000");
        let v = c
            .request(&Request::PortSet {
                name: "p2".into(),
                set: PolicyUpdate {
                    coalesce: Some("off".parse().unwrap()),
                    ..Default::default()
                },
            })
            .unwrap();
        assert_eq!(v["policy"]["coalesce"], "off");
        let t = std::thread::spawn(move || time_to_call(&mut b, Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(20));
        let sent_at = Instant::now();
        a.send_frame(&frame_to(2, 1)).unwrap();
        t.join().unwrap().expect("call");
        assert!(sent_at.elapsed() < Duration::from_millis(500));
        let err = c
            .request(&Request::PortSet {
                name: "nope".into(),
                set: PolicyUpdate::default(),
            })
            .unwrap_err();
        assert!(err.to_string().contains("no port nope"), "{err}");
        let text = c.request(&Request::Metrics).unwrap();
        assert!(
            text.as_str().unwrap().contains(
                "vnio_switch_port_policy_info{port=\"p2\",coalesce=\"off\",lro=\"on\",latency=\"normal\",core=\"\"} 1"
            ),
            "{text}"
        );
    });
}

#[test]
fn a_driver_that_polls_gets_no_calls() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("coalesce-poll");
        let (sw, mut a, mut b) = pair(&dir);
        set(&sw, "p2", "off");
        let before = stats(&sw, "p2");
        let mut buf = [0u8; 2048];
        // b never arms its call (EVENT_IDX used_event stays behind): it polls.
        let mut got = 0;
        for _ in 0..200 {
            a.send_frame(&frame_to(2, 1)).unwrap();
            let end = Instant::now() + T;
            while b.poll_recv(&mut buf).is_none() && Instant::now() < end {}
            got += 1;
        }
        assert_eq!(got, 200);
        let q = stats(&sw, "p2");
        assert!(
            q.notifications_sent <= before.notifications_sent + 1,
            "at most the one its stale used_event asked for: {q:?}"
        );
        assert!(q.notifications_suppressed > before.notifications_suppressed);
    });
}
