//! The fast case (`datapath/fast.rs`) against the full path it shortcuts:
//! plain frames between guests take it and arrive exactly as the full path
//! delivers them (a flood only one port receives counts as a unicast to
//! it); frames that need a policy (LRO, a flood, a first frame
//! whose decision is not remembered yet) do not take it, and still arrive.
//! Driven in-process with poll-mode endpoints on real vhost-user sockets.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::datapath::Datapath;
use vnio_switch::endpoint::Endpoint;

/// An Ethernet frame from endpoint `from` to `to` carrying `proto` over
/// IPv4 (not a valid packet beyond the protocol byte: the switch reads no
/// further), `len` bytes, its payload counting from `seq`.
fn frame(to: u8, from: u8, proto: u8, len: usize, seq: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| seq.wrapping_add(i as u8)).collect();
    f[..6].copy_from_slice(&mac(to).0);
    f[6..12].copy_from_slice(&mac(from).0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[14 + 9] = proto;
    f
}

fn fast_frames(dp: &Datapath) -> u64 {
    dp.perf().snapshot().fast_frames
}

/// Polls until `ep` received `n` frames; returns them.
fn receive(dp: &mut Datapath, ep: &mut Endpoint, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} frames", got.len());
        dp.poll(Instant::now(), 64);
        while let Some(len) = ep.poll_recv(&mut buf) {
            got.push(buf[..len].to_vec());
        }
    }
    got
}

#[test]
fn plain_frames_take_the_fast_case_and_arrive_as_sent() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("fast-plain");
        let (mut dp, mut eps) = driven(&dir, 3);
        // p2 is learned; p1's first frame to it decides on the full path.
        // (Flooded: p1 is not learned yet.)
        eps[1].send_frame(&frame(1, 2, 17, 60, 0)).unwrap();
        receive(&mut dp, &mut eps[0], 1);
        receive(&mut dp, &mut eps[2], 1);
        let before = fast_frames(&dp);
        let sent: Vec<Vec<u8>> = (0..64u8)
            .map(|k| frame(2, 1, 17, 60 + usize::from(k) * 23, k))
            .collect();
        let burst: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        assert_eq!(eps[0].send_burst(&burst[..32]), 32);
        assert_eq!(eps[0].send_burst(&burst[32..]), 32);
        let got = receive(&mut dp, &mut eps[1], 64);
        assert_eq!(got, sent, "byte for byte, in order");
        let fast = fast_frames(&dp) - before;
        // The first of each polling round may decide again; the rest are fast.
        assert!(fast >= 62, "{fast} of 64 on the fast case");
        assert!(eps[2].poll_recv(&mut [0u8; 2048]).is_none(), "not flooded");
        let s = port_stats(&dp, "p1");
        assert_eq!(s.0, 64, "p1's transmit counter: {s:?}");
    });
}

#[test]
fn frames_that_need_a_policy_take_the_full_path() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("fast-policy");
        let (mut dp, mut eps) = driven(&dir, 3);
        // (Flooded: p1 is not learned yet.)
        eps[1].send_frame(&frame(1, 2, 17, 60, 0)).unwrap();
        receive(&mut dp, &mut eps[0], 1);
        receive(&mut dp, &mut eps[2], 1);
        // Warm the decision for p1 -> p2, then TCP segments toward p2,
        // whose LRO is on (the default): never the fast case.
        eps[0].send_frame(&frame(2, 1, 17, 60, 1)).unwrap();
        receive(&mut dp, &mut eps[1], 1);
        let before = fast_frames(&dp);
        let tcp: Vec<Vec<u8>> = (0..8u8).map(|k| frame(2, 1, 6, 200, k)).collect();
        let burst: Vec<&[u8]> = tcp.iter().map(Vec::as_slice).collect();
        assert_eq!(eps[0].send_burst(&burst), 8);
        let got = receive(&mut dp, &mut eps[1], 8);
        assert_eq!(got, tcp, "not TCP the switch can merge: delivered as sent");
        assert_eq!(fast_frames(&dp), before, "TCP toward an LRO port");
        // A broadcast floods on the full path, to both other ports.
        let mut bcast = frame(2, 1, 17, 60, 9);
        bcast[..6].copy_from_slice(&[0xff; 6]);
        eps[0].send_frame(&bcast).unwrap();
        assert_eq!(receive(&mut dp, &mut eps[1], 1), vec![bcast.clone()]);
        assert_eq!(receive(&mut dp, &mut eps[2], 1), vec![bcast]);
        assert_eq!(fast_frames(&dp), before, "a flood");
    });
}

#[test]
fn a_flood_that_reaches_one_port_is_a_unicast_to_it() {
    bounded(Duration::from_secs(60), || {
        // Two ports, one-way traffic: p2's address is never learned, so
        // every frame floods, to p2 alone (as in the packet-rate harness).
        let dir = Dir::new("fast-sole");
        let (mut dp, mut eps) = driven(&dir, 2);
        let sent: Vec<Vec<u8>> = (0..32u8).map(|k| frame(9, 1, 17, 64, k)).collect();
        let burst: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        assert_eq!(eps[0].send_burst(&burst), 32);
        assert_eq!(receive(&mut dp, &mut eps[1], 32), sent);
        assert!(fast_frames(&dp) >= 31, "{} of 32", fast_frames(&dp));
    });
}

