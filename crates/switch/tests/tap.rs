//! tap ports (root only): the host stack answers ARP and ping from a
//! poll-mode endpoint through the switch, and a host UDP socket reaches the
//! endpoint's echo port. Prints a skip line without root or /dev/net/tun.

mod common;

use common::*;
use std::net::{SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::Ipv4Address;

fn skip_reason() -> Option<&'static str> {
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun");
    }
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("1").to_string())
        });
    if uid.as_deref() != Some("0") {
        return Some("not root");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("no ip command");
    }
    None
}

fn ip_cmd(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn host_stack_through_a_tap_port() {
    if let Some(why) = skip_reason() {
        println!("skip: tap test needs root and /dev/net/tun ({why})");
        return;
    }
    bounded(Duration::from_secs(40), || {
        let dir = Dir::new("tap");
        let n = (std::process::id() % 200) as u8 + 20;
        let ifname = format!("vniot{n}");
        let host_ip = Ipv4Address([10, 231, n, 1]);
        let ep_ip = Ipv4Address([10, 231, n, 2]);
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..Default::default()
            },
            ports: vec![
                PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
                PortSpec::tap("host", &ifname),
            ],
        };
        let sw = Switch::start(cfg).unwrap();
        ip_cmd(&["addr", "add", &format!("{host_ip}/24"), "dev", &ifname]);
        ip_cmd(&["link", "set", &ifname, "up"]);

        let mut ep =
            Endpoint::connect(&dir.sock("p1"), EndpointConfig::new(mac(2), ep_ip)).unwrap();
        assert!(
            ep.resolve(host_ip, T).is_ok(),
            "the host answers ARP through the tap"
        );
        ep.ping(host_ip, 9, 1, b"hello host").unwrap();
        ep.poll_until(T, |_, ev| {
            matches!(ev, Event::EchoReply { seq: 1, .. }).then_some(())
        })
        .expect("the host answers ping");

        // Host socket -> endpoint echo port -> back.
        let sock = UdpSocket::bind(SocketAddrV4::new(host_ip.into(), 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let server = std::thread::spawn(move || {
            ep.serve(Duration::from_secs(20), &move || s2.load(Ordering::SeqCst))
                .unwrap();
        });
        let mut buf = [0u8; 64];
        let mut echoed = false;
        for _ in 0..25 {
            sock.send_to(b"from the host", SocketAddrV4::new(ep_ip.into(), 7))
                .unwrap();
            if let Ok((len, from)) = sock.recv_from(&mut buf) {
                assert_eq!(&buf[..len], b"from the host");
                assert_eq!(
                    from,
                    std::net::SocketAddr::V4(SocketAddrV4::new(ep_ip.into(), 7))
                );
                echoed = true;
                break;
            }
        }
        stop.store(true, Ordering::SeqCst);
        server.join().unwrap();
        assert!(echoed, "the endpoint echoes a host datagram");
        let host = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "host")
            .unwrap();
        assert!(
            host.stats.tx.packets >= 3 && host.stats.rx.packets >= 3,
            "{:?}",
            host.stats
        );
    });
}
