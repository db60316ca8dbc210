//! Unit tests of [`super`] (egress/mod.rs): the scheduler over simulated
//! polling rounds, with time passed in.

use super::{EgressPolicy, Scheduler, Wait};
use crate::PortId;
use std::time::{Duration, Instant};

const A: PortId = PortId(1);
const B: PortId = PortId(2);
const ROUND: Duration = Duration::from_micros(20);
const FRAME: usize = 1514;

/// Simulates `secs` of polling rounds in which each port in `ports`
/// offers frames until it must wait or reaches `offer_bps`; returns the
/// rate each got, in bits per second.
fn simulate(s: &mut Scheduler, ports: &[(PortId, Option<u64>)], secs: f64) -> Vec<f64> {
    let t0 = Instant::now();
    let rounds = (secs / ROUND.as_secs_f64()) as u32;
    let mut offered = vec![0f64; ports.len()];
    let mut sent = vec![0u64; ports.len()];
    for r in 0..rounds {
        let now = t0 + ROUND * r;
        s.begin_round(now);
        let el = (now - t0).as_secs_f64() + ROUND.as_secs_f64();
        for (k, &(p, offer)) in ports.iter().enumerate() {
            // The data path reads at most 64 frames per port per round.
            let mut n = 0;
            for _ in 0..64 {
                if let Some(bps) = offer {
                    if offered[k] >= bps as f64 / 8.0 * el {
                        break;
                    }
                }
                if s.admit(p, FRAME).is_err() {
                    break;
                }
                offered[k] += FRAME as f64;
                sent[k] += FRAME as u64;
                n += 1;
            }
            if n == 64 {
                s.backlogged(p);
            }
        }
    }
    sent.iter().map(|&b| b as f64 * 8.0 / secs).collect()
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= want * tol
}

#[test]
fn uncontended_ports_are_not_held() {
    let mut s = Scheduler::new(Some(1_000_000_000));
    let r = simulate(
        &mut s,
        &[(A, Some(200_000_000)), (B, Some(300_000_000))],
        0.5,
    );
    assert!(
        within(r[0], 200e6, 0.02) && within(r[1], 300e6, 0.02),
        "{r:?}"
    );
    assert!(!s.contended());
}

#[test]
fn saturating_ports_split_the_link_by_share() {
    let mut s = Scheduler::new(Some(1_000_000_000));
    s.set_policy(
        A,
        EgressPolicy {
            share: 100,
            ..Default::default()
        },
    );
    s.set_policy(
        B,
        EgressPolicy {
            share: 300,
            ..Default::default()
        },
    );
    let r = simulate(&mut s, &[(A, None), (B, None)], 1.0);
    assert!(within(r[0], 250e6, 0.05), "A {r:?}");
    assert!(within(r[1], 750e6, 0.05), "B {r:?}");
    assert!(within(r[0] + r[1], 1e9, 0.05), "total {r:?}");
    // The first port polled has no edge: the other order gives the same split.
    let mut s2 = Scheduler::new(Some(1_000_000_000));
    s2.set_policy(
        A,
        EgressPolicy {
            share: 100,
            ..Default::default()
        },
    );
    s2.set_policy(
        B,
        EgressPolicy {
            share: 300,
            ..Default::default()
        },
    );
    let r2 = simulate(&mut s2, &[(B, None), (A, None)], 1.0);
    assert!(within(r2[1], 250e6, 0.05), "A second {r2:?}");
}

#[test]
fn shares_hold_with_irregular_rounds() {
    // Rounds as a busy worker makes them: often the same instant (the
    // clock is read every few rounds), sometimes long gaps.
    let mut s = Scheduler::new(Some(100_000_000));
    s.set_policy(
        A,
        EgressPolicy {
            share: 100,
            ..Default::default()
        },
    );
    s.set_policy(
        B,
        EgressPolicy {
            share: 300,
            ..Default::default()
        },
    );
    let t0 = Instant::now();
    let mut now = t0;
    let mut seed: u64 = 0x1234_5678;
    let mut sent = [0u64; 2];
    while now - t0 < Duration::from_secs(2) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        now += match seed % 10 {
            0..=5 => Duration::ZERO,
            6..=8 => Duration::from_micros(seed % 60),
            _ => Duration::from_micros(seed % 3000),
        };
        s.begin_round(now);
        for (k, p) in [A, B].into_iter().enumerate() {
            for _ in 0..64 {
                if s.admit(p, FRAME).is_err() {
                    break;
                }
                sent[k] += FRAME as u64;
            }
        }
    }
    let secs = (now - t0).as_secs_f64();
    let r: Vec<f64> = sent.iter().map(|&b| b as f64 * 8.0 / secs).collect();
    assert!(within(r[0], 25e6, 0.05), "A {r:?}");
    assert!(within(r[1], 75e6, 0.05), "B {r:?}");
}

