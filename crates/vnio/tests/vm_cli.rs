//! `vnio vm` as a user runs it: printing plans without launching, one-line
//! errors with a non-zero exit, and cleanup when a start fails, when the
//! launcher gets SIGTERM mid-start, and on `vnio vm stop`. The QEMU cases
//! print one "skip:" line when QEMU (or, for the real launch, root and a
//! built image) is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("vnio-vmcli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
    fn join(&self, n: &str) -> PathBuf {
        self.0.join(n)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An image directory with empty kernel and initramfs: enough to plan,
/// and for QEMU to start and fail.
fn fake_image(t: &Tmp) -> PathBuf {
    let d = t.join("image");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("vmlinuz"), b"").unwrap();
    std::fs::write(d.join("initrd.img"), b"").unwrap();
    let manifest = serde_json::json!({
        "key": "0000fake0000fake",
        "kernel_package": {"name": "linux-image-test", "version": "1"},
        "kernel_release": "test",
        "busybox": "none",
        "vnio": "/none",
        "vnio_sha256": "00",
        "modules": [],
        "kernel_bytes": 0,
        "initrd_bytes": 0
    });
    std::fs::write(d.join("manifest.json"), manifest.to_string()).unwrap();
    d
}

fn vnio(t: &Tmp, args: &[&str]) -> Output {
    Command::new(VNIO)
        .arg("vm")
        .arg("--state-dir")
        .arg(t.join("state"))
        .arg("--cache")
        .arg(t.join("cache"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn have_qemu() -> bool {
    Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok()
}

/// Whether `pid` exists and is not a zombie (an exited daemon waits for
/// whoever adopted it to reap it).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        })
        .unwrap_or(false)
}

/// Processes (not zombies) whose command line mentions `needle`.
fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| text(&c).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn plans_print_without_launching() {
    let t = Tmp::new("print");
    let img = fake_image(&t);
    let img = img.to_str().unwrap();
    let out = vnio(
        &t,
        &[
            "run",
            "--name",
            "p1",
            "--nic",
            "vhost-user:/tmp/none.sock,ip=10.0.0.2/24",
            "--accel",
            "tcg",
            "--image",
            img,
            "--print-qemu",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("-machine q35,accel=tcg,memory-backend=mem0"),
        "{s}"
    );
    assert!(s.contains(",vectors=0"), "{s}");
    // QEMU redials a restarted switch: the guest keeps its vNIC.
    assert!(s.contains("path=/tmp/none.sock,reconnect=1"), "{s}");
    assert!(s.contains("vnio.ip=") && s.contains("10.0.0.2/24"), "{s}");
    let out = vnio(
        &t,
        &[
            "run",
            "--name",
            "p1",
            "--latency",
            "high",
            "--accel",
            "tcg",
            "--image",
            img,
            "--print-qemu",
        ],
    );
    let s = text(&out.stdout);
    assert!(
        s.contains("# not honoured: guest idles without exits: cpu-pm needs KVM"),
        "{s}"
    );
    assert!(s.contains("prealloc=on"), "{s}");
    let out = vnio(
        &t,
        &[
            "run",
            "--name",
            "p1",
            "--accel",
            "tcg",
            "--image",
            img,
            "--print-libvirt",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("<domain type='qemu'"));
    // Passthrough NICs print on any host, with what the launch would do
    // here or why it cannot.
    for (nic, qemu, xml) in [
        (
            "vfio:0000:fe:1f.7",
            "-device vfio-pci,host=0000:fe:1f.7,id=nic0",
            "<address domain='0x0000' bus='0xfe' slot='0x1f' function='0x7'/>",
        ),
        (
            "sriov:nosuch0,vf=3",
            "-device vfio-pci,host=VF3-OF-nosuch0,id=nic0",
            "<source network='vnio-sriov-nosuch0'/>",
        ),
    ] {
        let run = |print: &str| {
            let out = vnio(
                &t,
                &[
                    "run", "--name", "p1", "--nic", nic, "--accel", "tcg", "--image", img, print,
                ],
            );
            assert!(out.status.success(), "{nic}: {}", text(&out.stderr));
            text(&out.stdout)
        };
        let s = run("--print-qemu");
        assert!(s.contains(qemu), "{s}");
        assert!(
            s.contains("# cannot launch on this host: NIC 0 (passthrough): no "),
            "{s}"
        );
        assert!(run("--print-libvirt").contains(xml));
    }
    assert!(!t.join("state/p1").exists(), "printing launched nothing");
}

#[test]
fn bad_input_is_one_line_and_a_nonzero_exit() {
    let t = Tmp::new("bad");
    let img = fake_image(&t);
    let img = img.to_str().unwrap();
    for (args, code, needle) in [
        (
            vec![
                "run", "--name", "bad name", "--accel", "tcg", "--image", img,
            ],
            1,
            "VM name",
        ),
        (
            vec![
                "run", "--name", "x", "--mem", "64M", "--accel", "tcg", "--image", img,
            ],
            1,
            "at least",
        ),
        (
            vec!["run", "--name", "x", "--nic", "wifi:1"],
            2,
            "unknown kind",
        ),
        (
            vec!["run", "--name", "x", "--latency", "extreme"],
            2,
            "normal or high",
        ),
        (vec!["stop", "nosuch"], 1, "no VM named nosuch"),
        (vec!["exec", "nosuch", "--", "true"], 1, "nosuch"),
        (vec!["wait-agent", "nosuch"], 1, "no VM named nosuch"),
        (vec!["migrate", "nosuch"], 1, "no VM named nosuch"),
        (
            vec![
                "run",
                "--name",
                "x",
                "--nic",
                "vfio:0000:fe:1f.7",
                "--accel",
                "tcg",
                "--image",
                img,
            ],
            1,
            "NIC 0 (passthrough): no PCI device 0000:fe:1f.7 on this host",
        ),
        (
            vec!["migrate", "nosuch", "--to", "lab2"],
            1,
            "no VM named nosuch",
        ),
        (
            vec!["migrate", "g1", "--to=-oProxyCommand=x"],
            1,
            "not an SSH destination",
        ),
        (
            vec!["migrate", "g1", "--to", "m1", "--ssh-option", "Port 22"],
            1,
            "--ssh-option \"Port 22\": not Key=Value",
        ),
        (
            vec!["migrate", "g1", "--ssh-config", "/x"],
            2,
            "--to <HOST>",
        ),
    ] {
        let out = vnio(&t, &args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        if code == 1 {
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "{args:?}: one line: {err}"
            );
        }
    }
}

#[test]
fn a_failed_start_leaves_nothing() {
    if !have_qemu() {
        println!("skip: failed-start cleanup: qemu-system-x86_64 not installed");
        return;
    }
    let t = Tmp::new("fail");
    let img = fake_image(&t);
    let missing = t.join("no-switch.sock");
    let out = vnio(
        &t,
        &[
            "run",
            "--name",
            "f1",
            "--nic",
            &format!("vhost-user:{}", missing.display()),
            "--accel",
            "tcg",
            "--image",
            img.to_str().unwrap(),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("QEMU"), "{err}");
    assert!(!t.join("state/f1").exists(), "state left behind");
    assert!(
        processes_mentioning(&t.join("state")).is_empty(),
        "a QEMU left behind"
    );
}

#[test]
fn sigterm_while_starting_removes_everything() {
    if !have_qemu() {
        println!("skip: interrupted-start cleanup: qemu-system-x86_64 not installed");
        return;
    }
    let t = Tmp::new("sigterm");
    let img = fake_image(&t);
    // QEMU listens for the switch and waits: the launch cannot finish.
    let sock = t.join("listen.sock");
    let launcher = Command::new(VNIO)
        .arg("vm")
        .arg("--state-dir")
        .arg(t.join("state"))
        .arg("--cache")
        .arg(t.join("cache"))
        .args([
            "run",
            "--name",
            "s1",
            "--nic",
            &format!("vhost-user:{},server", sock.display()),
            "--accel",
            "tcg",
            "--image",
            img.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(sock.exists() && t.join("state/s1/qemu.pid").exists()) {
        assert!(
            Instant::now() < deadline,
            "QEMU never listened on {}",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let qemu = processes_mentioning(&t.join("state"));
    assert!(!qemu.is_empty(), "QEMU is running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(launcher.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = launcher.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(!t.join("state/s1").exists(), "state left behind");
    assert!(!sock.exists(), "QEMU's socket left behind");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_mentioning(&t.join("state")).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        processes_mentioning(&t.join("state")).is_empty(),
        "QEMU left behind"
    );
}

#[test]
fn run_daemonises_and_stop_removes_everything() {
    if !have_qemu() || !nix::unistd::geteuid().is_root() {
        println!("skip: vnio vm run/list/stop: needs root and qemu-system-x86_64");
        return;
    }
    // The real image, through the CLI (the default cache: shared with the
    // other guest tests, rebuilt only if an input changed).
    let built = Command::new(VNIO)
        .args(["vm", "image", "build"])
        .output()
        .unwrap();
    let report = text(&built.stdout);
    if !built.status.success() {
        let err = text(&built.stderr);
        if err.contains("no static vnio for the guest") {
            println!("skip: vnio vm run/list/stop: {}", err.trim());
            return;
        }
        panic!("vnio vm image build: {err}");
    }
    println!("{report}");
    assert!(
        report.contains("initramfs") && report.contains("modules"),
        "{report}"
    );
    let image = report
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().last())
        .map(PathBuf::from)
        .unwrap();
    assert!(image.join("vmlinuz").exists() && image.join("initrd.img").exists());
    let t = Tmp::new("run");
    let tap = format!("vtcli{}", std::process::id() % 10000);
    let out = vnio(
        &t,
        &[
            "run",
            "--name",
            "r1",
            "--nic",
            &format!("tap:{tap}"),
            "--accel",
            "tcg",
            "--image",
            image.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("vnio vm: r1 running"), "{s}");
    // The launcher has exited; QEMU runs on.
    let pid: u32 = std::fs::read_to_string(t.join("state/r1/state.json"))
        .ok()
        .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
        .and_then(|v| v["pid"].as_u64())
        .unwrap() as u32;
    assert!(alive(pid));
    assert!(
        Path::new(&format!("/sys/class/net/{tap}")).exists(),
        "tap {tap} up"
    );
    let out = vnio(&t, &["list"]);
    let s = text(&out.stdout);
    assert!(
        s.lines()
            .any(|l| l.starts_with("r1 ") && l.contains("running")),
        "{s}"
    );
    let out = vnio(&t, &["stop", "r1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("r1 stopped"));
    assert!(!t.join("state/r1").exists());
    assert!(
        !Path::new(&format!("/sys/class/net/{tap}")).exists(),
        "tap {tap} left behind"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "QEMU {pid} left behind");
}
