//! A real `vnio switch` SIGKILLed and restarted under traffic: its
//! front-ends (the switch's poll-mode endpoint, acting as QEMU does with
//! `reconnect=` on a server-mode port and with `server=on` on a client-mode
//! one) keep their memory and rings, reconnect, and traffic resumes: every
//! frame at most once and in order, frames queued while the switch was down
//! delivered after the restart, the ring indexes continuing. No root needed.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

/// An ethertype for local experiments (IEEE 802): the frames carry a sequence number.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}

fn frame(from: u8, to: u8, seq: u32) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&mac(to).0);
    f[6..12].copy_from_slice(&mac(from).0);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// One direction's frames: sent so far, and the sequence numbers received.
struct Flow {
    sent: u32,
    got: Vec<u32>,
}

impl Flow {
    fn new() -> Self {
        Self {
            sent: 0,
            got: Vec::new(),
        }
    }
}

/// Sends `n` frames each way in bursts of 16, receiving as it goes; with
/// `wait`, each burst is received before the next (a lossless pace).
fn exchange(a: &mut Endpoint, b: &mut Endpoint, ab: &mut Flow, ba: &mut Flow, n: u32, wait: bool) {
    for _ in 0..n / 16 {
        for _ in 0..16 {
            a.send_frame(&frame(1, 2, ab.sent)).unwrap();
            ab.sent += 1;
            b.send_frame(&frame(2, 1, ba.sent)).unwrap();
            ba.sent += 1;
        }
        let until = Instant::now() + Duration::from_secs(if wait { 5 } else { 0 });
        loop {
            receive(b, ab);
            receive(a, ba);
            let done =
                ab.got.last() == Some(&(ab.sent - 1)) && ba.got.last() == Some(&(ba.sent - 1));
            if done || Instant::now() >= until {
                break;
            }
        }
    }
}

fn receive(ep: &mut Endpoint, flow: &mut Flow) {
    let mut buf = [0u8; 2048];
    while let Some(n) = ep.poll_recv(&mut buf) {
        if n >= 18 && buf[12..14] == ETHERTYPE {
            flow.got
                .push(u32::from_be_bytes(buf[14..18].try_into().unwrap()));
        }
    }
}

/// Every frame at most once and in order; returns the ones lost.
fn check(flow: &Flow, what: &str) -> Vec<u32> {
    for w in flow.got.windows(2) {
        assert!(
            w[0] < w[1],
            "{what}: {} then {}: a duplicate or a reordering",
            w[0],
            w[1]
        );
    }
    (0..flow.sent)
        .filter(|s| flow.got.binary_search(s).is_err())
        .collect()
}

fn config(dir: &Path) -> PathBuf {
    let d = dir.display();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/ctl.sock\"\n\
             [[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"{d}/a.sock\"\nmode = \"server\"\n\
             [[port]]\nname = \"b\"\nkind = \"vhost-user\"\nsocket = \"{d}/b.sock\"\nmode = \"client\"\n"
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn frontends_resume_after_the_switch_is_killed_and_restarted() {
    let t0 = Instant::now();
    let tmp = Tmp(std::env::temp_dir().join(format!("vnio-restart-{}", std::process::id())));
    let dir = tmp.0.clone();
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = config(&dir);
    let (a_sock, b_sock) = (dir.join("a.sock"), dir.join("b.sock"));
    let ep = |n: u8| EndpointConfig::new(mac(n), Ipv4Address([10, 0, 0, n]));
    // b listens (the switch's port b dials it); a dials the switch's port a.
    let bs = b_sock.clone();
    let b = std::thread::spawn(move || Endpoint::listen(&bs, ep(2), Duration::from_secs(10)));
    let mut switch = start_switch(&cfg);
    let mut a = Endpoint::connect(&a_sock, ep(1)).expect("a connects");
    let mut b = b.join().unwrap().expect("the switch connects to b");
    let (mut ab, mut ba) = (Flow::new(), Flow::new());
    exchange(&mut a, &mut b, &mut ab, &mut ba, 2048, true);
    assert_eq!(
        check(&ab, "a to b"),
        Vec::<u32>::new(),
        "before the restart"
    );
    assert_eq!(
        check(&ba, "b to a"),
        Vec::<u32>::new(),
        "before the restart"
    );

    // Under traffic: the last bursts are not waited for, then SIGKILL.
    exchange(&mut a, &mut b, &mut ab, &mut ba, 64, false);
    switch.0.kill().unwrap();
    let status = switch.0.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "the switch was killed");
    let at_kill = (ab.sent, ba.sent);
    // Frames b sends while the switch is down wait in its transmit ring.
    for _ in 0..64 {
        b.send_frame(&frame(2, 1, ba.sent)).unwrap();
        ba.sent += 1;
    }
    let down = Instant::now();

    // a first, then b: b's waiting frames find a connected. (A frame
    // towards a port whose front-end is not back yet is dropped: the
    // restarted switch cannot know where it would go.)
    let _switch = start_switch(&cfg);
    a.reconnect(&a_sock, Duration::from_secs(10))
        .expect("a reconnects to the restarted switch");
    b.relisten(&b_sock, Duration::from_secs(10))
        .expect("the restarted switch connects to b again");
    println!(
        "reconnected {:.0} ms after the kill",
        down.elapsed().as_secs_f64() * 1000.0
    );
    exchange(&mut a, &mut b, &mut ab, &mut ba, 2048, true);
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until
        && (ab.got.last() != Some(&(ab.sent - 1)) || ba.got.last() != Some(&(ba.sent - 1)))
    {
        receive(&mut b, &mut ab);
        receive(&mut a, &mut ba);
    }
    for (flow, what, killed_at) in [(&ab, "a to b", at_kill.0), (&ba, "b to a", at_kill.1)] {
        let lost = check(flow, what);
        println!(
            "{what}: {} sent, {} received, lost {lost:?}",
            flow.sent,
            flow.got.len()
        );
        // Only frames in flight when the switch died may be lost (a's, if
        // the restarted switch took them before b was back); those queued
        // while it was down and all after are delivered.
        assert!(
            lost.iter().all(|&s| s < killed_at && s + 64 >= killed_at),
            "{what}: lost {lost:?} (killed after {killed_at})"
        );
    }
    // The transmit rings continued through the restart: every frame sent
    // was returned exactly once (one chain each), none twice, none skipped.
    // (The switch publishes them at the end of its round: wait for it.)
    let until = Instant::now() + Duration::from_secs(2);
    let want = [ab.sent as u16, ba.sent as u16];
    while [a.used_indexes()[1], b.used_indexes()[1]] != want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(a.used_indexes()[1], want[0], "a's transmit used index");
    assert_eq!(b.used_indexes()[1], want[1], "b's transmit used index");
    println!("took {:.1} s", t0.elapsed().as_secs_f64());
}