#[test]
fn shares_are_work_conserving() {
    // B wants less than its half: A gets the rest.
    let mut s = Scheduler::new(Some(1_000_000_000));
    let r = simulate(&mut s, &[(A, None), (B, Some(100_000_000))], 1.0);
    assert!(within(r[1], 100e6, 0.05), "B keeps its rate {r:?}");
    assert!(within(r[0], 900e6, 0.05), "A takes the rest {r:?}");
}

#[test]
fn a_limit_holds_on_an_idle_link() {
    let mut s = Scheduler::new(Some(1_000_000_000));
    s.set_policy(
        A,
        EgressPolicy {
            limit_bps: Some(100_000_000),
            ..Default::default()
        },
    );
    let r = simulate(&mut s, &[(A, None)], 1.0);
    assert!(within(r[0], 100e6, 0.05), "{r:?}");
    // Without a known capacity, limits still apply.
    let mut s = Scheduler::new(None);
    s.set_policy(
        A,
        EgressPolicy {
            limit_bps: Some(50_000_000),
            ..Default::default()
        },
    );
    let r = simulate(&mut s, &[(A, None), (B, None)], 1.0);
    assert!(within(r[0], 50e6, 0.05), "{r:?}");
}

/// Rounds every 20 µs for `secs`, with a pause of `stall` every
/// `every` (a worker the host deschedules); each port in `ports`
/// offers frames until it must wait. Returns each port's rate in bits
/// per second over the whole time.
fn simulate_stalls(
    s: &mut Scheduler,
    ports: &[PortId],
    secs: f64,
    every: Duration,
    stall: Duration,
) -> Vec<f64> {
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut now = t0;
    let mut next_stall = t0 + every;
    let mut sent = vec![0u64; ports.len()];
    let mut last = t0;
    while now < end {
        // The last stall leaves time to catch up before the end.
        if now >= next_stall && now + stall + every < end {
            now += stall;
            next_stall = now + every;
        }
        s.begin_round(now);
        for (k, &p) in ports.iter().enumerate() {
            let mut n = 0;
            while n < 64 && s.admit(p, FRAME).is_ok() {
                sent[k] += FRAME as u64;
                n += 1;
            }
            if n == 64 {
                s.backlogged(p);
            }
        }
        last = now;
        now += ROUND;
    }
    let secs = (last - t0).as_secs_f64();
    sent.iter().map(|&b| b as f64 * 8.0 / secs).collect()
}

#[test]
fn a_limit_holds_across_worker_stalls() {
    // Pauses longer than the bucket's 100 ms: the port's frames waited,
    // so the time is credited and the rate holds.
    for stall in [150, 300, 900] {
        let mut s = Scheduler::new(Some(100_000_000));
        s.set_policy(
            A,
            EgressPolicy {
                limit_bps: Some(20_000_000),
                ..Default::default()
            },
        );
        let r = simulate_stalls(
            &mut s,
            &[A],
            10.0,
            Duration::from_millis(400),
            Duration::from_millis(stall),
        );
        assert!(within(r[0], 20e6, 0.01), "stall {stall} ms: {r:?}");
    }
}

#[test]
fn shares_and_the_link_hold_across_worker_stalls() {
    let mut s = Scheduler::new(Some(100_000_000));
    for (p, share) in [(A, 100), (B, 300)] {
        s.set_policy(
            p,
            EgressPolicy {
                share,
                ..Default::default()
            },
        );
    }
    let r = simulate_stalls(
        &mut s,
        &[A, B],
        10.0,
        Duration::from_millis(300),
        Duration::from_millis(250),
    );
    assert!(within(r[0], 25e6, 0.03), "A {r:?}");
    assert!(within(r[1], 75e6, 0.03), "B {r:?}");
    assert!(within(r[1] / r[0], 3.0, 0.05), "ratio {r:?}");
}

