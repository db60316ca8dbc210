//! Head-of-line blocking on a shared uplink receive queue (the studies'
//! NetQueue experiment): a latency vNIC pings a peer namespace's kernel
//! across the uplink while a neighbour vNIC receives a 256-byte UDP flood
//! from that namespace, at rates from 0 up to the highest the generator
//! reaches. At each rate the uplink runs with one (shared) receive queue and
//! with a queue per vNIC, one after the other, each time with a fresh switch.
//!
//! Who runs where (2 CPUs are enough):
//! - the switch, `vnio switch` (a child process), pinned to `--switch-cpu`,
//!   busy-polling;
//! - the flood, a thread pinned to `--cpu` and alone there: an AF_PACKET
//!   transmit ring with PACKET_QDISC_BYPASS on the peer's end of the veth,
//!   bursts of `--burst` frames on an absolute schedule (netperf's burst and
//!   interval), flushed 8 frames at a time (the kernel delivers each frame
//!   into the switch's ring inside that `send`); the same thread drains the
//!   neighbour when it is a poll-mode endpoint;
//! - the probe, a thread pinned to the switch's CPU under SCHED_FIFO,
//!   asleep but for its pings: one ICMP echo every `--ping-us` on average
//!   (uniformly 0.5 to 1.5 times it), woken by
//!   the latency port's call (its coalescing is off). It takes the switch's
//!   CPU a few µs per ping and never stops the flood, so the reply lands in
//!   its receive ring among the flood's frames, as on a real uplink.
//!
//! The neighbour is a poll-mode endpoint (a vhost-user port, the studies'
//! paravirtual vNIC) or, with `--neighbour tap`, a tap port in a namespace
//! of its own with a UDP socket nobody reads: the kernel's receive path runs
//! in the switch's `write`, which makes each neighbour frame cost the switch
//! microseconds instead of a copy.
//!
//! First, per configuration, the two rates that decide whether a backlog can
//! build: the generator's (the switch stopped with SIGSTOP, the generator's
//! frames timed into its ring) and the switch's (let go with SIGCONT, the
//! frames timed out of the ring into the neighbour).
//!
//! `netqueue_hol --vnio PATH [--neighbour vhost-user|tap] [--steps 8]
//! [--secs 3] [--max-kpps N] [--burst 32] [--ping-us 200] [--switch-cpu 0]
//! [--cpu 1] [--idle-polls N] [--capacity-only]` (root; through
//! `bench/netqueue.sh`).

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vnio_switch::control::{Client, Request};
use vnio_switch::endpoint::stack::{build_udp, Event};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::uplink::{UplinkOptions, UplinkPort, HDR_LEN};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Neighbour {
    VhostUser,
    Tap,
}

