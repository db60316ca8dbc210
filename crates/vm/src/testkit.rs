//! What the guest tests share (`testkit` feature, for this crate's and the
//! CLI's integration tests only): what must be present (root, QEMU, the
//! guests' static vnio), the image, launching with a private state root, a
//! guard that stops every VM a test launched, even when it panics, guests
//! on switch ports and waiting for them to boot, commands run in a guest,
//! TCP streams from a guest checked byte for byte ([`streams`]) and traffic
//! across a migration ([`migration`]).
//!
//! Its functions panic on failure: they are test steps.

mod migration;
mod streams;

pub use migration::{gaps, ping_counts, Traffic};
pub use streams::{tcp_to_listener, tcp_transfer};

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::image::{self, Image, ImageOptions};
use crate::launch::{self, LaunchOptions, Launched};
use crate::spec::{AccelChoice, VmSpec};
use crate::state::{self, VmDir};

/// How long a TCG guest may take to boot to its agent on a busy 2-CPU CI host.
pub const BOOT: Duration = Duration::from_secs(240);

/// A private temporary directory, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    /// A fresh directory named after `tag`, this process and a counter.
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

    /// `name` inside the directory.
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
    /// The guest image, built or cached.
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
        if let Err(e) = crate::accel::qemu_version() {
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

    /// Launch options with this kit's image and state root.
    pub fn options(&self) -> LaunchOptions {
        let mut o = LaunchOptions::new(Arc::new(AtomicBool::new(false)));
        o.root = self.root.0.clone();
        o.image = Some(self.image.dir.clone());
        o.start_timeout = Duration::from_secs(120);
        o
    }

    /// The state directory of this kit's VM `name`.
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
        while !crate::exec::exec(&l.dir, &sh("true"), Duration::from_secs(10))
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
    crate::state::started_at(pid).is_some()
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

/// Whether `p` exists (a dangling symlink counts).
pub fn path_exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// `sh -c CMD`, for `exec` in a guest.
pub fn sh(cmd: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), cmd.into()]
}

/// `sh -c CMD` in guest `dir` (within 60 s); its output. Panics on failure.
pub fn run(dir: &VmDir, cmd: &str) -> String {
    let out = crate::exec::exec(dir, &sh(cmd), Duration::from_secs(60)).unwrap();
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