#[test]
fn a_source_echoed_back_from_another_port_stays_put_and_on_the_fast_case() {
    bounded(Duration::from_secs(60), || {
        // The anchor harness's round trip: p2 sends each frame back as it
        // came, with p1's address as its source (and the destination is
        // never learned: a flood to the one other port). p1 keeps sending
        // from its address, so the FDB's rule for moves keeps it on p1: the
        // echo is forwarded, counted (`mac_kept`), and nothing changes in
        // the FDB, so both directions' decisions hold on the fast case.
        let dir = Dir::new("fast-moves");
        let (mut dp, mut eps) = driven(&dir, 2);
        let where_is = |dp: &Datapath| {
            let now = Instant::now();
            let e = dp.fdb().entries(now).into_iter().find(|e| e.mac == mac(1));
            e.map(|e| e.port.0)
        };
        let before = fast_frames(&dp);
        let generation = dp.fdb().generation();
        for k in 0..20u8 {
            let f = frame(9, 1, 17, 64, k);
            eps[0].send_frame(&f).unwrap();
            assert_eq!(
                receive(&mut dp, &mut eps[1], 1),
                vec![f.clone()],
                "frame {k} to p2"
            );
            eps[1].send_frame(&f).unwrap();
            assert_eq!(
                receive(&mut dp, &mut eps[0], 1),
                vec![f],
                "frame {k} back to p1"
            );
            assert_eq!(where_is(&dp), Some(1), "frame {k}: still on p1");
        }
        let fast = fast_frames(&dp) - before;
        assert!(fast >= 36, "{fast} of 40 on the fast case");
        assert!(dp.fdb().generation() <= generation + 1, "learned once");
        assert_eq!(dp.fdb().port_len(vnio_switch::PortId(1)), 1);
        assert_eq!(dp.fdb().port_len(vnio_switch::PortId(2)), 0);
        assert_eq!((port_stats(&dp, "p1").0, port_stats(&dp, "p2").0), (20, 20));
        let (_, p2) = dp.table().slots().find(|(_, s)| s.name == "p2").unwrap();
        assert_eq!(p2.stats.snapshot().tx.mac_kept, 20, "every echo counted");
    });
}

/// (transmitted, received) frames of port `name`.
fn port_stats(dp: &Datapath, name: &str) -> (u64, u64) {
    let (_, s) = dp.table().slots().find(|(_, s)| s.name == name).unwrap();
    let snap = s.stats.snapshot();
    (snap.tx.packets, snap.rx.packets)
}

#[test]
fn a_receive_ring_that_fills_in_a_run_drops_the_rest_and_counts_them() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("fast-full");
        let (mut dp, mut eps) = driven_with(&dir, 2, |c| c.queue_size = 64);
        // Both addresses learned: p1's frames to p2 are unicasts.
        eps[0].send_frame(&frame(2, 1, 17, 60, 0)).unwrap();
        receive(&mut dp, &mut eps[1], 1);
        eps[1].send_frame(&frame(1, 2, 17, 60, 0)).unwrap();
        receive(&mut dp, &mut eps[0], 1);
        let before = fast_frames(&dp);
        let (_, rx_before) = port_stats(&dp, "p2");
        // p2 takes nothing while p1 sends more than its receive ring holds,
        // a burst at a time: the runs find the ring full part way.
        let sent: Vec<Vec<u8>> = (0..128u8).map(|k| frame(2, 1, 17, 64, k)).collect();
        for chunk in sent.chunks(32) {
            let burst: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            assert_eq!(eps[0].send_burst(&burst), 32);
            for _ in 0..4 {
                dp.poll(Instant::now(), 64);
            }
        }
        let (tx, rx) = port_stats(&dp, "p1");
        let delivered = port_stats(&dp, "p2").1 - rx_before;
        let full = ring_full(&dp, "p2");
        assert!(
            delivered > 0 && full > 0,
            "{delivered} delivered, {full} dropped"
        );
        assert_eq!(delivered + full, 128, "every frame delivered or counted");
        assert_eq!(tx, 129, "p1's transmit counter ({rx} received)");
        // (The first decides again: p2 was learned after p1's last decision.)
        let fast = fast_frames(&dp) - before;
        assert!(fast >= 127, "{fast} of 128 on the fast case");
        // The first ones arrived, in order, and the ring works again.
        let got = receive(&mut dp, &mut eps[1], delivered as usize);
        assert_eq!(got, sent[..delivered as usize].to_vec());
        let more: Vec<Vec<u8>> = (0..8u8).map(|k| frame(2, 1, 17, 64, 200 + k)).collect();
        let burst: Vec<&[u8]> = more.iter().map(Vec::as_slice).collect();
        assert_eq!(eps[0].send_burst(&burst), 8);
        assert_eq!(receive(&mut dp, &mut eps[1], 8), more);
        assert_eq!(ring_full(&dp, "p2"), full);
    });
}

/// Frames dropped at port `name` for want of a receive chain.
fn ring_full(dp: &Datapath, name: &str) -> u64 {
    let (_, s) = dp.table().slots().find(|(_, s)| s.name == name).unwrap();
    s.stats.rx.drops(vnio_switch::stats::DropReason::RingFull)
}
