//! A tenant cannot turn the switch's shared state against its neighbours:
//! sending frames from thousands of source addresses does not make their
//! unicast flood to it (the FDB limits what a port learns), and streaming
//! control messages does not stall the worker that serves them (a port
//! handles a bounded number of messages per wake-up).

mod common;

use common::raw::{Order, RawFrontend};
use common::*;
use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use vnio_switch::vhost_user::protocol::{code, encode_request};

/// A frame from the `i`-th made-up source address to a unicast address
/// nobody has (so it floods).
fn from_many(i: u32) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&[2, 0xee, 0, 0, 0, 1]);
    let b = i.to_be_bytes();
    f[6..12].copy_from_slice(&[2, 0xaa, b[0], b[1], b[2], b[3]]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f
}

/// The hostile port: sends frames from ever new source addresses and keeps
/// every frame addressed (unicast) to a victim that reaches it.
struct Attacker {
    h: RawFrontend,
    next: u32,
    victims: [[u8; 6]; 2],
    leaked: usize,
}

impl Attacker {
    fn send(&mut self, n: u32) {
        for _ in 0..n {
            let f = from_many(self.next);
            self.next += 1;
            while !self.h.try_send_frame(&f) {
                self.drain();
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(f) = self.h.recv_frame(Duration::ZERO) {
            if self.victims.iter().any(|v| f[..6] == v[..]) {
                self.leaked += 1;
            }
        }
    }
}

/// p1 sends from 10,000 source addresses (more than the 8192 entries of
/// its worker's table) before and while p2 and p3 exchange traffic: p1
/// gets none of their unicast, their round trips all complete, and p1's
/// refused addresses are counted.
#[test]
fn many_source_addresses_do_not_make_others_flood_to_the_attacker() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("fdb-abuse");
        let sw = switch(&dir, 3);
        let stop = Arc::new(AtomicBool::new(false));
        let (filled_tx, filled_rx) = mpsc::channel();
        let sock = dir.sock("p1");
        let s = stop.clone();
        let attacker = std::thread::spawn(move || {
            let mut h = RawFrontend::connect(&sock);
            h.handshake(Order::Standard);
            let mut a = Attacker {
                h,
                next: 0,
                victims: [mac(2).0, mac(3).0],
                leaked: 0,
            };
            a.send(10_000);
            filled_tx.send(()).unwrap();
            // Keeps sending new addresses while the others talk.
            while !s.load(Ordering::SeqCst) {
                a.send(16);
                std::thread::sleep(Duration::from_millis(1));
            }
            a.drain();
            (a.leaked, a.next)
        });
        filled_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        wait_for("the switch to take p1's frames", || {
            port(sw.handle(), "p1").stats.tx.packets >= 10_000
        });

        let mut b = endpoint(&dir, 2, 2);
        let c = endpoint(&dir, 3, 3);
        let s = stop.clone();
        let c = std::thread::spawn(move || {
            let mut c = c;
            c.serve(Duration::from_secs(40), &move || s.load(Ordering::SeqCst))
                .unwrap();
        });
        assert_eq!(b.resolve(ip(3), T).unwrap(), mac(3));
        let peer = SocketAddrV4::new(ip(3).into(), 7);
        let mut buf = [0u8; 2048];
        for i in 0..200u32 {
            let msg = i.to_le_bytes();
            b.udp_send_to(peer, 5000, &msg).unwrap();
            let (_, _, n) = b
                .udp_recv_timeout(&mut buf, T)
                .unwrap()
                .unwrap_or_else(|| panic!("echo {i} between p2 and p3"));
            assert_eq!(&buf[..n], &msg);
        }
        // While p1 is connected (a disconnection flushes what it learned).
        let limit = u64::from(vnio_switch::fdb::DEFAULT_PORT_LIMIT);
        let learned_on_p1 = sw
            .handle()
            .fdb()
            .unwrap()
            .iter()
            .filter(|e| e.port.0 == port(sw.handle(), "p1").id)
            .count();
        stop.store(true, Ordering::SeqCst);
        let (leaked, sent) = attacker.join().unwrap();
        c.join().unwrap();

        let p1 = port(sw.handle(), "p1");
        assert_eq!(
            p1.stats.rx.drops["ring_full"], 0,
            "p1's receive ring never overflowed: every frame to it was seen"
        );
        assert_eq!(
            leaked, 0,
            "p1 received {leaked} frames of p2 and p3's unicast ({:?})",
            p1.stats
        );
        let refused = p1.stats.tx.drops.get("fdb_limit").copied().unwrap_or(0);
        assert!(
            refused >= u64::from(sent) - limit,
            "{refused} of {sent} addresses counted as refused"
        );
        assert!(learned_on_p1 as u64 <= limit, "{learned_on_p1} learned");
        eprintln!("p1: {sent} source addresses, {refused} refused, {learned_on_p1} learned");
        for name in ["p2", "p3"] {
            assert_eq!(port(sw.handle(), name).stats.resets, 0, "{name}");
        }
    });
}

