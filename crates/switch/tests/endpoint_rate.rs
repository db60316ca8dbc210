//! The poll-mode endpoint's rate loop (`endpoint::rate::rate_step`, what the
//! lab's pair runs) through a real switch datapath on vhost-user sockets:
//! every frame sent is counted once at the receiver, buffers go around both
//! rings many times, frames over several mergeable buffers count once, and
//! what `drain` gives back receives frames byte for byte afterwards.
//! Driven in-process with poll-mode endpoints, as `fast_case.rs` is.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::datapath::Datapath;
use vnio_switch::endpoint::rate::{rate_step, BURST};
use vnio_switch::endpoint::Endpoint;

/// An Ethernet frame from endpoint `from` to `to`, `len` bytes, its payload
/// counting from `seq`.
fn frame(to: u8, from: u8, len: usize, seq: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| seq.wrapping_add(i as u8)).collect();
    f[..6].copy_from_slice(&mac(to).0);
    f[6..12].copy_from_slice(&mac(from).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

/// Two ports whose endpoints know each other (both addresses learned).
fn learned(dir: &Dir) -> (Datapath, Vec<Endpoint>) {
    learned_with(dir, false)
}

/// [`learned`], the endpoints' memory on hugepages when `huge`.
fn learned_with(dir: &Dir, huge: bool) -> (Datapath, Vec<Endpoint>) {
    let (mut dp, mut eps) = driven_with(dir, 2, move |c| c.hugepages = huge);
    for (from, to) in [(0, 1), (1, 0)] {
        let f = frame(to as u8 + 1, from as u8 + 1, 60, 0);
        eps[from].send_frame(&f).unwrap();
        assert_eq!(receive(&mut dp, &mut eps[to], 1), vec![f]);
    }
    (dp, eps)
}

/// Polls until `ep` received `n` frames; returns them.
fn receive(dp: &mut Datapath, ep: &mut Endpoint, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16384];
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

/// Runs the rate loop for `rounds` bursts of `f`, then drains what is
/// still in flight; returns (sent, received).
fn rate(dp: &mut Datapath, eps: &mut [Endpoint], f: &[u8], rounds: usize) -> (u64, u64) {
    let burst: Vec<&[u8]> = vec![f; BURST];
    let (a, b) = eps.split_at_mut(1);
    let (tx, rx) = (&mut a[0], &mut b[0]);
    let (mut sent, mut got) = (0u64, 0u64);
    for _ in 0..rounds {
        let (s, g) = rate_step(tx, rx, &burst);
        assert!(g <= BURST, "{g} drained at once");
        (sent, got) = (sent + s as u64, got + g as u64);
        dp.poll(Instant::now(), 64);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while got < sent {
        assert!(Instant::now() < deadline, "{got} of {sent} frames");
        dp.poll(Instant::now(), 64);
        got += rx.drain(BURST) as u64;
    }
    (sent, got)
}

#[test]
fn the_rate_loop_counts_every_frame_once_and_recycles_buffers() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ep-rate");
        let (mut dp, mut eps) = learned(&dir);
        let rx_before = eps[1].stats().rx_frames;
        // 64 rounds of 32: each 256-entry ring goes around eight times.
        for len in [64, 1518] {
            let (sent, got) = rate(&mut dp, &mut eps, &frame(2, 1, len, 7), 64);
            assert!(sent >= 1024, "{len} B: only {sent} of 2048 taken");
            assert_eq!(got, sent, "{len} B: every frame counted once");
        }
        let s = eps[1].stats();
        let (_, p2) = dp.table().slots().find(|(_, s)| s.name == "p2").unwrap();
        // The port's receive side is what the switch delivered to it (one
        // frame before the loop).
        let delivered = p2.stats.snapshot().rx.packets;
        assert_eq!(s.rx_frames - rx_before, delivered - 1, "the switch's count");
        assert_eq!(eps[1].drain(BURST), 0, "nothing left");
        // The buffers drained went back whole: frames arrive byte for byte.
        let sent: Vec<Vec<u8>> = (0..40u8)
            .map(|k| frame(2, 1, 60 + 37 * usize::from(k), k))
            .collect();
        let burst: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        assert_eq!(eps[0].send_burst(&burst[..20]), 20);
        assert_eq!(eps[0].send_burst(&burst[20..]), 20);
        assert_eq!(
            receive(&mut dp, &mut eps[1], 40),
            sent,
            "in order, unchanged"
        );
    });
}

#[test]
fn endpoints_on_hugepages_carry_the_rate_loop_and_say_when_the_pool_is_short() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skip: root needed to raise the hugepage pool");
        return;
    }
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ep-rate-huge");
        let before = free_pages();
        {
            // Two more pages in the kernel's pool, journaled and given back.
            let pool: u64 = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let journal = vnio_topo::Journal::at(dir.0.join("journal"));
            let _pages =
                vnio_topo::Hugepages::reserve(&dir.0.join("hugetlbfs"), pool + 2, &journal)
                    .expect("two more 2 MiB hugepages");
            let (mut dp, mut eps) = learned_with(&dir, true);
            // One 2 MiB page each, all taken when the endpoints start.
            assert_eq!(free_pages(), before, "the two new pages in use");
            let (sent, got) = rate(&mut dp, &mut eps, &frame(2, 1, 64, 1), 64);
            assert!(sent >= 1024, "only {sent} of 2048 taken");
            assert_eq!(got, sent, "every frame counted once");
        }
        // No page left in the pool (this host's usual state): the endpoint
        // refuses in one line instead of dying of SIGBUS at its first touch.
        let (mut cfg, sock) = (
            vnio_switch::endpoint::EndpointConfig::new(mac(1), ip(1)),
            dir.sock("none"),
        );
        cfg.hugepages = true;
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        if free_pages() == 0 {
            let e = Endpoint::connect(&sock, cfg).err().expect("refused");
            let text = vnio_switch::error_chain(&e);
            assert!(text.contains("hugepages"), "{text}");
        }
    });
}

/// Free 2 MiB hugepages in the kernel's pool.
fn free_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_frame_over_several_buffers_counts_once() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ep-rate-big");
        let (mut dp, mut eps) = learned(&dir);
        // 5,000 B: a chain of three 2 KiB buffers out, three mergeable
        // buffers in.
        let big = frame(2, 1, 5000, 3);
        let (sent, got) = rate(&mut dp, &mut eps, &big, 24);
        assert!(sent >= 64, "only {sent} taken");
        assert_eq!(got, sent, "one count per frame, not per buffer");
        assert_eq!(eps[1].drain(BURST), 0, "no buffer left over as a frame");
        eps[0].send_frame(&big).unwrap();
        assert_eq!(receive(&mut dp, &mut eps[1], 1), vec![big], "whole");
    });
}
