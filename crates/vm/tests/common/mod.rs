//! Shared by the guest tests: what must be present (root, QEMU, the
//! guests' static vnio), the image, launching with a private state root,
//! a guard that stops every VM a test launched, even when it panics, guests
//! on switch ports and waiting for them to boot, TCP streams from a
//! guest checked byte for byte, and busybox ping logs read (migrations).

#![allow(dead_code)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vnio_vm::image::{self, Image, ImageOptions};
use vnio_vm::launch::{self, LaunchOptions, Launched};
use vnio_vm::spec::{AccelChoice, VmSpec};
use vnio_vm::state::{self, VmDir};

/// How long a TCG guest may take to boot to its agent on a busy 2-CPU CI host.
pub const BOOT: Duration = Duration::from_secs(240);

/// A private temporary directory, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "vnio-vm-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the guest tests need, or the reason to skip.
pub struct Kit {
    pub image: Image,
    /// The guests' static vnio (also run on the host side: it is static).
    pub vnio: PathBuf,
    /// A private state root for this test's VMs.
    pub root: Dir,
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

impl Kit {
    /// The kit, or `None` after printing one "skip:" line.
    pub fn get(test: &str) -> Option<Kit> {
        let skip = |why: &str| {
            println!("skip: {test}: {why}");
            None
        };
        if !is_root() {
            return skip("needs root (taps, namespaces, /run)");
        }
        if let Err(e) = vnio_vm::accel::qemu_version() {
            return skip(&e.to_string());
        }
        let vnio = match image::find_guest_vnio(None) {
            Ok(v) => v,
            Err(e) => return skip(&e.to_string()),
        };
        // From here a failure is a failure: the host has what it takes.
        let built = image::build(&ImageOptions::new()).expect("building the guest image");
        println!(
            "{test}: image {} {} ({} kernel {}, initramfs {} KiB)",
            if built.cached { "cached" } else { "built" },
            built.image.manifest.key,
            built.image.manifest.kernel_package,
            built.image.manifest.kernel_release,
            built.image.manifest.initrd_bytes / 1024
        );
        Some(Kit {
            image: built.image,
            vnio,
            root: Dir::new("state"),
        })
    }

    pub fn options(&self) -> LaunchOptions {
        let mut o = LaunchOptions::new(Arc::new(AtomicBool::new(false)));
        o.root = self.root.0.clone();
        o.image = Some(self.image.dir.clone());
        o.start_timeout = Duration::from_secs(120);
        o
    }

    pub fn dir(&self, name: &str) -> VmDir {
        VmDir::new(&self.root.0, name)
    }

    /// Launches `spec`; the guard stops it.
    pub fn launch(&self, spec: &VmSpec, guard: &mut Guard) -> Launched {
        guard.names.push(spec.name.clone());
        guard.root = self.root.0.clone();
        launch::launch(spec, &self.options())
            .unwrap_or_else(|e| panic!("launching {}: {e}", spec.name))
    }
}

/// Guest `name` with one NIC on the switch's vhost-user socket `sock`, at
/// `ip`/24; KVM where the host has it, TCG otherwise (the tests check
/// traffic and counters, not speed).
pub fn vhost_user_guest(name: &str, sock: &Path, ip: &str) -> VmSpec {
    let mut s = VmSpec::new(name);
    s.accel = AccelChoice::Auto;
    s.nics = vec![format!("vhost-user:{},ip={ip}/24", sock.display())
        .parse()
        .unwrap()];
    s
}

/// Waits until each guest's command channel answers, which is when it has
/// booted (at most [`BOOT`] each), and prints how long after its launch.
pub fn wait_booted(guests: &[&Launched]) {
    for l in guests {
        let name = l.dir.name();
        let end = Instant::now() + BOOT;
        while !vnio_vm::exec::exec(&l.dir, &sh("true"), Duration::from_secs(10))
            .is_ok_and(|o| o.success())
        {
            assert!(Instant::now() < end, "{name} did not come up");
            std::thread::sleep(Duration::from_secs(2));
        }
        // The launch instant is in the state on CLOCK_MONOTONIC.
        let since = Duration::from_nanos(state::monotonic_ns().saturating_sub(l.state.launched_ns));
        println!(
            "{name} booted {:.0} s after its launch",
            since.as_secs_f64()
        );
    }
}

/// Stops the VMs a test launched when dropped (also on panic).
#[derive(Default)]
pub struct Guard {
    root: PathBuf,
    names: Vec<String>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = launch::stop(&self.root, n);
        }
    }
}

/// Runs `f` on a thread and fails if it does not finish within `limit`.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("test step exceeded its time limit")
}

