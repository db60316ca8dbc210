//! Does the control plane stall forwarding? A 64 B stream runs between
//! two ports of a live switch (poll-mode endpoints, per-frame send
//! stamps) while the control socket works, phase by phase:
//!
//! - `idle`: nothing (the baseline: what the host itself costs);
//! - `add-del`: CYCLES vhost-user ports added and deleted;
//! - `stats`: 100 reads a second of every port's counters, for 2 s;
//! - `big-del`: a front-end maps a sparse 16 GiB memfd into a port, which
//!   is then deleted (the switch unmaps it), 5 times.
//!
//! Per phase it prints the frames carried, the longest time a frame took
//! from its send to its arrival, and the longest gap between two arrivals
//! (the stream never pauses on its own). A stall of the worker shows as a
//! long gap in a control phase that the idle phase does not have; on a
//! shared 2-core host the idle phase's own maximum is the noise floor.
//!
//! What the switch itself controls is how long its worker stays away
//! from polling (a *hold*, `vnio_switch::perf`): per phase, from the
//! workers' counters read through the control socket (`Request::Perf`)
//! before and after it, the holds, the longest (exact when it is the
//! longest yet, else its power-of-two bucket), the holds of
//! 1 ms or more and the control commands the workers handled. The host's
//! preemption of the worker during a hold counts in it; the holds with
//! commands are also timed on the CPU (the thread's CPU time): their mean
//! and how many ran 1 ms or more on it, the switch's own work. The switch
//! warns of each of those on stderr, naming its slowest command.
//!
//! As `vnio switch` does, the example locks its pages into memory first
//! (`[switch] lock_memory`); `LOCK=0` leaves them unlocked. With `--cold`
//! the kernel's page cache is dropped before every phase (root): a phase
//! whose work needs a page of code from the disk then shows the wait.
//!
//! `cargo run --release -p vnio-switch --example stall [-- CYCLES] [--cold]` (1000).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vhost::vhost_user::Frontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::perf::{hold_bucket_label, PerfSnapshot};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::{EthernetAddress, Ipv4Address};

const PHASES: [&str; 4] = ["idle", "add-del", "stats", "big-del"];
const BIG: u64 = 16 << 30;
const BURST: usize = 8;

/// What the stream saw in one phase.
#[derive(Default, Clone, Copy)]
struct Seen {
    frames: u64,
    max_latency: Duration,
    max_gap: Duration,
    over_1ms: u64,
}

fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}

fn frame(base: Instant) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[0..6].copy_from_slice(&mac(2).0);
    f[6..12].copy_from_slice(&mac(1).0);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..22].copy_from_slice(&(base.elapsed().as_nanos() as u64).to_le_bytes());
    f
}

/// Streams from `tx` to `rx` until `stop`, into `seen[phase]`.
fn stream(
    mut tx: Endpoint,
    mut rx: Endpoint,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<[Seen; 4]>>,
) {
    let base = Instant::now();
    let mut buf = [0u8; 2048];
    let mut last = Instant::now();
    while !stop.load(Relaxed) {
        let frames: Vec<Vec<u8>> = (0..BURST).map(|_| frame(base)).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        let sent = tx.send_burst(&refs);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut got = 0;
        while got < sent && Instant::now() < deadline {
            let Some(n) = rx.poll_recv(&mut buf) else {
                continue;
            };
            if n < 22 || buf[12..14] != 0x88b5u16.to_be_bytes() {
                continue;
            }
            got += 1;
            let now = Instant::now();
            let stamp = u64::from_le_bytes(buf[14..22].try_into().unwrap());
            let latency = (now - base).saturating_sub(Duration::from_nanos(stamp));
            let mut s = seen.lock().unwrap();
            let s = &mut s[phase.load(Relaxed)];
            s.frames += 1;
            s.max_latency = s.max_latency.max(latency);
            s.max_gap = s.max_gap.max(now - last);
            s.over_1ms += u64::from(latency > Duration::from_millis(1));
            last = now;
        }
    }
}

