//! `Request::Perf`: each worker's own account of where its time went,
//! checked against traffic this test sent and received through a running
//! switch (frames counted, bursts seen, busy time per frame, Prometheus).

mod common;

use common::*;
use std::time::Duration;
use vnio_switch::control::{Client, Request};
use vnio_switch::datapath::ReadAheadMode;
use vnio_switch::perf::PerfSnapshot;

fn perf(c: &mut Client) -> Vec<PerfSnapshot> {
    serde_json::from_value(c.request(&Request::Perf).unwrap()).unwrap()
}

#[test]
fn a_worker_accounts_for_the_frames_it_moved_and_its_bursts() {
    for mode in [ReadAheadMode::On, ReadAheadMode::Off] {
        accounts_under(mode);
    }
}

fn accounts_under(mode: ReadAheadMode) {
    bounded(Duration::from_secs(60), move || {
        let dir = Dir::new("perf");
        let sw = switch_tuned(&dir, 2, |s| s.read_ahead = mode);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut c = Client::connect(&dir.sock("control")).unwrap();
        let mut to_b = [0x11u8; 64];
        to_b[..6].copy_from_slice(&mac(2).0);
        to_b[6..12].copy_from_slice(&mac(1).0);
        let mut to_a = to_b;
        to_a[..6].copy_from_slice(&mac(1).0);
        to_a[6..12].copy_from_slice(&mac(2).0);
        // b is learned, so a's frames go to b alone.
        b.send_frame(&to_a).unwrap();
        let mut buf = [0u8; 2048];
        wait_for("a hears b", || a.poll_recv(&mut buf).is_some());
        let before = perf(&mut c);
        assert_eq!(before.len(), 1, "one shared worker: {before:?}");
        let burst: Vec<&[u8]> = vec![&to_b; 32];
        let (mut sent, mut got) = (0usize, 0usize);
        for _ in 0..200 {
            sent += a.send_burst(&burst);
            for _ in 0..1000 {
                while b.poll_recv(&mut buf).is_some() {
                    got += 1;
                }
                if got == sent {
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        assert_eq!(got, sent, "every frame arrived");
        // The worker counts a round's frames when the round ends, just
        // after the receive queue showed them: the count may trail the
        // last burst by a moment.
        let mut d = perf(&mut c)[0].since(&before[0]);
        wait_for("the worker to count its last round", || {
            d = perf(&mut c)[0].since(&before[0]);
            d.frames >= sent as u64
        });
        assert_eq!(d.frames, sent as u64, "{d:?}");
        // Plain frames guest to guest: most take the fast case (the first
        // of a polling round may decide again on the full path).
        assert!(
            d.fast_frames * 2 > d.frames && d.fast_frames <= d.frames,
            "{d:?}"
        );
        let chains: u64 = d.bursts.iter().enumerate().map(|(n, k)| n as u64 * k).sum();
        assert_eq!(chains, sent as u64, "every chain in some burst: {d:?}");
        assert_eq!(d.depth.iter().sum::<u64>(), d.bursts.iter().sum::<u64>());
        let f = d.figures();
        assert!(d.busy_rounds > 0 && d.busy_cycles > 0, "{d:?}");
        // Every busy round read ahead, or none, as the setting says.
        let ahead = if mode == ReadAheadMode::On {
            d.busy_rounds
        } else {
            0
        };
        assert_eq!(d.read_ahead_rounds, ahead, "{mode:?}: {d:?}");
        let ns = f.ns_per_frame.unwrap();
        // Busy time per frame is positive and below the whole interval per frame.
        assert!(
            ns > 0.0 && ns < d.nanos as f64 / sent as f64,
            "{ns} ns, {d:?}"
        );
        assert!(f.busy_share + f.idle_poll_share + f.other_share > 0.999);
        let text = c.request(&Request::Metrics).unwrap();
        let text = text.as_str().unwrap();
        assert!(
            text.contains("# TYPE vnio_switch_worker_busy_cycles_total counter"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE vnio_switch_worker_read_ahead_rounds_total counter"),
            "{text}"
        );
        assert!(
            text.contains("vnio_switch_worker_tx_burst_chains_bucket{worker=\"0\",le=\"+Inf\"}")
        );
        drop(sw);
    });
}
