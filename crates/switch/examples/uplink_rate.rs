//! Packet rate through an uplink port, both directions, for one `vnio`
//! binary: a veth pair (created through netlink, removed at the end), the
//! switch as a child process with an uplink on one end and a vhost-user
//! port, and this process driving the other end and a poll-mode endpoint.
//!
//! - wire->vNIC: frames written into an AF_PACKET TX ring on the far end of
//!   the veth, counted as the endpoint receives them.
//! - vNIC->wire: the endpoint sends as fast as its ring takes frames,
//!   counted by the veth's own transmit counter on the switch's end.
//!
//! Build the `vnio` binaries to compare, then run this once per binary
//! with the switch and this process on different cores (it pins the
//! switch to CPU 0; run it under `taskset -c 1`). Root only. The lab's
//! `uplink-rate` scenario measures the same path end to end.
//!
//! `uplink_rate --vnio PATH --label NAME [--secs 3] [--len 60] [--qdisc-bypass] [--direct]`

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::uplink::{Rx, UplinkPort, HDR_LEN};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

struct Args {
    vnio: String,
    label: String,
    secs: f64,
    len: usize,
    switch_cpu: String,
    qdisc_bypass: bool,
    idle_polls: u32,
    direct: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        vnio: String::new(),
        label: "vnio".into(),
        secs: 3.0,
        len: 60,
        switch_cpu: "0".into(),
        qdisc_bypass: false,
        idle_polls: 64,
        direct: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--vnio" => a.vnio = v()?,
            "--label" => a.label = v()?,
            "--secs" => a.secs = v()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--len" => a.len = v()?.parse().map_err(|e| format!("--len: {e}"))?,
            "--switch-cpu" => a.switch_cpu = v()?,
            "--qdisc-bypass" => a.qdisc_bypass = true,
            "--direct" => a.direct = true,
            "--idle-polls" => {
                a.idle_polls = v()?.parse().map_err(|e| format!("--idle-polls: {e}"))?
            }
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

fn counter(ifname: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/statistics/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) of process `pid`, in seconds.
fn cpu_secs(pid: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name: state is field 3; utime and stime are 14 and 15.
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

/// One measurement window's counts.
struct Window {
    frames: u64,
    offered: u64,
    secs: f64,
    switch_cpu: f64,
    driver_cpu: f64,
}

impl Window {
    fn print(&self, label: &str, dir: &str, len: usize) {
        let f = self.frames.max(1) as f64;
        println!(
            "{label} {dir} len={len} {:.3} Mpps (offered {:.3}) switch {:.2} us/frame, driver {:.2} us/frame",
            self.frames as f64 / self.secs / 1e6,
            self.offered as f64 / self.secs / 1e6,
            self.switch_cpu / f * 1e6,
            self.driver_cpu / f * 1e6,
        );
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("uplink_rate: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let id = std::process::id() % 10_000;
    let (up, far) = (format!("vnur{id}"), format!("vnuf{id}"));
    let mut h = vnio_lab::Handle::root()?;
    let _veth = h.add_veth(&up, &far, None)?;
    for i in [&up, &far] {
        // No IPv6 chatter on the wire being measured.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1");
        h.set_up(i)?;
    }
    let dir = std::env::temp_dir().join(format!("vnio-uplink-rate-{id}"));
    std::fs::create_dir_all(&dir)?;
    let sock = dir.join("ep.sock");
    std::fs::write(dir.join("switch.toml"), switch_config(&a, &up, &dir, &sock))?;
    let sw = SwitchProc(
        Command::new("taskset")
            .args(["-c", &a.switch_cpu, &a.vnio, "switch", "--config"])
            .arg(dir.join("switch.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let mut bench = Bench::connect(&a, &sock, &far, sw.0.id().to_string())?;
    bench.round_trips()?;
    bench.wire_to_vnic();
    bench.vnic_to_wire(&up);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The switch's configuration: uplink `up` and the endpoint's port.
fn switch_config(a: &Args, up: &str, dir: &Path, sock: &Path) -> String {
    let bypass = if a.qdisc_bypass {
        "qdisc_bypass = true\n"
    } else {
        ""
    };
    // Direct mode: the vNIC bound to a receive queue of the uplink.
    let direct = if a.direct {
        "mac = \"02:00:00:00:00:01\"\ndirect = \"up\"\n"
    } else {
        ""
    };
    let queues = if a.direct { "queues = 2\n" } else { "" };
    format!(
        "[switch]\ncontrol = \"{}\"\nidle_polls = {}\n\n\
         [[port]]\nname = \"up\"\nkind = \"uplink\"\nifname = \"{up}\"\n{bypass}{queues}\n\
         [[port]]\nname = \"ep\"\nkind = \"vhost-user\"\nsocket = \"{}\"\n{direct}",
        dir.join("ctl.sock").display(),
        a.idle_polls,
        sock.display()
    )
}

/// The endpoint on the switch's vNIC and the far end of the wire, with
/// a frame for each direction.
struct Bench<'a> {
    a: &'a Args,
    ep: Endpoint,
    gen: UplinkPort,
    ep_mac: EthernetAddress,
    far_mac: EthernetAddress,
    /// To the endpoint, with the packet ring's header room.
    to_ep: Vec<u8>,
    to_far: Vec<u8>,
    buf: Vec<u8>,
    swpid: String,
}

impl<'a> Bench<'a> {
    /// Connects the endpoint, opens the far end and teaches the switch
    /// both addresses.
    fn connect(
        a: &'a Args,
        sock: &Path,
        far: &str,
        swpid: String,
    ) -> Result<Bench<'a>, Box<dyn std::error::Error>> {
        let ep_mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let far_mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let mut ep = Endpoint::connect(
            sock,
            EndpointConfig::new(ep_mac, Ipv4Address([10, 9, 0, 1])),
        )?;
        let mut gen = UplinkPort::new(far)?;

        let mut to_ep = vec![0u8; HDR_LEN + a.len];
        to_ep[HDR_LEN..HDR_LEN + 6].copy_from_slice(&ep_mac.0);
        to_ep[HDR_LEN + 6..HDR_LEN + 12].copy_from_slice(&far_mac.0);
        to_ep[HDR_LEN + 12..HDR_LEN + 14].copy_from_slice(&[0x88, 0xb5]);
        let mut to_far = vec![0x5au8; a.len];
        to_far[..6].copy_from_slice(&far_mac.0);
        to_far[6..12].copy_from_slice(&ep_mac.0);
        to_far[12..14].copy_from_slice(&[0x88, 0xb5]);
        // Teach the switch both addresses.
        ep.send_frame(&to_far)?;
        gen.send_frame(&to_ep);
        std::thread::sleep(Duration::from_millis(200));
        let mut buf = vec![0u8; 16384];
        while ep.poll_recv(&mut buf).is_some() {}
        Ok(Bench {
            a,
            ep,
            gen,
            ep_mac,
            far_mac,
            to_ep,
            to_far,
            buf,
            swpid,
        })
    }

    /// Round trips, one frame in flight: the endpoint sends to the far end,
    /// which answers from its ring at once; both polled by this thread.
    fn round_trips(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        let Bench {
            a,
            ep,
            gen,
            ep_mac,
            far_mac,
            to_ep,
            to_far,
            buf,
            ..
        } = self;
        let mut rtts = Vec::with_capacity(100_000);
        let mut back = to_ep.clone();
        let end = Instant::now() + Duration::from_secs_f64(a.secs.min(2.0));
        'rt: while Instant::now() < end {
            let t = Instant::now();
            ep.send_frame(to_far)?;
            let q = gen.queue_mut(0).ok_or("no far-end queue")?;
            loop {
                let hit = match q.peek() {
                    Some(Rx::Frame(f)) => f[HDR_LEN + 6..HDR_LEN + 12] == ep_mac.0,
                    Some(Rx::Unsupported) => false,
                    None => {
                        if t.elapsed() > Duration::from_millis(100) {
                            continue 'rt;
                        }
                        continue;
                    }
                };
                q.release();
                if hit {
                    break;
                }
            }
            back[HDR_LEN + 14] = back[HDR_LEN + 14].wrapping_add(1);
            gen.send_frame(&back);
            loop {
                if ep.poll_recv(buf).is_some() && buf[6..12] == far_mac.0 {
                    break;
                }
                if t.elapsed() > Duration::from_millis(100) {
                    continue 'rt;
                }
            }
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        rtts.sort_unstable();
        let pct = |p: f64| {
            rtts.get(((rtts.len() as f64 * p) as usize).min(rtts.len().saturating_sub(1)))
                .map_or(0.0, |&n| n as f64 / 1000.0)
        };
        println!(
            "{} round-trip len={} p50 {:.1} us p99 {:.1} us p99.9 {:.1} us ({} samples)",
            a.label,
            a.len,
            pct(0.5),
            pct(0.99),
            pct(0.999),
            rtts.len()
        );
        Ok(())
    }

    /// The far end sends bursts as fast as it can; the endpoint counts.
    fn wire_to_vnic(&mut self) {
        let Bench {
            a,
            ep,
            gen,
            to_ep,
            buf,
            swpid,
            ..
        } = self;
        let window = Duration::from_secs_f64(a.secs);
        let (mut got, mut sent) = (0u64, 0u64);
        let t0 = Instant::now();
        let (mut counting, mut tc) = (false, t0);
        let (mut c_sw, mut c_me) = (0.0, 0.0);
        loop {
            for _ in 0..32 {
                let Some(slot) = gen.tx_buf(to_ep.len()) else {
                    break;
                };
                slot[..to_ep.len()].copy_from_slice(to_ep);
                gen.tx_commit(to_ep.len());
                sent += 1;
            }
            gen.flush();
            while ep.poll_recv(buf).is_some() {
                got += 1;
            }
            let now = Instant::now();
            if !counting && now - t0 >= WARM {
                (counting, tc, got, sent) = (true, now, 0, 0);
                (c_sw, c_me) = (cpu_secs(swpid), cpu_secs("self"));
            }
            if counting && now - tc >= window {
                break;
            }
        }
        Window {
            frames: got,
            offered: sent,
            secs: tc.elapsed().as_secs_f64(),
            switch_cpu: cpu_secs(swpid) - c_sw,
            driver_cpu: cpu_secs("self") - c_me,
        }
        .print(&a.label, "wire->vnic", a.len);
        std::thread::sleep(Duration::from_millis(100));
        while ep.poll_recv(buf).is_some() {}
    }

    /// The endpoint sends bursts as fast as its ring takes them; uplink
    /// `up`'s counter says what reached the wire.
    fn vnic_to_wire(&mut self, up: &str) {
        let Bench {
            a,
            ep,
            to_far,
            swpid,
            ..
        } = self;
        let window = Duration::from_secs_f64(a.secs);
        let t0 = Instant::now();
        let (mut counting, mut tc, mut base) = (false, t0, 0);
        let mut offered = 0u64;
        let (mut c_sw, mut c_me) = (0.0, 0.0);
        loop {
            for _ in 0..32 {
                if ep.send_frame(to_far).is_err() {
                    break;
                }
                offered += 1;
            }
            let now = Instant::now();
            if !counting && now - t0 >= WARM {
                (counting, tc, base, offered) = (true, now, counter(up, "tx_packets"), 0);
                (c_sw, c_me) = (cpu_secs(swpid), cpu_secs("self"));
            }
            if counting && now - tc >= window {
                break;
            }
        }
        Window {
            frames: counter(up, "tx_packets") - base,
            offered,
            secs: tc.elapsed().as_secs_f64(),
            switch_cpu: cpu_secs(swpid) - c_sw,
            driver_cpu: cpu_secs("self") - c_me,
        }
        .print(&a.label, "vnic->wire", a.len);
    }
}

/// How long each rate test runs before it counts.
const WARM: Duration = Duration::from_millis(300);
