//! Ports come and go while others carry traffic; a client-mode port
//! reconnects when its front-end restarts.

mod common;

use common::*;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;

fn serve(ep: Endpoint, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Endpoint> {
    std::thread::spawn(move || {
        let mut ep = ep;
        let s = stop.clone();
        ep.serve(Duration::from_secs(30), &move || s.load(Ordering::SeqCst))
            .unwrap();
        ep
    })
}

#[test]
fn add_and_remove_ports_while_traffic_flows() {
    bounded(Duration::from_secs(50), || {
        let dir = Dir::new("ports");
        let sw = switch(&dir, 2);
        let stop = Arc::new(AtomicBool::new(false));
        let b = serve(endpoint(&dir, 2, 2), stop.clone());
        let mut a = endpoint(&dir, 1, 1);
        a.resolve(ip(2), T).unwrap();
        let traffic_stop = Arc::new(AtomicBool::new(false));
        let ts = traffic_stop.clone();
        let traffic = std::thread::spawn(move || {
            let peer = SocketAddrV4::new(ip(2).into(), 7);
            let mut buf = [0u8; 2048];
            let mut done = 0u32;
            while !ts.load(Ordering::SeqCst) || done < 200 {
                let msg = done.to_le_bytes();
                a.udp_send_to(peer, 6000, &msg).unwrap();
                let (_, _, n) = a
                    .udp_recv_timeout(&mut buf, T)
                    .unwrap()
                    .expect("no echo lost while ports change");
                assert_eq!(&buf[..n], &msg);
                done += 1;
            }
            done
        });

        let mut ctl = Client::connect(&dir.sock("control")).unwrap();
        for round in 0..5u8 {
            let name = format!("extra{round}");
            let sock = dir.sock(&name);
            let spec = PortSpec::vhost_user(&name, &sock, SocketMode::Server);
            ctl.request(&Request::PortAdd { port: spec }).unwrap();
            let n = 10 + round;
            let mut c = Endpoint::connect(&sock, EndpointConfig::new(mac(n), ip(n))).unwrap();
            c.resolve(ip(2), T).unwrap();
            c.ping(ip(2), 1, u16::from(round), b"x").unwrap();
            c.poll_until(T, |_, ev| {
                matches!(ev, Event::EchoReply { .. }).then_some(())
            })
            .unwrap();
            drop(c);
            ctl.request(&Request::PortDel { name: name.clone() })
                .unwrap();
            assert!(!sock.exists(), "the removed port's socket is gone");
        }
        let err = ctl
            .request(&Request::PortDel {
                name: "extra0".into(),
            })
            .unwrap_err();
        assert!(err.to_string().contains("no port extra0"), "{err}");

        traffic_stop.store(true, Ordering::SeqCst);
        let done = traffic.join().unwrap();
        assert!(done >= 200);
        stop.store(true, Ordering::SeqCst);
        b.join().unwrap();
        let ports = sw.handle().list().unwrap();
        assert_eq!(
            ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["p1", "p2"]
        );
        assert_eq!(ports[0].stats.resets + ports[1].stats.resets, 0);
    });
}

#[test]
fn client_mode_port_reconnects_after_the_frontend_restarts() {
    bounded(Duration::from_secs(40), || {
        let dir = Dir::new("reconnect");
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..SwitchConfig::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
                PortSpec::vhost_user("p2", dir.sock("p2"), SocketMode::Client),
            ],
        };
        let sw = Switch::start(cfg).unwrap();
        let mut a = endpoint(&dir, 1, 1);
        let peer = SocketAddrV4::new(ip(2).into(), 7);
        let mut buf = [0u8; 2048];
        for generation in 0..3u8 {
            let b =
                Endpoint::listen(&dir.sock("p2"), EndpointConfig::new(mac(2), ip(2)), T).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let bt = serve(b, stop.clone());
            a.resolve(ip(2), T).unwrap();
            let deadline = Instant::now() + T;
            // The first datagrams may race the new front-end's ring setup: retry until echoed.
            loop {
                a.udp_send_to(peer, 7000, &[generation; 16]).unwrap();
                if let Some((_, _, n)) = a
                    .udp_recv_timeout(&mut buf, Duration::from_millis(200))
                    .unwrap()
                {
                    assert_eq!(&buf[..n], &[generation; 16]);
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "no echo from generation {generation}"
                );
            }
            stop.store(true, Ordering::SeqCst);
            drop(bt.join().unwrap());
        }
        let p2 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p2")
            .unwrap();
        assert_eq!(p2.stats.connections, 3);
        assert_eq!(p2.stats.resets, 0, "a front-end restart is not an error");
    });
}
