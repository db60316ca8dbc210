//! Packet rate of a multiqueue vNIC pair, its queue pairs on one worker or
//! spread over two (`[switch] workers`), against single-pair ports.
//!
//! Two DPDK testpmd processes on virtio-user ports of an in-process switch:
//! A (`txonly`, `--txonly-multi-flow`: 64-byte UDP frames whose source
//! address changes frame to frame, so flows spread over the receiver's
//! pairs) on port p1 sends to B (`rxonly`) on port p2; the rate is what
//! the switch delivered into p2 over the interval. B sends for a moment
//! first (txonly toward A) so every worker has learned its address. Three
//! set-ups, interleaved round after round so that a drift of the host
//! touches them alike:
//!
//! - `1 pair`: both ports single-pair, one worker;
//! - `2 pairs, 1 worker`: both ports `queues = 2`, one shared worker;
//! - `2 pairs, 2 workers`: the same with `workers = 2` (pair 1 of each
//!   port on worker 1).
//!
//! testpmd runs without hugepages (`--no-huge`) with both of its lcores on
//! the CPU given for it (`--cpus A,B`: A's and B's, default 0,1), the switch's workers
//! on the CPUs this process may use: run it under `taskset` on other CPUs.
//! Root (testpmd maps the vhost-user memory).
//!
//! `taskset -c 2,3 cargo run --release -p vnio-switch --example mq_rate -- --cpus 4,5 [--secs 5] [--rounds 3]`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;

struct Args {
    secs: f64,
    rounds: usize,
    cpus: [usize; 2],
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        secs: 5.0,
        rounds: 3,
        cpus: [0, 1],
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--secs" => a.secs = v()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--rounds" => a.rounds = v()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--cpus" => {
                let s = v()?;
                let c: Vec<usize> = s
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--cpus {s}: {e}"))?;
                let [x, y] = c[..] else {
                    return Err(format!("--cpus {s}: two CPUs, A's and B's"));
                };
                a.cpus = [x, y];
            }
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    Ok(a)
}

/// A testpmd in interactive mode on a virtio-user port.
struct Testpmd {
    child: Child,
    prefix: String,
}

const MAC_A: &str = "02:00:00:00:00:0a";
const MAC_B: &str = "02:00:00:00:00:0b";

impl Testpmd {
    fn start(
        tag: &str,
        socket: &Path,
        queues: usize,
        mac: &str,
        peer: &str,
        cpu: usize,
    ) -> Result<Self, String> {
        let prefix = format!("vnio-mq-rate-{}-{tag}", std::process::id());
        let lcores = format!("0@{cpu},1@{cpu}");
        let child = Command::new("dpdk-testpmd")
            .args(["--lcores", &lcores, "--no-pci", "--no-huge", "-m", "1024"])
            .args(["--file-prefix", &prefix, "--vdev"])
            .arg(format!(
                "net_virtio_user0,path={},queues={queues},cq=1,queue_size=1024,mac={mac}",
                socket.display()
            ))
            .args(["--", "-i", "--nb-cores=1", "--txonly-multi-flow"])
            .arg(format!("--rxq={queues}"))
            .arg(format!("--txq={queues}"))
            .arg(format!("--eth-peer=0,{peer}"))
            .args(["--rxd=1024", "--txd=1024", "--total-num-mbufs=32768"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("dpdk-testpmd: {e} (apt install dpdk-dev)"))?;
        Ok(Self { child, prefix })
    }

    fn send(&mut self, lines: &str) {
        if let Some(i) = self.child.stdin.as_mut() {
            let _ = i.write_all(lines.as_bytes());
            let _ = i.flush();
        }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        self.send("stop\nquit\n");
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// One measurement: frames per second delivered into p2.
fn run(dir: &Path, pairs: usize, workers: usize, a: &Args) -> Result<f64, String> {
    let sock = |n: &str| dir.join(format!("{n}.sock"));
    let port = |n: &str| {
        let mut p = PortSpec::vhost_user(n, sock(n), SocketMode::Server);
        p.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(pairs).unwrap();
        p
    };
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: sock("control"),
            workers,
            ..SwitchConfig::default()
        },
        ports: vec![port("p1"), port("p2")],
    })
    .map_err(|e| format!("switch: {e}"))?;
    let list = || sw.handle().list().unwrap_or_default();
    let mut tx = Testpmd::start("a", &sock("p1"), pairs, MAC_A, MAC_B, a.cpus[0])?;
    let mut rx = Testpmd::start("b", &sock("p2"), pairs, MAC_B, MAC_A, a.cpus[1])?;
    // Both front-ends running, and spread when asked.
    let ready = |p: &vnio_switch::worker::PortInfo| {
        p.running
            && p.queues.as_ref().map_or(true, |q| {
                q.running == pairs && (workers == 1 || q.workers.iter().any(|&w| w != 0))
            })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(list().len() == 2 && list().iter().all(ready)) {
        if Instant::now() > deadline {
            return Err(format!("the ports never came up: {:?}", list()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // B speaks first: every worker learns where it is.
    rx.send("set fwd txonly\nstart\n");
    std::thread::sleep(Duration::from_millis(500));
    rx.send("stop\nset fwd rxonly\nstart\n");
    let delivered = || {
        list()
            .iter()
            .find(|p| p.name == "p2")
            .map_or(0, |p| p.stats.rx.packets)
    };
    let learned = delivered();
    tx.send("set fwd txonly\nstart\n");
    // Measured once A's frames flow, and a second more.
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered() < learned + 10_000 {
        if Instant::now() > deadline {
            return Err("A's frames never reached B".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (n0, t0) = (delivered(), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(a.secs));
    let (n1, t1) = (delivered(), Instant::now());
    // Where the frames went: each pair's counters, and the worker serving it.
    for p in list() {
        if let Some(q) = &p.queues {
            let c: Vec<(u64, u64)> = p
                .stats
                .queue_pairs
                .iter()
                .map(|x| (x.tx_packets, x.rx_packets))
                .collect();
            println!(
                "  {}: pairs on workers {:?}, (sent, delivered) per pair {c:?}",
                p.name, q.workers
            );
        }
    }
    drop(tx);
    drop(rx);
    Ok((n1 - n0) as f64 / (t1 - t0).as_secs_f64())
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mq_rate: {e}");
            std::process::exit(2);
        }
    };
    let dir = PathBuf::from(format!("/tmp/vnio-mq-rate-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("mq_rate: {}: {e}", dir.display());
        std::process::exit(1);
    }
    let setups = [
        (1, 1, "1 pair"),
        (2, 1, "2 pairs, 1 worker"),
        (2, 2, "2 pairs, 2 workers"),
    ];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    let mut failed = None;
    'rounds: for round in 1..=a.rounds {
        for (i, &(pairs, workers, name)) in setups.iter().enumerate() {
            match run(&dir, pairs, workers, &a) {
                Ok(r) => {
                    println!("round {round}: {name}: {:.3} Mpps", r / 1e6);
                    rates[i].push(r);
                }
                Err(e) => {
                    failed = Some(format!("{name}: {e}"));
                    break 'rounds;
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(e) = failed {
        eprintln!("mq_rate: {e}");
        std::process::exit(1);
    }
    println!("median of {} rounds, frames/s delivered:", a.rounds);
    for (i, &(_, _, name)) in setups.iter().enumerate() {
        let mut r = rates[i].clone();
        r.sort_by(f64::total_cmp);
        let m = r.get(r.len() / 2).copied().unwrap_or(0.0);
        println!("  {name:<20} {:.3} Mpps", m / 1e6);
    }
}
