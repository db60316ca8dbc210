//! Software LRO's effect and price, side by side in one run (LRO on and off
//! alternating on the same switch and endpoints): a sender without offloads
//! pushes a TCP stream as MTU segments (bursts of 32, as a guest's transmit
//! batches) to a receiver that negotiated TSO receive:
//!
//! - frames the receiver gets per MiB, payload Gbps, and CPU per MiB in the
//!   receiver (a stand-in for the guest: its per-frame work) and in the
//!   switch worker;
//! - request-response round trips with one small segment each way (PSH set,
//!   as a message's last segment), p50/p99: what LRO costs a latency flow.
//!
//! `cargo run --release -p vnio-switch --example lro -- [REPS] [SECS]`
//! (bench/lro.sh prints the environment with it).

use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::SocketMode;
use vnio_switch::vhost_user::device::feature;
use vnio_switch::wire::tcp::flags;
use vnio_switch::wire::testing::{pattern, TcpFrame};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const MSS: usize = 1448;
const MA: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MB: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

fn cpu_ns(task: &str) -> u64 {
    std::fs::read_to_string(format!("{task}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn worker_task() -> String {
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.starts_with("vnio-switch-wor") {
            return e.path().display().to_string();
        }
    }
    panic!("no switch worker thread");
}

fn addressed(mut f: Vec<u8>, dst: EthernetAddress, src: EthernetAddress) -> Vec<u8> {
    f[..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f
}

struct Stream {
    frames: u64,
    bytes: u64,
    secs: f64,
    rx_cpu: u64,
    worker_cpu: u64,
}

fn stream(a: &mut Endpoint, b: &mut Endpoint, secs: f64) -> Stream {
    // 32 segments per burst, sequence numbers running on across bursts.
    let data = pattern(32 * MSS, 5);
    let mut seq = 1u32;
    let mut buf = vec![0u8; 70_000];
    let hdr_end = 14 + 20 + 32;
    let worker = worker_task();
    let (w0, r0) = (cpu_ns(&worker), cpu_ns("/proc/thread-self"));
    let (mut frames, mut bytes) = (0u64, 0u64);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut burst: Vec<Vec<u8>> = Vec::with_capacity(32);
    while Instant::now() < end {
        burst.clear();
        for i in 0..32 {
            let f = TcpFrame {
                seq,
                ip_id: seq as u16,
                options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
                payload: data[i * MSS..(i + 1) * MSS].to_vec(),
                ..Default::default()
            };
            seq = seq.wrapping_add(MSS as u32);
            burst.push(addressed(f.build(false), MB, MA));
        }
        let refs: Vec<&[u8]> = burst.iter().map(|f| f.as_slice()).collect();
        let mut sent = 0;
        while sent < refs.len() && Instant::now() < end {
            sent += a.send_burst(&refs[sent..]);
            while let Some(n) = b.poll_recv(&mut buf) {
                frames += 1;
                bytes += (n - hdr_end) as u64;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    while let Some(n) = b.poll_recv(&mut buf) {
        frames += 1;
        bytes += (n - hdr_end) as u64;
    }
    Stream {
        frames,
        bytes,
        secs: t0.elapsed().as_secs_f64(),
        rx_cpu: cpu_ns("/proc/thread-self") - r0,
        worker_cpu: cpu_ns(&worker) - w0,
    }
}

fn rr(a: &mut Endpoint, b: &mut Endpoint, secs: f64) -> Vec<Duration> {
    let seg = |from: EthernetAddress, to: EthernetAddress, seq: u32| {
        let f = TcpFrame {
            seq,
            flags: flags::ACK | flags::PSH,
            payload: pattern(100, seq),
            ..Default::default()
        };
        addressed(f.build(false), to, from)
    };
    let (req, resp) = (seg(MA, MB, 10), seg(MB, MA, 20));
    let mut buf = vec![0u8; 70_000];
    let mut v = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t = Instant::now();
        a.send_frame(&req).unwrap();
        while b.poll_recv(&mut buf).is_none() {}
        b.send_frame(&resp).unwrap();
        while a.poll_recv(&mut buf).is_none() {}
        v.push(t.elapsed());
    }
    v.sort();
    v
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2.0);
    let dir = std::env::temp_dir().join(format!("vnio-lro-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: dir.join("ctl.sock"),
            idle_polls: u32::MAX,
            ..Default::default()
        },
        ports: vec![
            PortSpec::vhost_user("a", dir.join("a.sock"), SocketMode::Server),
            PortSpec::vhost_user("b", dir.join("b.sock"), SocketMode::Server),
        ],
    })?;
    let mut a = Endpoint::connect(
        &dir.join("a.sock"),
        EndpointConfig::new(MA, Ipv4Address([10, 0, 0, 1])),
    )?;
    let mut cb = EndpointConfig::new(MB, Ipv4Address([10, 0, 0, 2]));
    cb.offloads = feature::GUEST_CSUM | feature::GUEST_TSO4;
    let mut b = Endpoint::connect(&dir.join("b.sock"), cb)?;
    // Both announce themselves so the switch knows their ports.
    for (e, m) in [(&mut a, MA), (&mut b, MB)] {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&m.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        e.send_frame(&f)?;
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0u8; 70_000];
    while a.poll_recv(&mut buf).is_some() {}
    while b.poll_recv(&mut buf).is_some() {}
    let set = |on: bool| {
        sw.handle()
            .set_port(
                "b",
                PolicyUpdate {
                    lro: Some(on),
                    ..Default::default()
                },
            )
            .unwrap();
    };
    println!("# stream of 1448-byte TCP segments in bursts of 32, {secs} s per repetition, {reps} repetitions alternating off/on; request-response: one 100-byte PSH segment each way");
    let mut runs: [Vec<Stream>; 2] = [Vec::new(), Vec::new()];
    let mut rrs: [Vec<Vec<Duration>>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..reps {
        for (i, on) in [false, true].into_iter().enumerate() {
            set(on);
            runs[i].push(stream(&mut a, &mut b, secs));
            rrs[i].push(rr(&mut a, &mut b, secs / 2.0));
        }
    }
    let mut gbps = [0.0; 2];
    let mut fpm = [0.0; 2];
    let mut cpu = [0.0; 2];
    let mut p50 = [0.0; 2];
    for (i, name) in ["LRO off", "LRO on"].iter().enumerate() {
        let mut v = std::mem::take(&mut runs[i]);
        v.sort_by(|x, y| (x.bytes as f64 / x.secs).total_cmp(&(y.bytes as f64 / y.secs)));
        let s = &v[v.len() / 2];
        let mib = s.bytes as f64 / (1 << 20) as f64;
        gbps[i] = s.bytes as f64 * 8.0 / s.secs / 1e9;
        fpm[i] = s.frames as f64 / mib;
        cpu[i] = (s.rx_cpu + s.worker_cpu) as f64 / mib / 1e3;
        let mut r = std::mem::take(&mut rrs[i]);
        r.sort_by(|x, y| pct(x, 0.5).total_cmp(&pct(y, 0.5)));
        let rm = &r[r.len() / 2];
        p50[i] = pct(rm, 0.5);
        println!(
            "{name:<8} {:>6.2} Gbps  {:>7.1} frames/MiB  receiver {:>7.1} µs/MiB  worker {:>7.1} µs/MiB  rr p50 {:>6.2} µs p99 {:>6.2} µs",
            gbps[i],
            fpm[i],
            s.rx_cpu as f64 / mib / 1e3,
            s.worker_cpu as f64 / mib / 1e3,
            pct(rm, 0.5),
            pct(rm, 0.99)
        );
    }
    println!(
        "on/off: frames per MiB {:.3}, throughput {:.2}, CPU per MiB (receiver + worker) {:.2}, rr p50 {:.2}",
        fpm[1] / fpm[0],
        gbps[1] / gbps[0],
        cpu[1] / cpu[0],
        p50[1] / p50[0]
    );
    drop(sw);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