struct Args {
    vnio: String,
    neighbour: Neighbour,
    capacity_only: bool,
    idle_polls: u32,
    steps: u32,
    secs: f64,
    max_kpps: Option<f64>,
    switch_cpu: usize,
    cpu: usize,
    ping_us: u64,
    burst: u64,
    /// Percent of the switch's CPU left to the switch (100: all of it).
    switch_share: u32,
    /// The switch's frames per queue per polling round.
    budget: u32,
    /// The latency port is latency-high with its worker on this core (the
    /// switch may use it too; the probe moves there).
    latency_high: Option<usize>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        vnio: String::new(),
        neighbour: Neighbour::VhostUser,
        capacity_only: false,
        idle_polls: u32::MAX,
        steps: 8,
        secs: 3.0,
        max_kpps: None,
        switch_cpu: 0,
        cpu: 1,
        ping_us: 200,
        burst: 32,
        switch_share: 100,
        budget: 64,
        latency_high: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--capacity-only" {
            a.capacity_only = true;
            continue;
        }
        let v = it.next().ok_or(format!("{k} needs a value"))?;
        let num = |s: &str| s.parse::<f64>().map_err(|e| format!("{k}: {e}"));
        match k.as_str() {
            "--vnio" => a.vnio = v,
            "--neighbour" => {
                a.neighbour = match v.as_str() {
                    "vhost-user" => Neighbour::VhostUser,
                    "tap" => Neighbour::Tap,
                    _ => return Err(format!("--neighbour {v}: vhost-user or tap")),
                }
            }
            "--idle-polls" => a.idle_polls = num(&v)? as u32,
            "--budget" => a.budget = (num(&v)? as u32).max(1),
            "--steps" => a.steps = (num(&v)? as u32).max(1),
            "--secs" => a.secs = num(&v)?,
            "--max-kpps" => a.max_kpps = Some(num(&v)?),
            "--switch-cpu" => a.switch_cpu = num(&v)? as usize,
            "--cpu" => a.cpu = num(&v)? as usize,
            "--latency-high" => a.latency_high = Some(num(&v)? as usize),
            "--ping-us" => a.ping_us = num(&v)? as u64,
            "--burst" => a.burst = (num(&v)? as u64).max(1),
            "--switch-share" => {
                a.switch_share = num(&v)? as u32;
                if !(1..=100).contains(&a.switch_share) {
                    return Err(format!("--switch-share {v}: a percent, 1 to 100"));
                }
            }
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.vnio.is_empty() {
        return Err("--vnio PATH is required".into());
    }
    Ok(a)
}

/// Period of the CPU taken from the switch under `--switch-share`.
const SHARE_PERIOD: Duration = Duration::from_micros(100);

/// Leaves the switch `share` percent of its CPU until `stop`: a SCHED_FIFO
/// thread on that CPU (below the probe's priority, so the probe still runs
/// at once) spins for the rest of every 100 µs and sleeps its share. The
/// switch then forwards in windows of a few µs, at that fraction of its
/// rate: a vSwitch near its capacity, at a granularity far below the
/// scheduler's time slices (which would stall it for milliseconds instead).
fn take_cpu(cpu: usize, share: u32, stop: &AtomicBool) -> Result<(), String> {
    if share >= 100 {
        return Ok(());
    }
    vnio_switch::cpu::pin_current_thread(&[cpu]).map_err(|e| e.to_string())?;
    vnio_switch::cpu::realtime_current_thread(5)
        .map_err(|e| format!("--switch-share needs SCHED_FIFO: {e}"))?;
    let busy = SHARE_PERIOD * (100 - share) / 100;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        next += SHARE_PERIOD;
        let until = next - (SHARE_PERIOD - busy);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Late (the thread was held): start a fresh period.
            next = now;
        }
    }
    Ok(())
}

/// The switch process, stopped on drop.
struct SwitchProc(Child);

impl SwitchProc {
    fn signal(&self, sig: &str) -> std::io::Result<()> {
        Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .map(|_| ())
    }
}

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
/// Frames per `send` of the generator: the kernel delivers them inside it,
/// without being preempted, so the probe's wake-up never waits long.
const FLUSH: u64 = 8;
/// An echo without a reply in this long is lost.
const PROBE_TIMEOUT: Duration = Duration::from_millis(50);

/// A running switch and everything attached to it.
struct Setup {
    sw: SwitchProc,
    lat: Endpoint,
    nbr: Option<Endpoint>,
    /// The tap neighbour's socket (kept open; never read).
    _sink: Option<UdpSocket>,
    gen: UplinkPort,
    frame: Vec<u8>,
}

/// What one configuration at one rate measured.
struct Row {
    offered_kpps: f64,
    delivered_kpps: f64,
    ring_drops: u64,
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

/// Rates measured with the switch stopped, then let go.
struct Capacity {
    /// Frames per second the generator hands the kernel (the kernel
    /// delivering each into the switch's ring inside the send).
    gen_pps: f64,
    /// Frames per second the switch moves from a full ring to the
    /// neighbour (first to last arrival at a poll-mode neighbour; for a tap
    /// neighbour from the switch's delivered counter).
    drain_pps: f64,
}

struct Bench {
    a: Args,
    dir: std::path::PathBuf,
    id: u32,
    up: String,
    far: String,
    ns: vnio_lab::Netns,
    nbr_ns: vnio_lab::Netns,
    peer_ip: Ipv4Address,
    net: u8,
}

impl Bench {
    fn nbr_ip(&self) -> Ipv4Address {
        Ipv4Address([10, 78, self.net, 3])
    }

