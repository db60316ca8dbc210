//! Head-of-line blocking on a shared uplink receive queue (the studies'
//! NetQueue experiment): a latency vNIC pings a peer namespace across the
//! uplink while a neighbour vNIC receives a 256-byte UDP flood from that
//! namespace, at rates from 0 up to the highest this machine carries. Each
//! rate runs twice, one configuration after the other: the uplink with one
//! (shared) receive queue, and with a queue per vNIC.
//!
//! The switch is `vnio switch` (a child process pinned with taskset); this
//! process owns both poll-mode endpoints and the flood generator (an
//! AF_PACKET ring opened inside the peer namespace), in one thread. Root
//! only; run through `bench/netqueue.sh`.
//!
//! `netqueue_hol --vnio PATH [--steps 8] [--secs 2] [--max-kpps N] [--burst 32] [--ping-us 200] [--switch-cpu 0]`

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::endpoint::stack::{build_udp, Event};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::uplink::{UplinkPort, HDR_LEN};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

struct Args {
    vnio: String,
    steps: u32,
    secs: f64,
    max_kpps: Option<f64>,
    switch_cpu: String,
    ping_us: u64,
    burst: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        vnio: String::new(),
        steps: 8,
        secs: 2.0,
        max_kpps: None,
        switch_cpu: "0".into(),
        ping_us: 200,
        burst: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        let num = |s: String| s.parse::<f64>().map_err(|e| format!("{k}: {e}"));
        match k.as_str() {
            "--vnio" => a.vnio = v()?,
            "--steps" => a.steps = num(v()?)? as u32,
            "--secs" => a.secs = num(v()?)?,
            "--max-kpps" => a.max_kpps = Some(num(v()?)?),
            "--switch-cpu" => a.switch_cpu = v()?,
            "--ping-us" => a.ping_us = num(v()?)? as u64,
            "--burst" => a.burst = (num(v()?)? as u64).max(1),
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.vnio.is_empty() {
        return Err("--vnio PATH is required".into());
    }
    Ok(a)
}

/// The switch process, stopped on drop.
struct SwitchProc(Child);

impl Drop for SwitchProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const LAT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const NBR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const GEN_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x99]);
const FRAME: usize = 256;

/// What one run at one rate measured.
struct Row {
    offered_kpps: f64,
    received_kpps: f64,
    rtts_us: Vec<f64>,
    lost: u32,
}

impl Row {
    fn pct(&self, p: f64) -> f64 {
        if self.rtts_us.is_empty() {
            return f64::NAN;
        }
        let i = ((self.rtts_us.len() as f64 * p) as usize).min(self.rtts_us.len() - 1);
        self.rtts_us[i]
    }
}

struct Bench {
    a: Args,
    dir: std::path::PathBuf,
    up: String,
    far: String,
    ns: vnio_lab::Netns,
    peer_ip: Ipv4Address,
    net: u8,
}

