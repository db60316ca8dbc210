//! The floor for `bench/instrument.sh`: the least a request-response loop can
//! do on a socket: blocking send, blocking receive, one clock read per side,
//! exact percentiles from sorted samples. No framework, no histogram.
//!
//! raw_echo server tcp|udp ADDR
//! raw_echo client tcp|udp ADDR SIZE SECONDS   -> prints "p50_ns p99_ns count"

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!(
            "usage: raw_echo server tcp|udp ADDR | raw_echo client tcp|udp ADDR SIZE SECONDS"
        );
        std::process::exit(2);
    }
    let (role, proto, addr) = (a[1].as_str(), a[2].as_str(), a[3].as_str());
    match (role, proto) {
        ("server", "udp") => {
            let s = UdpSocket::bind(addr).expect("bind");
            let mut buf = [0u8; 65536];
            loop {
                let (n, from) = s.recv_from(&mut buf).expect("recv");
                s.send_to(&buf[..n], from).expect("send");
            }
        }
        ("server", "tcp") => {
            let l = TcpListener::bind(addr).expect("bind");
            for c in l.incoming() {
                let mut c = c.expect("accept");
                c.set_nodelay(true).ok();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        let n = match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if c.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        }
        ("client", p) => {
            let size: usize = a[4].parse().expect("size");
            let secs: f64 = a[5].parse().expect("seconds");
            let mut samples: Vec<u64> = Vec::with_capacity(5_000_000);
            let mut buf = vec![0u8; size];
            let end = Instant::now() + Duration::from_secs_f64(secs);
            if p == "udp" {
                let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
                s.connect(addr).expect("connect");
                while Instant::now() < end {
                    let t = Instant::now();
                    s.send(&buf).expect("send");
                    s.recv(&mut buf).expect("recv");
                    samples.push(t.elapsed().as_nanos() as u64);
                }
            } else {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_nodelay(true).ok();
                while Instant::now() < end {
                    let t = Instant::now();
                    s.write_all(&buf).expect("send");
                    s.read_exact(&mut buf).expect("recv");
                    samples.push(t.elapsed().as_nanos() as u64);
                }
            }
            samples.sort_unstable();
            let q = |f: f64| {
                samples[((f * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1]
            };
            println!("{} {} {}", q(0.5), q(0.99), samples.len());
        }
        _ => {
            eprintln!("unknown role {role}");
            std::process::exit(2);
        }
    }
}
