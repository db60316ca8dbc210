//! Asynchronous transmit and the transmit busy-poll budget: a guest kicks
//! only when the worker stopped polling its queue; with a budget the worker
//! keeps polling and the guest sends without kicks; with none every frame
//! after a pause costs a kick. Either way, sending never waits for the switch.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::PolicyUpdate;

fn frame_to(dst: u8, src: u8) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&mac(dst).0);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

#[test]
fn kicks_follow_the_transmit_poll_budget() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("txpoll");
        let sw = switch(&dir, 2);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut buf = [0u8; 2048];
        let mut exchange = |a: &mut vnio_switch::endpoint::Endpoint, n: usize| {
            let k0 = a.stats().kicks;
            for _ in 0..n {
                std::thread::sleep(Duration::from_millis(2));
                let t = Instant::now();
                a.send_frame(&frame_to(2, 1)).unwrap();
                assert!(
                    t.elapsed() < Duration::from_millis(50),
                    "sending never waits"
                );
                let end = Instant::now() + T;
                while b.poll_recv(&mut buf).is_none() {
                    assert!(Instant::now() < end, "frame delivered");
                }
            }
            a.stats().kicks - k0
        };
        let set = |budget: u32| {
            sw.handle()
                .set_port(
                    "p1",
                    PolicyUpdate {
                        tx_poll_budget: Some(budget),
                        ..Default::default()
                    },
                )
                .unwrap()
        };
        // No budget: the queue asks for kicks as soon as it is found empty,
        // so each frame after a pause is kicked.
        let info = set(0);
        assert_eq!(info.policy.tx_poll_budget, 0);
        let kicked = exchange(&mut a, 20);
        assert!(kicked >= 15, "{kicked} kicks for 20 frames");
        // A budget longer than the run: the worker keeps polling, no kicks.
        set(u32::MAX);
        exchange(&mut a, 2);
        let kicked = exchange(&mut a, 20);
        assert_eq!(kicked, 0, "polled, not kicked");
        let p1 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p1")
            .unwrap();
        assert!(
            p1.stats.tx.notifications_received >= 15,
            "{:?}",
            p1.stats.tx
        );
    });
}