impl Bench {
    /// One configuration at one rate (`None`: as fast as the generator goes).
    fn run(&self, queues: usize, rate_pps: Option<f64>) -> Result<Row, Box<dyn std::error::Error>> {
        let a = &self.a;
        let cfg = format!(
            "[switch]\ncontrol = \"{ctl}\"\nidle_polls = 4294967295\n\n\
             [[port]]\nname = \"lat\"\nkind = \"vhost-user\"\nsocket = \"{lat}\"\nmac = \"{LAT_MAC}\"\n\n\
             [[port]]\nname = \"nbr\"\nkind = \"vhost-user\"\nsocket = \"{nbr}\"\nmac = \"{NBR_MAC}\"\n\n\
             [[port]]\nname = \"up\"\nkind = \"uplink\"\nifname = \"{up}\"\nqueues = {queues}\n",
            ctl = self.dir.join("ctl.sock").display(),
            lat = self.dir.join("lat.sock").display(),
            nbr = self.dir.join("nbr.sock").display(),
            up = self.up,
        );
        std::fs::write(self.dir.join("switch.toml"), cfg)?;
        let _sw = SwitchProc(
            Command::new("taskset")
                .args(["-c", &a.switch_cpu, &a.vnio, "switch", "--config"])
                .arg(self.dir.join("switch.toml"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        let lat_ip = Ipv4Address([10, 78, self.net, 2]);
        let mut lat = Endpoint::connect(
            &self.dir.join("lat.sock"),
            EndpointConfig::new(LAT_MAC, lat_ip),
        )?;
        let mut nbr = Endpoint::connect(
            &self.dir.join("nbr.sock"),
            EndpointConfig::new(NBR_MAC, Ipv4Address([10, 78, self.net, 3])),
        )?;
        let far = self.far.clone();
        let mut gen = self.ns.run(move || UplinkPort::new(&far))??;
        lat.resolve(self.peer_ip, Duration::from_secs(3))?;
        let mut frame = vec![0u8; HDR_LEN + FRAME];
        let payload = vec![0x5a; FRAME - 42];
        build_udp(
            &mut frame[HDR_LEN..],
            NBR_MAC,
            GEN_MAC,
            self.peer_ip,
            Ipv4Address([10, 78, self.net, 3]),
            9,
            9,
            &payload,
        )
        .ok_or("flood frame")?;
        // Let the switch learn the generator's address (it floods until then).
        gen.send_frame(&frame);
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = vec![0u8; 4096];
        while nbr.poll_recv(&mut buf).is_some() {}

        let warm = Duration::from_millis(300);
        let window = Duration::from_secs_f64(a.secs);
        let ping_every = Duration::from_micros(a.ping_us);
        let t0 = Instant::now();
        let (mut sent, mut got) = (0u64, 0u64);
        let (mut base_sent, mut base_got) = (0u64, 0u64);
        let mut rtts = Vec::with_capacity(20_000);
        let mut lost = 0u32;
        let mut seq: u16 = 0;
        let mut outstanding: Option<(u16, Instant)> = None;
        let mut next_ping = t0 + warm;
        let mut counting = false;
        loop {
            let now = Instant::now();
            let el = now - t0;
            if !counting && el >= warm {
                counting = true;
                (base_sent, base_got) = (sent, got);
            }
            if el >= warm + window {
                break;
            }
            // The flood: in bursts of `burst` frames at the paced rate, as
            // netperf's burst-and-interval streams in the studies.
            let due = match rate_pps {
                Some(r) => (el.as_secs_f64() * r) as u64 / a.burst * a.burst,
                None => sent + 64,
            };
            let mut batch = 0;
            while sent < due && batch < 64 {
                let Some(slot) = gen.tx_buf(frame.len()) else {
                    break;
                };
                slot[..frame.len()].copy_from_slice(&frame);
                gen.tx_commit(frame.len());
                sent += 1;
                batch += 1;
            }
            gen.flush();
            // The neighbour consumes what reached it.
            for _ in 0..64 {
                if nbr.poll_recv(&mut buf).is_none() {
                    break;
                }
                got += 1;
            }
            // The probe: one echo request in flight.
            match outstanding {
                None if counting && now >= next_ping => {
                    seq = seq.wrapping_add(1);
                    lat.ping(self.peer_ip, 0x4e51, seq, b"netqueue probe")?;
                    outstanding = Some((seq, Instant::now()));
                    next_ping = now + ping_every;
                }
                Some((_, t)) if now - t > Duration::from_millis(50) => {
                    lost += 1;
                    outstanding = None;
                }
                _ => {}
            }
            while let Some(ev) = lat.poll() {
                if let (Event::EchoReply { seq: s, .. }, Some((want, t))) = (ev, outstanding) {
                    if s == want {
                        rtts.push(t.elapsed().as_secs_f64() * 1e6);
                        outstanding = None;
                    }
                }
            }
        }
        rtts.sort_by(f64::total_cmp);
        Ok(Row {
            offered_kpps: (sent - base_sent) as f64 / a.secs / 1e3,
            received_kpps: (got - base_got) as f64 / a.secs / 1e3,
            rtts_us: rtts,
            lost,
        })
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("netqueue_hol: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let id = std::process::id() % 10_000;
    let net = (id % 200) as u8 + 20;
    let (up, far) = (format!("vnhu{id}"), format!("vnhf{id}"));
    let ns = vnio_lab::Netns::create(&format!("vnio-hol-{id}"))?;
    let mut h = vnio_lab::Handle::root()?;
    let _veth = h.add_veth(&up, &far, Some(&ns))?;
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{up}/disable_ipv6"), "1");
    h.set_up(&up)?;
    let peer_ip = Ipv4Address([10, 78, net, 1]);
    {
        let mut nh = ns.handle()?;
        nh.add_address(&far, IpAddr::V4(Ipv4Addr::from(peer_ip.0)), 24)?;
        nh.set_up(&far)?;
    }
    let _ = ns.set_sysctl(&format!("net.ipv6.conf.{far}.disable_ipv6"), "1");
    let dir = std::env::temp_dir().join(format!("vnio-hol-{id}"));
    std::fs::create_dir_all(&dir)?;
    let b = Bench {
        a,
        dir,
        up,
        far,
        ns,
        peer_ip,
        net,
    };

    let max_kpps = match b.a.max_kpps {
        Some(m) => m,
        None => {
            // The highest rate the generator reaches with the neighbour
            // draining, own queues (the flood's path is the same in both).
            let r = b.run(3, None)?;
            println!(
                "calibration: generator unpaced {:.0} Kpps offered, {:.0} Kpps received",
                r.offered_kpps, r.received_kpps
            );
            (r.offered_kpps / 10.0).floor() * 10.0
        }
    };
    println!(
        "{:>9} | {:>36} | {:>36}",
        "", "shared queue (queues = 1)", "own queue (queues = 3)"
    );
    println!(
        "{:>9} | {:>8} {:>6} {:>6} {:>6} {:>6} | {:>8} {:>6} {:>6} {:>6} {:>6}",
        "Kpps", "nbr Kpps", "p50", "p90", "p99", "lost", "nbr Kpps", "p50", "p90", "p99", "lost"
    );
    for step in 0..=b.a.steps {
        let kpps = max_kpps * f64::from(step) / f64::from(b.a.steps);
        let rate = Some(kpps * 1e3);
        let shared = b.run(1, rate)?;
        let own = b.run(3, rate)?;
        let cell = |r: &Row| {
            format!(
                "{:>8.0} {:>6.1} {:>6.1} {:>6.1} {:>6}",
                r.received_kpps,
                r.pct(0.5),
                r.pct(0.9),
                r.pct(0.99),
                r.lost
            )
        };
        println!(
            "{:>9.0} | {} | {}",
            shared.offered_kpps.max(own.offered_kpps),
            cell(&shared),
            cell(&own),
        );
    }
    let _ = std::fs::remove_dir_all(&b.dir);
    Ok(())
}