/// p1 streams SET_OWNER (no answer) with a GET_FEATURES every 256 messages
/// from one thread, reading the answers on another, while p2 and p3 (on
/// the same worker) exchange round trips: theirs keep coming (none waits a
/// second), and every GET_FEATURES of p1 is answered.
#[test]
fn control_message_flood_does_not_starve_neighbours() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("ctl-flood");
        let sw = switch(&dir, 3);
        let mut b = endpoint(&dir, 2, 2);
        let c = endpoint(&dir, 3, 3);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let c = std::thread::spawn(move || {
            let mut c = c;
            c.serve(Duration::from_secs(40), &move || s.load(Ordering::SeqCst))
                .unwrap();
        });
        assert_eq!(b.resolve(ip(3), T).unwrap(), mac(3));

        let flooder = RawFrontend::connect(&dir.sock("p1"));
        let offered = flooder.get_u64(code::GET_FEATURES);
        let asked = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let mut burst = Vec::new();
        for _ in 0..255 {
            burst.extend_from_slice(&encode_request(code::SET_OWNER, 0, &[]));
        }
        burst.extend_from_slice(&encode_request(code::GET_FEATURES, 0, &[]));
        let (s, a) = (stop.clone(), asked.clone());
        let mut w = flooder.sock.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                w.write_all(&burst).unwrap();
                a.fetch_add(1, Ordering::SeqCst);
            }
        });
        // Set once the writer is done: nothing more will be asked.
        let written = Arc::new(AtomicBool::new(false));
        let (s, q, a) = (written.clone(), asked.clone(), answered.clone());
        let mut r = flooder.sock.try_clone().unwrap();
        r.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let reader = std::thread::spawn(move || {
            let mut reply = [0u8; 20];
            let mut got = 0;
            loop {
                match r.read(&mut reply[got..]) {
                    Ok(0) => panic!("the switch closed p1's connection"),
                    Ok(n) => got += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        // Done once stopped with every question answered.
                        if s.load(Ordering::SeqCst)
                            && a.load(Ordering::SeqCst) >= q.load(Ordering::SeqCst)
                        {
                            return;
                        }
                        continue;
                    }
                    Err(e) => panic!("reading p1's answers: {e}"),
                }
                if got == reply.len() {
                    got = 0;
                    assert_eq!(
                        u64::from_le_bytes(reply[12..20].try_into().unwrap()),
                        offered
                    );
                    a.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        // The flood is under way before the neighbours start.
        wait_for("p1's flood", || answered.load(Ordering::SeqCst) >= 10);

        let peer = SocketAddrV4::new(ip(3).into(), 7);
        let mut buf = [0u8; 2048];
        let start = Instant::now();
        let mut last = start;
        let mut worst = Duration::ZERO;
        let mut trips = 0u32;
        while trips < 300 || start.elapsed() < Duration::from_secs(3) {
            let msg = trips.to_le_bytes();
            b.udp_send_to(peer, 5000, &msg).unwrap();
            let echo = b
                .udp_recv_timeout(&mut buf, Duration::from_secs(2))
                .unwrap();
            let now = Instant::now();
            worst = worst.max(now - last);
            last = now;
            let (_, _, n) = echo.unwrap_or_else(|| {
                panic!("round trip {trips} between p2 and p3 starved by p1's flood")
            });
            assert_eq!(&buf[..n], &msg);
            trips += 1;
        }
        assert!(
            worst < Duration::from_secs(1),
            "a round trip waited {worst:?}"
        );
        eprintln!(
            "{trips} round trips in {:?}, the longest {worst:?}",
            start.elapsed()
        );
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        written.store(true, Ordering::SeqCst);
        // Every question asked is answered, flood or not.
        let asked = asked.load(Ordering::SeqCst);
        wait_for("p1's answers", || answered.load(Ordering::SeqCst) >= asked);
        reader.join().unwrap();
        assert_eq!(answered.load(Ordering::SeqCst), asked);
        assert!(asked > 100, "the flood was a flood: {asked} bursts");
        eprintln!("p1: {asked} bursts of 256 messages, every GET_FEATURES answered");
        c.join().unwrap();
        for name in ["p1", "p2", "p3"] {
            assert_eq!(port(sw.handle(), name).stats.resets, 0, "{name}");
        }
    });
}
