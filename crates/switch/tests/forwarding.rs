//! Two or more poll-mode endpoints exchange ARP, ping and UDP through the
//! switch daemon over real Unix sockets and shared memfd memory.

mod common;

use common::*;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vnio_switch::datapath::Datapath;
use vnio_switch::endpoint::stack::Event;

/// Runs endpoint `ep` as a responder on a thread until `stop`.
fn responder(
    mut ep: vnio_switch::endpoint::Endpoint,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<vnio_switch::endpoint::Endpoint> {
    std::thread::spawn(move || {
        let s = stop.clone();
        ep.serve(Duration::from_secs(30), &move || s.load(Ordering::SeqCst))
            .unwrap();
        ep
    })
}

#[test]
fn arp_ping_and_udp_echo_between_two_endpoints() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("fwd");
        let sw = switch(&dir, 2);
        let mut a = endpoint(&dir, 1, 1);
        let b = endpoint(&dir, 2, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let b = responder(b, stop.clone());

        assert_eq!(a.resolve(ip(2), T).unwrap(), mac(2));
        a.ping(ip(2), 7, 1, b"ping").unwrap();
        let seq = a.poll_until(T, |_, ev| match ev {
            Event::EchoReply { src, ident: 7, seq } if src == ip(2) => Some(seq),
            _ => None,
        });
        assert_eq!(seq.unwrap(), 1);

        let peer = SocketAddrV4::new(ip(2).into(), 7);
        let mut buf = [0u8; 2048];
        for i in 0..100u32 {
            let msg = format!("request {i}");
            a.udp_send_to(peer, 4000, msg.as_bytes()).unwrap();
            let (from, port, n) = a.udp_recv_timeout(&mut buf, T).unwrap().expect("echo");
            assert_eq!((from, port, &buf[..n]), (peer, 4000, msg.as_bytes()));
        }
        stop.store(true, Ordering::SeqCst);
        let b = b.join().unwrap();
        assert!(
            b.stats().replies >= 102,
            "ARP + ping + 100 echoes answered: {:?}",
            b.stats()
        );

        let ports = sw.handle().list().unwrap();
        let p1 = ports.iter().find(|p| p.name == "p1").unwrap();
        let p2 = ports.iter().find(|p| p.name == "p2").unwrap();
        assert!(p1.connected && p1.running && p2.running);
        assert!(p1.stats.tx.packets >= 102, "{:?}", p1.stats);
        assert_eq!(
            p1.stats.tx.packets, p2.stats.rx.packets,
            "every frame from p1 reached p2"
        );
        assert!(p2.stats.tx.packets >= 102);
        assert!(
            p1.stats.tx.drops.values().all(|d| *d == 0),
            "{:?}",
            p1.stats.tx.drops
        );
        let fdb = sw.handle().fdb().unwrap();
        assert!(fdb.iter().any(|e| e.mac == mac(1)) && fdb.iter().any(|e| e.mac == mac(2)));
    });
}

#[test]
fn broadcast_floods_to_every_other_port_unicast_does_not() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("flood");
        let sw = switch(&dir, 3);
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut c = endpoint(&dir, 3, 3);
        // A broadcast from a reaches b and c.
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(1).0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        a.send_frame(&f).unwrap();
        let mut buf = [0u8; 2048];
        for ep in [&mut b, &mut c] {
            let mut got = None;
            for _ in 0..100 {
                if let Some(n) = ep.poll_recv(&mut buf) {
                    got = Some(n);
                    break;
                }
                ep.wait(Duration::from_millis(50)).unwrap();
            }
            assert_eq!(got, Some(60));
            assert_eq!(&buf[..60], &f[..]);
        }
        // Now a is learned: a unicast from b to a goes to a only.
        let mut u = f;
        u[..6].copy_from_slice(&mac(1).0);
        u[6..12].copy_from_slice(&mac(2).0);
        b.send_frame(&u).unwrap();
        let mut got = None;
        for _ in 0..100 {
            if let Some(n) = a.poll_recv(&mut buf) {
                got = Some(n);
                break;
            }
            a.wait(Duration::from_millis(50)).unwrap();
        }
        assert_eq!(got, Some(60));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            c.poll_recv(&mut buf),
            None,
            "c must not see a known unicast"
        );
        let ports = sw.handle().list().unwrap();
        let p3 = ports.iter().find(|p| p.name == "p3").unwrap();
        assert_eq!(p3.stats.rx.packets, 1);
    });
}

/// The switch remembers a port's last forwarding decision for the frames
/// that follow it; what it learns in between must still count at once, at
/// the same instant (the worker reads the clock only every few rounds).
#[test]
fn what_is_learned_counts_for_the_very_next_frame() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("memo");
        let (mut dp, mut eps) = driven(&dir, 3);
        let now = std::time::Instant::now();
        let mut buf = [0u8; 2048];
        let typed = |dst: u8, src: u8, ethertype: [u8; 2]| {
            let mut f = [0u8; 60];
            f[..6].copy_from_slice(&mac(dst).0);
            f[6..12].copy_from_slice(&mac(src).0);
            f[12..14].copy_from_slice(&ethertype);
            f
        };
        let frame = |dst: u8, src: u8| typed(dst, src, [0x88, 0xb5]);
        let mut got = |dp: &mut Datapath, eps: &mut Vec<vnio_switch::endpoint::Endpoint>| {
            dp.poll(now, 64);
            eps.iter_mut()
                .map(|e| {
                    let mut n = 0;
                    while e.poll_recv(&mut buf).is_some() {
                        n += 1;
                    }
                    n
                })
                .collect::<Vec<_>>()
        };
        // Nobody has 02::09 yet: p1's frames to it flood to p2 and p3.
        for _ in 0..3 {
            eps[0].send_frame(&frame(9, 1)).unwrap();
        }
        assert_eq!(got(&mut dp, &mut eps), [0, 3, 3]);
        // p3 answers from 02::09: learned there (and p1 is known: p1 only).
        eps[2].send_frame(&frame(1, 9)).unwrap();
        assert_eq!(got(&mut dp, &mut eps), [1, 0, 0]);
        // Same instant, same addresses from p1 as before: now p3 only.
        for _ in 0..3 {
            eps[0].send_frame(&frame(9, 1)).unwrap();
        }
        assert_eq!(got(&mut dp, &mut eps), [0, 0, 3]);
        // 02::09 moves to p2, announcing itself (an ordinary frame would
        // not move it at once: p3 was sending from it, see `fdb::moves`).
        eps[1].send_frame(&typed(1, 9, [0x80, 0x35])).unwrap();
        assert_eq!(got(&mut dp, &mut eps), [1, 0, 0]);
        eps[0].send_frame(&frame(9, 1)).unwrap();
        assert_eq!(got(&mut dp, &mut eps), [0, 1, 0]);
        // p2 leaves the switch: what was learned there goes with it.
        let p2 = dp.table().find("p2").unwrap();
        dp.remove(p2);
        eps[0].send_frame(&frame(9, 1)).unwrap();
        assert_eq!(got(&mut dp, &mut eps), [0, 0, 1]);
    });
}
