//! Traffic control through netlink: htb shapes real traffic, netem delays it
//! (or says clearly that the kernel lacks it).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use vnio_topo::{Host, Netem, Pair, RateLimit};

/// Send `bytes` over TCP from `a` to `b` and return how long it took until
/// `b` confirmed receiving all of it.
fn tcp_transfer(a: &Host, b: &Host, port: u16, bytes: usize) -> Duration {
    let addr = SocketAddr::from((b.addr(), port));
    let listener = b
        .run(move || TcpListener::bind(addr))
        .expect("enter b")
        .expect("listen");
    let sink = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < bytes {
            let n = stream.read(&mut buf).expect("read");
            assert!(n > 0, "early EOF after {got} bytes");
            got += n;
        }
        stream.write_all(b"k").expect("ack");
    });
    let mut stream = a
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
        .expect("enter a")
        .expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let data = vec![0x5au8; bytes];
    let start = Instant::now();
    stream.write_all(&data).expect("write");
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack).expect("ack");
    let elapsed = start.elapsed();
    sink.join().expect("sink");
    elapsed
}

#[test]
fn htb_rate_limit_shapes_tcp() {
    if common::skip_unless_root("htb_rate_limit_shapes_tcp") {
        return;
    }
    let journal = common::journal("htb");
    let pair = Pair::with_journal(&journal).expect("pair");
    let (a, b) = (pair.a(), pair.b());
    let mut h = a.handle().expect("handle");

    // 20 Mbit/s = 2.5 MB/s: 2.5 MB must take about a second.
    h.set_rate_limit(a.ifname(), RateLimit::hard(20_000_000))
        .expect("htb");
    let qdiscs = h.qdiscs(a.ifname()).expect("qdiscs");
    assert!(
        qdiscs
            .iter()
            .any(|q| q.kind == "htb" && q.root && q.handle == (1, 0)),
        "{qdiscs:?}"
    );
    let shaped = tcp_transfer(a, b, 7101, 2_500_000);
    assert!(
        shaped >= Duration::from_millis(800),
        "shaped transfer took {shaped:?}"
    );
    assert!(
        shaped <= Duration::from_secs(5),
        "shaped transfer took {shaped:?}"
    );

    h.clear_qdisc(a.ifname()).expect("clear");
    assert!(!h
        .qdiscs(a.ifname())
        .expect("qdiscs")
        .iter()
        .any(|q| q.kind == "htb"));
    let free = tcp_transfer(a, b, 7102, 2_500_000);
    println!("2.5 MB over TCP: {shaped:?} at 20 Mbit/s, {free:?} unshaped");
    assert!(free * 3 < shaped, "unshaped {free:?} vs shaped {shaped:?}");
    // Clearing twice is fine.
    h.clear_qdisc(a.ifname()).expect("clear again");
    drop(h);
    drop(pair);
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

#[test]
fn netem_delays_or_reports_missing_support() {
    if common::skip_unless_root("netem_delays_or_reports_missing_support") {
        return;
    }
    let journal = common::journal("netem");
    let pair = Pair::with_journal(&journal).expect("pair");
    let (a, b) = (pair.a(), pair.b());
    let mut h = a.handle().expect("handle");
    let netem = Netem {
        delay: Duration::from_millis(20),
        ..Netem::default()
    };
    match h.set_netem(a.ifname(), &netem) {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("setting netem on {}", a.ifname())),
                "{text}"
            );
            assert!(text.contains("not available in this kernel"), "{text}");
            println!("netem unavailable here: {text}");
        }
        Ok(()) => {
            let qdiscs = h.qdiscs(a.ifname()).expect("qdiscs");
            assert!(
                qdiscs.iter().any(|q| q.kind == "netem" && q.root),
                "{qdiscs:?}"
            );
            let addr = SocketAddr::from((b.addr(), 7103));
            let server = b
                .run(move || UdpSocket::bind(addr))
                .expect("b")
                .expect("bind");
            let client = a
                .run(|| UdpSocket::bind("0.0.0.0:0"))
                .expect("a")
                .expect("bind");
            server
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let start = Instant::now();
            client.send_to(b"x", addr).expect("send");
            let mut buf = [0u8; 8];
            let (_, from) = server.recv_from(&mut buf).expect("recv");
            server.send_to(b"y", from).expect("reply");
            client.recv_from(&mut buf).expect("reply recv");
            let rtt = start.elapsed();
            assert!(
                rtt >= Duration::from_millis(20),
                "rtt {rtt:?} below the added delay"
            );
        }
    }
    let bad = h.set_netem(
        a.ifname(),
        &Netem {
            loss_percent: 150.0,
            ..Netem::default()
        },
    );
    assert!(bad.is_err());
    drop(h);
    drop(pair);
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