/// A small id for names and subnets that differ between concurrent runs.
pub fn run_id() -> u8 {
    (std::process::id() % 100) as u8 + 50
}

/// Transactions counted in a `vnio rr/ping --json` document.
pub fn transactions(json: &[u8]) -> u64 {
    let doc: serde_json::Value = serde_json::from_slice(json).unwrap_or_else(|e| {
        panic!(
            "not a result document ({e}): {}",
            String::from_utf8_lossy(json)
        )
    });
    let chosen = doc["chosen"].as_u64().unwrap_or(0) as usize;
    doc["iterations"][chosen]["merged"]["latency"]["count"]
        .as_u64()
        .unwrap_or(0)
}

/// Asserts a measurement command succeeded with transactions; returns the
/// median (p50) in microseconds for the report.
pub fn measured(what: &str, out: &Output) -> f64 {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let n = transactions(&out.stdout);
    assert!(
        n > 0,
        "{what}: no transactions: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let chosen = doc["chosen"].as_u64().unwrap_or(0) as usize;
    let p50 = doc["iterations"][chosen]["merged"]["latency"]["p50_ns"]
        .as_f64()
        .unwrap_or(0.0)
        / 1000.0;
    println!("{what}: {n} transactions, p50 {p50:.0} us");
    p50
}

/// Whether `pid` still exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    vnio_vm::state::started_at(pid).is_some()
}

/// The CPUs thread `tid` of `pid` may run on.
pub fn allowed_cpus(pid: u32, tid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
        .unwrap_or_default()
}

/// The thread ids of `pid` whose name starts with `prefix`.
pub fn threads_named(pid: u32, prefix: &str) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

pub fn path_exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// `sh -c CMD`, for `exec` in a guest.
pub fn sh(cmd: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), cmd.into()]
}

/// Makes `kib` KiB of random bytes in guest `from` and sends them with
/// busybox nc (`nc_args`: options, address, port), within `t`; their md5 as
/// `md5sum` prints it.
fn send_random(from: &VmDir, kib: u32, nc_args: &str, t: Duration, what: &str) -> String {
    let send = format!(
        "dd if=/dev/urandom of=/tmp/out bs=1024 count={kib} 2>/dev/null && md5sum < /tmp/out && nc {nc_args} < /tmp/out"
    );
    let out = vnio_vm::exec::exec(from, &sh(&send), t).unwrap();
    assert!(
        out.success(),
        "{what}: sending {kib} KiB (nc {nc_args}): {out:?}"
    );
    out.stdout
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Sends `kib` KiB of random bytes over TCP from guest `from` to guest `to`
/// (listening at `to_ip`:`port`; busybox nc at both ends) and asserts that
/// all of them arrived with the sender's md5. `what` names the transfer in a
/// failure.
pub fn tcp_transfer(from: &VmDir, to: &VmDir, to_ip: &str, port: u16, kib: u32, what: &str) {
    let t = Duration::from_secs(120);
    let file = format!("/tmp/recv{port}");
    // busybox nc stops at the end of its stdin: feed it a pipe that stays open.
    let listen = format!("(sleep 600 | nc -l -p {port} > {file} 2>/dev/null) > /dev/null 2>&1 &");
    let out = vnio_vm::exec::exec(to, &sh(&listen), t).unwrap();
    assert!(out.success(), "{what}: listener: {out:?}");
    let sent = send_random(from, kib, &format!("-w 10 {to_ip} {port}"), t, what);
    let bytes = u64::from(kib) * 1024;
    let wait = format!(
        "n=0; while [ \"$(wc -c < {file})\" -lt {bytes} ] && [ $n -lt 300 ]; do usleep 100000; n=$((n+1)); done; md5sum < {file}; wc -c < {file}"
    );
    let out = vnio_vm::exec::exec(to, &sh(&wait), t).unwrap();
    let got: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(
        (got.first().copied(), got.last().copied()),
        (Some(sent.as_str()), Some(bytes.to_string().as_str())),
        "{what}: the TCP stream arrived intact"
    );
}

/// The md5 of `data`, as `md5sum` prints it (what the guests' busybox
/// prints for the bytes they sent).
fn md5(data: &[u8]) -> String {
    let mut child = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("md5sum");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), data).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Sends `kib` KiB of random bytes over TCP from guest `from` to
/// `listener` (in the host or a namespace: the address it is bound to is
/// where the guest connects) and asserts that all of them arrived with the
/// sender's md5. `what` names the transfer in a failure.
pub fn tcp_to_listener(from: &VmDir, listener: TcpListener, kib: u32, what: &str) {
    let to = listener.local_addr().expect("the listener's address");
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        data
    });
    let sent = send_random(
        from,
        kib,
        &format!("{} {}", to.ip(), to.port()),
        Duration::from_secs(180),
        what,
    );
    let data = receiver.join().expect("the receiver");
    assert_eq!(
        data.len(),
        kib as usize * 1024,
        "{what}: bytes that arrived"
    );
    assert_eq!(md5(&data), sent, "{what}: the stream arrived intact");
}