#[test]
fn what_a_stall_brings_is_split_by_share() {
    // Both ports hold frames the worker could not send (a full transmit
    // ring: no verdict asked, no wait counted), then the host
    // deschedules the worker for 300 ms: the 3.75 MB the link could
    // have carried go to them 1:3, not to whoever is polled first.
    let mut s = Scheduler::new(Some(100_000_000));
    for (p, share) in [(A, 100), (B, 300)] {
        s.set_policy(
            p,
            EgressPolicy {
                share,
                ..Default::default()
            },
        );
    }
    let t0 = Instant::now();
    let mut now = t0;
    for _ in 0..1000 {
        s.begin_round(now);
        s.backlogged(A);
        s.backlogged(B);
        now += ROUND;
    }
    now += Duration::from_millis(300);
    let mut sent = [0u64; 2];
    for _ in 0..100 {
        s.begin_round(now);
        for (k, p) in [A, B].into_iter().enumerate() {
            let mut n = 0;
            while n < 64 && s.admit(p, FRAME).is_ok() {
                sent[k] += FRAME as u64;
                n += 1;
            }
            if n == 64 {
                s.backlogged(p);
            }
        }
        now += ROUND;
    }
    let total = (sent[0] + sent[1]) as f64;
    assert!(within(total, 3.75e6, 0.05), "{sent:?}");
    assert!(
        within(sent[1] as f64 / sent[0] as f64, 3.0, 0.05),
        "{sent:?}"
    );
}

#[test]
fn an_idle_port_saves_up_only_its_bucket() {
    let mut s = Scheduler::new(Some(1_000_000_000));
    s.set_policy(
        A,
        EgressPolicy {
            limit_bps: Some(20_000_000),
            ..Default::default()
        },
    );
    let t0 = Instant::now();
    s.begin_round(t0);
    // Idle for a second (no frame offered): then at most the bucket's
    // 100 ms (250 KB at 20 Mbit/s) leaves at once, plus the frame that
    // takes it below zero.
    s.begin_round(t0 + Duration::from_secs(1));
    let mut burst = 0;
    while s.admit(A, FRAME).is_ok() {
        burst += FRAME;
    }
    assert!(burst <= 250_000 + FRAME, "{burst}");
    assert!(burst >= 250_000 - FRAME, "{burst}");
}

#[test]
fn a_reservation_is_a_floor() {
    let mut s = Scheduler::new(Some(1_000_000_000));
    s.set_policy(
        A,
        EgressPolicy {
            share: 10,
            reserve_bps: Some(400_000_000),
            ..Default::default()
        },
    );
    s.set_policy(
        B,
        EgressPolicy {
            share: 1000,
            ..Default::default()
        },
    );
    let r = simulate(&mut s, &[(A, None), (B, None)], 1.0);
    assert!(r[0] >= 400e6 * 0.95, "A gets its reservation {r:?}");
    assert!(within(r[0] + r[1], 1e9, 0.05), "total {r:?}");
}

#[test]
fn jumbo_frames_pass_small_buckets() {
    let mut s = Scheduler::new(Some(10_000_000));
    let t0 = Instant::now();
    s.begin_round(t0);
    // The bucket holds 128 KiB: the third frame finds tokens left and
    // takes the bucket below zero; the fourth waits.
    for _ in 0..3 {
        assert!(s.admit(A, 65_000).is_ok());
    }
    assert_eq!(s.admit(A, 65_000), Err(Wait::Link), "the link is spent");
    s.begin_round(t0 + Duration::from_millis(100));
    assert!(s.admit(A, 65_000).is_ok(), "tokens came back");
}

/// A flood toward a VXLAN port's VTEPs is charged for every copy against
/// the sender's limit: a port limited to 10 Mbit/s flooding 1514-byte
/// frames to 8 VTEPs gets about 10 Mbit/s of datagrams out, not 80; past
/// its limit the flood is refused (it cannot wait), and a port without a
/// limit is never refused.
#[test]
fn floods_are_charged_per_copy_against_the_senders_limit() {
    let mut s = Scheduler::new(None);
    let limited = EgressPolicy {
        limit_bps: Some(10_000_000),
        ..EgressPolicy::default()
    };
    s.set_policy(A, limited);
    s.set_policy(B, EgressPolicy::default());
    let t0 = Instant::now();
    let copies = 8;
    let (mut out_a, mut out_b) = (0u64, 0u64);
    let rounds = (2.0 / ROUND.as_secs_f64()) as u32;
    for r in 0..rounds {
        s.begin_round(t0 + ROUND * r);
        // One flood frame per port per round: 75 Mbit/s of frames, x8 copies.
        if s.charge_flood(A, FRAME * copies) {
            out_a += (FRAME * copies) as u64;
        }
        if s.charge_flood(B, FRAME * copies) {
            out_b += (FRAME * copies) as u64;
        }
    }
    let bps = |bytes: u64| bytes as f64 * 8.0 / 2.0;
    assert!(within(bps(out_a), 10e6, 0.1), "{} bit/s", bps(out_a));
    assert_eq!(out_b, u64::from(rounds) * (FRAME * copies) as u64);
    assert_eq!(s.sent(A), out_a, "what left is counted as sent");
}
