//! Shared by the guest tests: what must be present (root, QEMU, the
//! guests' static vnio), the image, launching with a private state root,
//! and a guard that stops every VM a test launched, even when it panics.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vnio_vm::image::{self, Image, ImageOptions};
use vnio_vm::launch::{self, LaunchOptions, Launched};
use vnio_vm::spec::VmSpec;
use vnio_vm::state::VmDir;

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
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        })
        .unwrap_or(false)
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
    let send = format!(
        "dd if=/dev/urandom of=/tmp/out bs=1024 count={kib} 2>/dev/null && md5sum < /tmp/out && nc -w 10 {to_ip} {port} < /tmp/out"
    );
    let out = vnio_vm::exec::exec(from, &sh(&send), t).unwrap();
    assert!(
        out.success(),
        "{what}: sending {kib} KiB to {to_ip}: {out:?}"
    );
    let sent = out
        .stdout
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
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