/// `sh -c CMD` in guest `dir` (within 60 s); its output. Panics on failure.
pub fn run(dir: &VmDir, cmd: &str) -> String {
    let out = vnio_vm::exec::exec(dir, &sh(cmd), Duration::from_secs(60)).unwrap();
    assert!(out.success(), "{cmd}: {out:?}");
    out.stdout
}

/// Polls `cmd` in `dir` until `done` accepts its output (within `limit`).
pub fn poll(dir: &VmDir, cmd: &str, limit: Duration, done: impl Fn(&str) -> bool) -> String {
    let end = Instant::now() + limit;
    loop {
        let out = run(dir, cmd);
        if done(&out) {
            return out;
        }
        assert!(Instant::now() < end, "{cmd}: still {out:?}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// (transmitted, received) from busybox ping's summary.
pub fn ping_counts(summary: &str) -> (u64, u64) {
    let line = summary
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in {summary:?}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

/// The unanswered sequence numbers of a busybox ping log, as ranges.
pub fn gaps(log: &str) -> String {
    let seqs: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split("seq=").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let mut out = Vec::new();
    for w in seqs.windows(2) {
        if w[1] > w[0] + 1 {
            out.push(format!("{}..{}", w[0] + 1, w[1] - 1));
        }
    }
    if out.is_empty() {
        "none in sequence".into()
    } else {
        out.join(", ")
    }
}

/// Traffic across a migration: a paced TCP stream from guest B to guest A
/// (3 MiB over about 10 s, busybox nc) and a ping from A to B every 10 ms
/// (for 30 s).
pub struct Traffic {
    blocks: u32,
    port: u16,
}

impl Traffic {
    /// Starts both (A at `a_ip`, B at `b_ip`); returns once they run.
    pub fn start(a: &VmDir, b: &VmDir, a_ip: &str, b_ip: &str) -> Traffic {
        let (blocks, port) = (192, 5001);
        run(
            b,
            &format!("dd if=/dev/urandom of=/tmp/send bs=16k count={blocks} 2>/dev/null; md5sum < /tmp/send > /tmp/send.md5"),
        );
        run(
            a,
            &format!("(sleep 600 | nc -l -p {port} > /tmp/recv 2>/dev/null) > /dev/null 2>&1 &"),
        );
        run(
            a,
            &format!("(ping -i 0.01 -w 30 {b_ip} > /tmp/ping.out 2>&1) > /dev/null 2>&1 &"),
        );
        std::thread::sleep(Duration::from_secs(1));
        run(
            b,
            &format!(
                "((i=0; while [ $i -lt {blocks} ]; do dd if=/tmp/send bs=16k skip=$i count=1 2>/dev/null; usleep 50000; i=$((i+1)); done) | nc -w 10 {a_ip} {port}) > /dev/null 2>&1 &"
            ),
        );
        std::thread::sleep(Duration::from_secs(3));
        Traffic { blocks, port }
    }

    /// Waits for both to end and asserts the stream arrived whole with the
    /// sender's md5 and at most 5% of the pings were lost (B: where the
    /// guest's command channel is now). Returns (pings sent, answered).
    pub fn check(&self, a: &VmDir, b: &VmDir) -> (u64, u64) {
        let bytes = self.blocks * 16 * 1024;
        let got = poll(a, "wc -c < /tmp/recv", Duration::from_secs(120), |o| {
            o.trim() == bytes.to_string()
        });
        assert_eq!(
            got.trim(),
            bytes.to_string(),
            "stream to port {}",
            self.port
        );
        let sent = run(b, "cat /tmp/send.md5");
        let recv = run(a, "md5sum < /tmp/recv");
        assert_eq!(
            sent.split_whitespace().next(),
            recv.split_whitespace().next(),
            "the TCP stream across the migration arrived intact"
        );
        let summary = poll(a, "cat /tmp/ping.out", Duration::from_secs(60), |o| {
            o.contains("packet loss")
        });
        let (tx, rx) = ping_counts(&summary);
        println!(
            "ping across the migration: {rx} of {tx} answered; unanswered: {}",
            gaps(&summary)
        );
        assert!(tx > 100, "{summary}");
        assert!(
            (tx - rx) * 100 <= tx * 5,
            "more than 5% of the pings lost: {summary}"
        );
        (tx, rx)
    }
}