    fn tap_name(&self) -> String {
        format!("vnhn{}", self.id)
    }

    /// Starts the switch with an uplink of `queues` receive queues and
    /// connects both vNICs and the generator; the switch knows where the
    /// generator is.
    fn start(&self, queues: usize) -> Result<Setup, Box<dyn std::error::Error>> {
        let nbr_port = match self.a.neighbour {
            Neighbour::VhostUser => format!(
                "kind = \"vhost-user\"\nsocket = \"{}\"",
                self.dir.join("nbr.sock").display()
            ),
            Neighbour::Tap => format!("kind = \"tap\"\nifname = \"{}\"", self.tap_name()),
        };
        let cfg = format!(
            "[switch]\ncontrol = \"{ctl}\"\nidle_polls = {idle}\nbudget = {budget}\n\n\
             [[port]]\nname = \"lat\"\nkind = \"vhost-user\"\nsocket = \"{lat}\"\nmac = \"{LAT_MAC}\"\ncoalesce = \"off\"\n{lat_high}\n\
             [[port]]\nname = \"nbr\"\n{nbr_port}\nmac = \"{NBR_MAC}\"\n\n\
             [[port]]\nname = \"up\"\nkind = \"uplink\"\nifname = \"{up}\"\nqueues = {queues}\n",
            ctl = self.dir.join("ctl.sock").display(),
            idle = self.a.idle_polls,
            budget = self.a.budget,
            lat = self.dir.join("lat.sock").display(),
            up = self.up,
            lat_high = self
                .a
                .latency_high
                .map_or(String::new(), |c| format!("latency = \"high\"\ncore = {c}\n")),
        );
        let switch_cpus = match self.a.latency_high {
            Some(c) => format!("{},{c}", self.a.switch_cpu),
            None => self.a.switch_cpu.to_string(),
        };
        std::fs::write(self.dir.join("switch.toml"), cfg)?;
        let sw = SwitchProc(
            Command::new("taskset")
                .args(["-c", &switch_cpus, &self.a.vnio])
                .args(["switch", "--config"])
                .arg(self.dir.join("switch.toml"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        let mut lat = Endpoint::connect(
            &self.dir.join("lat.sock"),
            EndpointConfig::new(LAT_MAC, Ipv4Address([10, 78, self.net, 2])),
        )?;
        let (nbr, sink) = match self.a.neighbour {
            Neighbour::VhostUser => {
                // A deep receive ring: the neighbour keeps up even when the
                // switch hands over a whole ring at once.
                let mut c = EndpointConfig::new(NBR_MAC, self.nbr_ip());
                c.queue_size = 4096;
                (
                    Some(Endpoint::connect(&self.dir.join("nbr.sock"), c)?),
                    None,
                )
            }
            Neighbour::Tap => (None, Some(self.tap_into_namespace()?)),
        };
        let far = self.far.clone();
        let opts = UplinkOptions {
            qdisc_bypass: true,
            rx_frames: 64,
            ..Default::default()
        };
        let mut gen = self.ns.run(move || UplinkPort::open(&far, &opts))??;
        lat.resolve(self.peer_ip, Duration::from_secs(3))?;
        let mut frame = vec![0u8; HDR_LEN + FRAME];
        build_udp(
            &mut frame[HDR_LEN..],
            NBR_MAC,
            GEN_MAC,
            self.peer_ip,
            self.nbr_ip(),
            9,
            9,
            &[0x5a; FRAME - 42],
        )
        .ok_or("flood frame")?;
        // The switch learns the generator's address (it floods until then).
        gen.send_frame(&frame);
        std::thread::sleep(Duration::from_millis(50));
        let mut setup = Setup {
            sw,
            lat,
            nbr,
            _sink: sink,
            gen,
            frame,
        };
        if let Some(n) = setup.nbr.as_mut() {
            let mut buf = [0u8; 2048];
            while n.poll_recv(&mut buf).is_some() {}
        }
        Ok(setup)
    }

    /// Moves the switch's tap into the neighbour's namespace, gives it the
    /// neighbour's MAC and address, and opens the UDP socket the flood goes
    /// to (never read: the kernel drops what its buffer cannot hold).
    fn tap_into_namespace(&self) -> Result<UdpSocket, Box<dyn std::error::Error>> {
        let tap = self.tap_name();
        let mut h = vnio_lab::Handle::root()?;
        let t = Instant::now();
        while h.link(&tap)?.is_none() {
            if t.elapsed() > Duration::from_secs(3) {
                return Err(format!("the switch made no tap {tap}").into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        h.move_to(&tap, &self.nbr_ns)?;
        let ok = self
            .nbr_ns
            .command("ip")
            .args(["link", "set", "dev", &tap, "address", &NBR_MAC.to_string()])
            .status()?
            .success();
        if !ok {
            return Err(format!("cannot set {tap}'s address").into());
        }
        let mut nh = self.nbr_ns.handle()?;
        nh.add_address(&tap, IpAddr::V4(Ipv4Addr::from(self.nbr_ip().0)), 24)?;
        nh.set_up(&tap)?;
        let _ = self
            .nbr_ns
            .set_sysctl(&format!("net.ipv6.conf.{tap}.disable_ipv6"), "1");
        Ok(self.nbr_ns.run(|| UdpSocket::bind("0.0.0.0:9"))??)
    }

    /// The switch's service rate and the generator's, `reps` times: the
    /// switch is stopped (SIGSTOP), the generator puts `n` frames into its
    /// ring (timed), the switch is let go (SIGCONT) and their arrival at the
    /// neighbour is timed.
    fn capacity(
        &self,
        queues: usize,
        n: usize,
        reps: usize,
    ) -> Result<Vec<Capacity>, Box<dyn std::error::Error>> {
        let mut s = self.start(queues)?;
        let stop = AtomicBool::new(false);
        // On the generator's CPU, as in the sweep, with the switch's share
        // as in the sweep.
        std::thread::scope(|sc| {
            let thief = sc.spawn(|| take_cpu(self.a.switch_cpu, self.a.switch_share, &stop));
            let r = sc
                .spawn(|| self.capacity_on(&mut s, n, reps))
                .join()
                .map_err(|_| "capacity panicked");
            stop.store(true, Ordering::Relaxed);
            thief.join().map_err(|_| "take_cpu panicked")??;
            r?.map_err(|e| e.to_string().into())
        })
    }

    fn capacity_on(
        &self,
        s: &mut Setup,
        n: usize,
        reps: usize,
    ) -> Result<Vec<Capacity>, Box<dyn std::error::Error + Send + Sync>> {
        vnio_switch::cpu::pin_current_thread(&[self.a.cpu])?;
        let mut buf = vec![0u8; 4096];
        let mut out = Vec::new();
        // A tap neighbour's frames are counted by the switch (read before
        // it stops: a stopped switch does not answer).
        let mut ctl = match s.nbr {
            None => Some(Client::connect(&self.dir.join("ctl.sock")).map_err(|e| e.to_string())?),
            Some(_) => None,
        };
        let mut delivered = move || -> Result<u64, String> {
            let Some(c) = ctl.as_mut() else { return Ok(0) };
            let v = c
                .request(&Request::Stats { name: None })
                .map_err(|e| e.to_string())?;
            Ok(v["nbr"]["rx"]["packets"].as_u64().unwrap_or(0))
        };
        for _ in 0..reps {
            let base = delivered()?;
            s.sw.signal("-STOP")?;
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            let mut sent = 0;
            while sent < n {
                for _ in 0..FLUSH.min((n - sent) as u64) {
                    let Some(slot) = s.gen.tx_buf(s.frame.len()) else {
                        break;
                    };
                    slot[..s.frame.len()].copy_from_slice(&s.frame);
                    s.gen.tx_commit(s.frame.len());
                    sent += 1;
                }
                s.gen.flush();
            }
            let gen_s = t.elapsed().as_secs_f64();
            s.sw.signal("-CONT")?;
            let mut drain_pps = f64::NAN;
            if let Some(nbr) = s.nbr.as_mut() {
                let (mut first, mut last, mut got) = (None, Instant::now(), 0usize);
                let deadline = Instant::now() + Duration::from_millis(500);
                while got < n && Instant::now() < deadline {
                    if nbr.poll_recv(&mut buf).is_some() {
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                        got += 1;
                    }
                }
                if got < n {
                    eprintln!("capacity: {got} of {n} frames reached the neighbour");
                }
                if let Some(f) = first {
                    drain_pps = got.saturating_sub(1) as f64 / (last - f).as_secs_f64();
                }
            } else {
                // A tap neighbour: the switch's counter of frames delivered,
                // read as often as the control socket answers (a few
                // hundred µs apart: enough over a ring that takes ms). The
                // first reading already counts frames: the rate is taken
                // from it to the last.
                let mut first: Option<(Instant, u64)> = None;
                let (mut last, mut got) = (Instant::now(), 0);
                let deadline = Instant::now() + Duration::from_millis(500);
                while got < n as u64 && Instant::now() < deadline {
                    let d = delivered()? - base;
                    let now = Instant::now();
                    if d > got {
                        first.get_or_insert((now, d));
                        last = now;
                        got = d;
                    }
                }
                if let Some((f, d0)) = first {
                    if last > f {
                        drain_pps = (got - d0) as f64 / (last - f).as_secs_f64();
                    }
                }
            }
            out.push(Capacity {
                gen_pps: n as f64 / gen_s,
                drain_pps,
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(out)
    }

    /// Frames delivered to the neighbour port and frames the kernel dropped
    /// at the uplink's full rings, from the switch's counters.
    fn counters(&self) -> Result<(u64, u64), Box<dyn std::error::Error>> {
        let mut c = Client::connect(&self.dir.join("ctl.sock"))?;
        let v = c.request(&Request::Stats { name: None })?;
        let delivered = v["nbr"]["rx"]["packets"].as_u64().unwrap_or(0);
        let drops = v["up"]["uplink_queues"].as_array().map_or(0, |qs| {
            qs.iter().filter_map(|q| q["kernel_drops"].as_u64()).sum()
        });
        Ok((delivered, drops))
    }

    /// One configuration at one rate (`None`: as fast as the generator goes).
    fn run(&self, queues: usize, rate_pps: Option<f64>) -> Result<Row, Box<dyn std::error::Error>> {
        let a = &self.a;
        let Setup {
            sw: _sw,
            mut lat,
            mut nbr,
            _sink,
            mut gen,
            frame,
        } = self.start(queues)?;
        let warm = Duration::from_millis(300);
        let window = Duration::from_secs_f64(a.secs);
        let stop = AtomicBool::new(false);
        let counting = AtomicBool::new(false);
        let (c0, probe, flood, thief) = std::thread::scope(|sc| {
            let thief = sc.spawn(|| take_cpu(a.switch_cpu, a.switch_share, &stop));
            let flood = sc.spawn(|| -> Result<(u64, Duration), String> {
                vnio_switch::cpu::pin_current_thread(&[a.cpu]).map_err(|e| e.to_string())?;
                let mut buf = [0u8; 2048];
                let t0 = Instant::now();
                let mut sent = 0u64;
                let mut base: Option<(u64, Instant)> = None;
                while !stop.load(Ordering::Relaxed) {
                    if base.is_none() && counting.load(Ordering::Relaxed) {
                        base = Some((sent, Instant::now()));
                    }
                    // Bursts of `burst` frames at the paced rate, each due
                    // whole at its instant (no catching up after a stall
                    // beyond what is due).
                    let due = match rate_pps {
                        Some(r) => (t0.elapsed().as_secs_f64() * r) as u64 / a.burst * a.burst,
                        None => sent + FLUSH,
                    };
                    while sent < due {
                        for _ in 0..FLUSH.min(due - sent) {
                            let Some(slot) = gen.tx_buf(frame.len()) else {
                                break;
                            };
                            slot[..frame.len()].copy_from_slice(&frame);
                            gen.tx_commit(frame.len());
                            sent += 1;
                        }
                        gen.flush();
                        if let Some(n) = nbr.as_mut() {
                            while n.poll_recv(&mut buf).is_some() {}
                        }
                    }
                    if let Some(n) = nbr.as_mut() {
                        while n.poll_recv(&mut buf).is_some() {}
                    }
                    // Sharing its CPU with the switch's shared worker
                    // (latency high), it sleeps to its next burst rather
                    // than spin the worker out of its time slice.
                    if let (Some(r), Some(_), None) = (rate_pps, a.latency_high, nbr.as_ref()) {
                        let next = (sent + a.burst) as f64 / r;
                        let wait = next - t0.elapsed().as_secs_f64();
                        if wait > 20e-6 {
                            // At most 1 ms: the stop flag is read between.
                            std::thread::sleep(Duration::from_secs_f64(wait.min(1e-3)));
                        }
                    }
                }
                let (b, t) = base.unwrap_or((sent, Instant::now()));
                Ok((sent - b, t.elapsed()))
            });
            std::thread::sleep(warm);
            let c0 = self.counters();
            counting.store(true, Ordering::Relaxed);
            let probe = sc.spawn(|| -> Result<(Vec<f64>, u32), String> {
                vnio_switch::cpu::pin_current_thread(&[a.latency_high.unwrap_or(a.switch_cpu)])
                    .map_err(|e| e.to_string())?;
                if let Err(e) = vnio_switch::cpu::realtime_current_thread(10) {
                    eprintln!("probe: no real-time priority ({e}): its wake-ups wait for the switch's time slice");
                }
                let mut rtts = Vec::with_capacity(20_000);
                let mut lost = 0u32;
                let every = Duration::from_micros(a.ping_us);
                let end = Instant::now() + window;
                let mut next = Instant::now();
                let mut seq: u16 = 0;
                let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
                while Instant::now() < end {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    // Intervals drawn uniformly from 0.5 to 1.5 times
                    // `--ping-us` (xorshift): a fixed interval could lock
                    // onto a period on the switch's CPU (`--switch-share`)
                    // and sample only one phase of it.
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    next += every.mul_f64(0.5 + (rng >> 11) as f64 / (1u64 << 53) as f64);
                    seq = seq.wrapping_add(1);
                    let sent = Instant::now();
                    lat.ping(self.peer_ip, 0x4e51, seq, b"netqueue probe")
                        .map_err(|e| e.to_string())?;
                    let got = loop {
                        if let Some(ev) = lat.poll() {
                            if matches!(ev, Event::EchoReply { seq: s, .. } if s == seq) {
                                break true;
                            }
                            continue;
                        }
                        if sent.elapsed() > PROBE_TIMEOUT {
                            break false;
                        }
                        lat.wait(Duration::from_millis(10)).map_err(|e| e.to_string())?;
                    };
                    if got {
                        rtts.push(sent.elapsed().as_secs_f64() * 1e6);
                    } else {
                        lost += 1;
                    }
                    // A late reply does not count against the next echo.
                    while lat.poll().is_some() {}
                }
                Ok((rtts, lost))
            });
            let probe = probe.join();
            stop.store(true, Ordering::Relaxed);
            (c0, probe, flood.join(), thief.join())
        });
        thief.map_err(|_| "take_cpu panicked")??;
        let c1 = self.counters()?;
        let c0 = c0?;
        let (mut rtts, lost) = probe.map_err(|_| "probe panicked")??;
        let (sent, took) = flood.map_err(|_| "flood panicked")??;
        rtts.sort_by(f64::total_cmp);
        let secs = took.as_secs_f64();
        Ok(Row {
            offered_kpps: sent as f64 / secs / 1e3,
            delivered_kpps: c1.0.saturating_sub(c0.0) as f64 / secs / 1e3,
            ring_drops: c1.1.saturating_sub(c0.1),
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let id = std::process::id() % 10_000;
    let net = (id % 200) as u8 + 20;
    let (up, far) = (format!("vnhu{id}"), format!("vnhf{id}"));
    let ns = vnio_lab::Netns::create(&format!("vnio-hol-{id}"))?;
    let nbr_ns = vnio_lab::Netns::create(&format!("vnio-holn-{id}"))?;
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
        id,
        up,
        far,
        ns,
        nbr_ns,
        peer_ip,
        net,
    };
    let result = sweep(&b);
    let _ = std::fs::remove_dir_all(&b.dir);
    result
}

fn sweep(b: &Bench) -> Result<(), Box<dyn std::error::Error>> {
    for q in [1, 3] {
        if b.a.latency_high.is_some() {
            println!(
                "capacity not measured: the generator shares CPU 0 with the switch's shared worker (latency high), so its rates are not the switch's"
            );
            break;
        }
        let c = b.capacity(q, 1536, 7)?;
        let gen: Vec<f64> = c.iter().map(|c| c.gen_pps / 1e3).collect();
        let drain: Vec<f64> = c.iter().map(|c| c.drain_pps / 1e3).collect();
        println!(
            "capacity, queues = {q}: generator -> the switch's ring {:.0} Kpps; switch: ring -> neighbour {:.0} Kpps (medians of {}; generator {:?}, switch {:?})",
            median(gen.clone()),
            median(drain.clone()),
            c.len(),
            gen.iter().map(|v| *v as u32).collect::<Vec<_>>(),
            drain.iter().map(|v| *v as u32).collect::<Vec<_>>(),
        );
    }
    if b.a.capacity_only {
        return Ok(());
    }
    let max_kpps = match b.a.max_kpps {
        Some(m) => m,
        None => {
            // The highest rate the generator reaches (the flood's path is
            // the same in both configurations).
            let r = b.run(3, None)?;
            println!(
                "calibration: generator unpaced {:.0} Kpps offered, {:.0} Kpps delivered to the neighbour",
                r.offered_kpps, r.delivered_kpps
            );
            (r.offered_kpps / 10.0).floor() * 10.0
        }
    };
    println!(
        "{:>6} | {:>45} | {:>45}",
        "", "shared queue (queues = 1)", "own queue (queues = 3)"
    );
    let head = format!(
        "{:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5}",
        "offer", "deliv", "drops", "p50", "p90", "p99", "lost"
    );
    println!("{:>6} | {head} | {head}", "Kpps");
    for step in 0..=b.a.steps {
        let kpps = max_kpps * f64::from(step) / f64::from(b.a.steps);
        let rate = Some(kpps * 1e3);
        let shared = b.run(1, rate)?;
        let own = b.run(3, rate)?;
        let cell = |r: &Row| {
            format!(
                "{:>6.0} {:>6.0} {:>6} {:>6.1} {:>6.1} {:>6.1} {:>5}",
                r.offered_kpps,
                r.delivered_kpps,
                r.ring_drops,
                r.pct(0.5),
                r.pct(0.9),
                r.pct(0.99),
                r.lost
            )
        };
        println!("{kpps:>6.0} | {} | {}", cell(&shared), cell(&own));
    }
    Ok(())
}
