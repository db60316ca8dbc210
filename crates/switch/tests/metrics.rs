//! Counters over HTTP in Prometheus text format (`metrics_listen`), and the
//! same text through the control socket.

mod common;

use common::*;
use std::io::{Read, Write};
use std::time::Duration;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;

#[test]
fn prometheus_over_http_and_control_socket() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("metrics");
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..Default::default()
            },
            ports: vec![PortSpec::vhost_user(
                "p1",
                dir.sock("p1"),
                SocketMode::Server,
            )],
        };
        let sw = Switch::start(cfg).unwrap();
        let mut a = endpoint(&dir, 1, 1);
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(1).0);
        for _ in 0..3 {
            a.send_frame(&f).unwrap();
        }
        let mut body = String::new();
        for _ in 0..100 {
            let mut s = std::net::TcpStream::connect(sw.metrics_addr().unwrap()).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            body.clear();
            s.read_to_string(&mut body).unwrap();
            if body.contains("vnio_switch_packets_total{port=\"p1\",direction=\"tx\"} 3\n") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(body.starts_with("HTTP/1.0 200 OK\r\n"), "{body}");
        assert!(
            body.contains("vnio_switch_packets_total{port=\"p1\",direction=\"tx\"} 3\n"),
            "{body}"
        );
        // Nobody else in the VLAN: the broadcasts had no route.
        assert!(
            body.contains(
                "vnio_switch_drops_total{port=\"p1\",direction=\"tx\",reason=\"no_route\"} 3\n"
            ),
            "{body}"
        );
        let text = Client::connect(&dir.sock("control"))
            .unwrap()
            .request(&Request::Metrics)
            .unwrap();
        assert!(text
            .as_str()
            .unwrap()
            .contains("# TYPE vnio_switch_drops_total counter"));
    });
}
