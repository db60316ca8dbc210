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

/// A TCP connection to `addr` whose receive side is as small as the kernel
/// allows (a tiny window, small segments): a peer that never reads fills it at once.
fn tiny_window(addr: std::net::SocketAddr) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(a) = addr else {
        panic!("{addr}")
    };
    let set = |fd, level, opt, v: libc::c_int| {
        // SAFETY: fd is a socket; v lives across the call.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                &v as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    };
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0);
    set(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 1);
    set(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, 536);
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sin is a valid sockaddr_in for the call's duration.
    let r = unsafe {
        libc::connect(
            fd,
            &sin as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    // SAFETY: fd is a connected socket we own.
    unsafe { std::net::TcpStream::from_raw_fd(fd) }
}

#[test]
fn a_metrics_client_that_never_reads_blocks_nothing() {
    bounded(Duration::from_secs(60), || {
        let dir = Dir::new("metrics-noread");
        // Enough ports for a text far larger than the socket buffers.
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
                ..Default::default()
            },
            ports: (0..300)
                .map(|i| {
                    PortSpec::vhost_user(
                        &format!("p{i}"),
                        dir.sock(&format!("p{i}")),
                        SocketMode::Server,
                    )
                })
                .collect(),
        };
        let sw = Switch::start(cfg).unwrap();
        let addr = sw.metrics_addr().unwrap();
        let mut stuck = tiny_window(addr);
        stuck.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(700));
        // Another client is answered meanwhile.
        let t = std::time::Instant::now();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(
            body.contains("vnio_switch_packets_total{port=\"p299\""),
            "{}",
            body.len()
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // And the switch stops promptly.
        let t = std::time::Instant::now();
        drop(sw);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        drop(stuck);
    });
}
