//! The floor: the least a request-response loop can do on a socket
//! (blocking send, blocking receive, one clock read per round trip), as a
//! server thread in the target's namespace and a client loop in the
//! client's. The round trips are recorded into the instrument's histogram
//! after the loop, so the loop does no more than a hand-written one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vnio_measure::stats::Latency;

/// How often a blocked server looks at its stop flag.
const POLL: Duration = Duration::from_millis(100);

/// Echo what arrives at `addr` until `stop` is set.
pub fn serve(udp: bool, addr: SocketAddr, stop: &AtomicBool) {
    if udp {
        let Ok(s) = UdpSocket::bind(addr) else { return };
        let _ = s.set_read_timeout(Some(POLL));
        let mut buf = [0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
        return;
    }
    let Ok(l) = TcpListener::bind(addr) else {
        return;
    };
    let _ = l.set_nonblocking(true);
    std::thread::scope(|scope| {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((c, _)) => {
                    scope.spawn(move || echo_tcp(c, stop));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
}

fn echo_tcp(mut c: TcpStream, stop: &AtomicBool) {
    let _ = c.set_nonblocking(false);
    let _ = c.set_nodelay(true);
    let _ = c.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        match c.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// Round trips of `size` bytes to `addr` for `length`, one in flight.
pub fn client(
    udp: bool,
    addr: SocketAddr,
    size: usize,
    length: Duration,
) -> Result<Latency, String> {
    let err = |what: &str, e: std::io::Error| format!("raw echo {what} {addr}: {e}");
    let mut samples: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut buf = vec![0u8; size];
    let end = Instant::now() + length;
    if udp {
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| err("bind for", e))?;
        s.connect(addr).map_err(|e| err("connect to", e))?;
        // A lost datagram ends the run instead of hanging it.
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        while Instant::now() < end {
            let t = Instant::now();
            s.send(&buf).map_err(|e| err("send to", e))?;
            s.recv(&mut buf).map_err(|e| err("receive from", e))?;
            samples.push(t.elapsed().as_nanos() as u64);
        }
    } else {
        let mut s = TcpStream::connect(addr).map_err(|e| err("connect to", e))?;
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        while Instant::now() < end {
            let t = Instant::now();
            s.write_all(&buf).map_err(|e| err("send to", e))?;
            s.read_exact(&mut buf).map_err(|e| err("receive from", e))?;
            samples.push(t.elapsed().as_nanos() as u64);
        }
    }
    let mut lat = Latency::new();
    for v in samples {
        lat.record(v);
    }
    Ok(lat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn loops_round_trip_over_loopback_and_the_server_stops() {
        for udp in [true, false] {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().port()
            };
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let server = std::thread::spawn(move || serve(udp, addr, &s));
            std::thread::sleep(Duration::from_millis(100));
            let lat = client(udp, addr, 64, Duration::from_millis(100)).unwrap();
            assert!(lat.count() > 10, "udp {udp}: {}", lat.count());
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap();
        }
    }
}