/// A front-end that maps `size` bytes of a sparse memfd and nothing else.
fn map_big(sock: &Path, size: u64) -> Frontend {
    // SAFETY: memfd_create with a valid name; the result is checked.
    let fd = unsafe { libc::memfd_create(b"stall-big\0".as_ptr().cast(), 0) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: fd is a fresh descriptor this function owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on an owned descriptor.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), size as i64) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    let fe = loop {
        match Frontend::connect(sock, 2) {
            Ok(fe) => break fe,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("connect {}: {e}", sock.display()),
        }
    };
    fe.set_owner().unwrap();
    let features = fe.get_features().unwrap();
    fe.set_features(features & (1 << 32)).unwrap();
    let region = VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: size,
        userspace_addr: 0x7f00_0000_0000,
        mmap_offset: 0,
        mmap_handle: fd.as_raw_fd(),
    };
    fe.set_mem_table(&[region]).unwrap();
    fe
}

fn run_phase(phase: usize, sw: &Switch, dir: &Path, cycles: usize) {
    let mut c = Client::connect(sw.control_path()).unwrap();
    let spec = |n: &str| PortSpec::vhost_user(n, dir.join(n), SocketMode::Server);
    match PHASES[phase] {
        "idle" => std::thread::sleep(Duration::from_secs(2)),
        "add-del" => {
            for i in 0..cycles {
                let name = format!("x{i}");
                c.request(&Request::PortAdd { port: spec(&name) }).unwrap();
                c.request(&Request::PortDel { name }).unwrap();
            }
        }
        "stats" => {
            for _ in 0..200 {
                c.request(&Request::Stats { name: None }).unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        _ => {
            for i in 0..5 {
                let name = format!("big{i}");
                c.request(&Request::PortAdd { port: spec(&name) }).unwrap();
                let fe = map_big(&dir.join(&name), BIG);
                // Give the worker time to map it (SET_MEM_TABLE has no reply here).
                std::thread::sleep(Duration::from_millis(300));
                let t = Instant::now();
                c.request(&Request::PortDel { name }).unwrap();
                eprintln!("big-del: port with 16 GiB deleted in {:?}", t.elapsed());
                drop(fe);
            }
        }
    }
}

/// The workers' counters, through the control socket.
fn perf(c: &mut Client) -> Vec<PerfSnapshot> {
    serde_json::from_value(c.request(&Request::Perf).unwrap()).unwrap()
}

/// The workers' holds between two readings.
#[derive(Default, Clone, Copy)]
struct Held {
    holds: u64,
    /// The longest's bucket.
    top: Option<usize>,
    /// The longest exactly, when every worker's is its longest yet.
    longest_ns: Option<u64>,
    over_1ms: u64,
    commands: u64,
    /// Holds with commands that ran 1 ms or more on a CPU.
    commands_over_1ms_cpu: u64,
    command_cpu_ns: u64,
    command_holds: u64,
}

fn held(before: &[PerfSnapshot], after: &[PerfSnapshot]) -> Held {
    let mut h = Held {
        longest_ns: Some(0),
        ..Held::default()
    };
    for a in after {
        let b = before.iter().find(|b| b.worker == a.worker);
        let d = b.map_or_else(|| a.clone(), |b| a.since(b));
        h.holds += d.hold_count();
        h.over_1ms += d.holds_over_1ms;
        h.commands += d.commands;
        h.commands_over_1ms_cpu += d.command_holds_over_1ms_cpu;
        h.command_cpu_ns += d.command_cpu_nanos;
        h.command_holds += d.command_holds;
        h.top = h.top.max(d.longest_hold_bucket());
        // A maximum that grew was reached in the interval: it is its longest.
        let grew = b.map_or(true, |b| a.longest_hold_ns > b.longest_hold_ns);
        h.longest_ns = match (h.longest_ns, grew || d.hold_count() == 0) {
            (Some(ns), true) if d.hold_count() > 0 => Some(ns.max(a.longest_hold_ns)),
            (known, true) => known,
            (_, false) => None,
        };
    }
    h
}

impl Held {
    fn command_cpu(&self) -> String {
        if self.command_holds == 0 {
            return "-".into();
        }
        format!(
            "{:.1} µs, {}",
            self.command_cpu_ns as f64 / 1e3 / self.command_holds as f64,
            self.commands_over_1ms_cpu
        )
    }

    fn longest(&self) -> String {
        match (self.top, self.longest_ns) {
            (None, _) => "-".into(),
            (Some(_), Some(ns)) => format!("{:.1} µs", ns as f64 / 1e3),
            (Some(k), None) => hold_bucket_label(k),
        }
    }
}

/// Writes dirty pages out and drops the clean ones from the page cache.
fn drop_page_cache() {
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("--cold: drop_caches (root)");
}

fn main() {
    vnio_switch::logging::init(vnio_switch::logging::LevelFilter::Warn);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cold = args.iter().any(|a| a == "--cold");
    let cycles: usize = args
        .iter()
        .find(|a| *a != "--cold")
        .map_or(1000, |a| a.parse().expect("CYCLES"));
    let dir = PathBuf::from(format!("/tmp/vnio-stall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = Config {
        switch: SwitchConfig {
            control: dir.join("control"),
            // Busy-poll, as a forwarding benchmark runs.
            idle_polls: u32::MAX,
            ..SwitchConfig::default()
        },
        ports: ["p1", "p2"]
            .iter()
            .map(|n| PortSpec::vhost_user(n, dir.join(n), SocketMode::Server))
            .collect(),
    };
    if std::env::var("LOCK").as_deref() == Ok("0") {
        cfg.switch.lock_memory = false;
    }
    let locked = vnio_switch::daemon::lock_memory(&cfg.switch).unwrap_or(0);
    println!("memory locked: {} MiB", locked >> 20);
    let sw = Switch::start(cfg).unwrap();
    let ep = |n: u8| {
        let cfg = EndpointConfig::new(mac(n), Ipv4Address([10, 0, 0, n]));
        Endpoint::connect(&dir.join(format!("p{n}")), cfg).unwrap()
    };
    let (e1, mut e2) = (ep(1), ep(2));
    // p2's address learned first: the stream is unicast, not flooded.
    e2.send_frame(&{
        let mut f = frame(Instant::now());
        f[0..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac(2).0);
        f
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let phase = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new([Seen::default(); 4]));
    let traffic = {
        let (phase, stop, seen) = (phase.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || stream(e1, e2, phase, stop, seen))
    };
    let mut took = [Duration::ZERO; 4];
    let mut holds = [Held::default(); 4];
    let mut ctl = Client::connect(sw.control_path()).unwrap();
    for (p, (took, holds)) in took.iter_mut().zip(&mut holds).enumerate() {
        if cold {
            drop_page_cache();
        }
        phase.store(p, Relaxed);
        let before = perf(&mut ctl);
        let t = Instant::now();
        run_phase(p, &sw, &dir, cycles);
        *took = t.elapsed();
        *holds = held(&before, &perf(&mut ctl));
    }
    stop.store(true, Relaxed);
    traffic.join().unwrap();
    println!(
        "phase     seconds  frames/s   max latency  max gap      frames > 1 ms  holds    longest hold    holds >= 1 ms  commands  command hold on CPU: mean, >= 1 ms"
    );
    for (((name, s), t), h) in PHASES
        .iter()
        .zip(seen.lock().unwrap().iter())
        .zip(took)
        .zip(holds)
    {
        println!(
            "{name:<9} {:<8.1} {:<10.0} {:<12.3?} {:<12.3?} {:<14} {:<8} {:<15} {:<14} {:<9} {}",
            t.as_secs_f64(),
            s.frames as f64 / t.as_secs_f64(),
            s.max_latency,
            s.max_gap,
            s.over_1ms,
            h.holds,
            h.longest(),
            h.over_1ms,
            h.commands,
            h.command_cpu()
        );
    }
    drop(sw);
    let _ = std::fs::remove_dir_all(&dir);
}
