//! Two real guests (`vnio vm run`, TCG) on a real `vnio switch`, one on a
//! server-mode port (QEMU the client, with `reconnect=1`), one on a
//! client-mode port (QEMU the server, `server=on`): the switch is
//! SIGKILLed in the middle of a TCP transfer from one guest to the other and
//! restarted with the same configuration; the transfer completes with the
//! sender's md5 and neither guest rebooted (same QEMU process, same boot id).
//! Needs root, QEMU and the guests' static vnio (else one "skip:" line).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// What guest A sends to guest B.
const KIB: u64 = 24 * 1024;

/// The test's directory, its VMs stopped and the directory removed on drop.
struct Work {
    dir: PathBuf,
    vms: Vec<&'static str>,
}

impl Drop for Work {
    fn drop(&mut self) {
        for n in &self.vms {
            let _ = vm(&self.dir, &["stop", n]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn vm(dir: &Path, args: &[&str]) -> Output {
    Command::new(VNIO)
        .arg("vm")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `sh -c CMD` in guest `name`: its standard output; panics on failure.
fn guest_sh(dir: &Path, name: &str, cmd: &str, timeout: &str) -> String {
    let out = vm(dir, &["exec", "--timeout", timeout, name, "sh", "-c", cmd]);
    assert!(
        out.status.success(),
        "{name}: {cmd}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The switches' log, both processes in turn: it tells a reader of a
/// failure what each switch saw.
fn log_file(cfg: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cfg.with_extension("log"))
        .unwrap()
}

/// A port's connections and the bytes it carried both ways, from the
/// running switch (none while it is not answering).
fn port_counters(ctl: &Path, port: &str) -> Option<(u64, u64)> {
    let out = Command::new(VNIO)
        .arg("switch")
        .arg("--control")
        .arg(ctl)
        .args(["--json", "port", "stats", port])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let p = &v[port];
    Some((
        p["connections"].as_u64()?,
        p["rx"]["bytes"].as_u64()? + p["tx"]["bytes"].as_u64()?,
    ))
}

fn qemu_pid(dir: &Path, name: &str) -> u64 {
    let state = std::fs::read_to_string(dir.join(format!("state/{name}/state.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&state).unwrap();
    v["pid"].as_u64().unwrap()
}

/// The image (built or cached), or why the test cannot run here.
fn image() -> Result<String, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root".into());
    }
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err("no qemu-system-x86_64".into());
    }
    let built = Command::new(VNIO)
        .args(["vm", "image", "build"])
        .output()
        .unwrap();
    if !built.status.success() {
        let err = text(&built.stderr);
        if err.contains("no static vnio for the guest") {
            return Err(err.trim().to_string());
        }
        panic!("vnio vm image build: {err}");
    }
    Ok(text(&built.stdout)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().last())
        .unwrap()
        .to_string())
}

#[test]
fn a_tcp_stream_between_guests_survives_a_switch_restart() {
    let image = match image() {
        Ok(i) => i,
        Err(why) => {
            println!("skip: guests across a switch restart: {why}");
            return;
        }
    };
    let t0 = Instant::now();
    let n = (std::process::id() % 200) as u8 + 20;
    let dir = std::env::temp_dir().join(format!("vnio-guest-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut work = Work {
        dir: dir.clone(),
        vms: Vec::new(),
    };
    let cfg = switch_config(&dir);
    let mut switch = start_switch_logged(&cfg, log_file(&cfg));
    let t = Instant::now();
    while !dir.join("a.sock").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the switch's sockets"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ip = |g: u8| format!("10.{n}.0.{g}");
    launch_guests(&dir, &image, &ip, &mut work);
    println!("booted in {:.0} s", t0.elapsed().as_secs_f64());
    let pids = [qemu_pid(&dir, "ra"), qemu_pid(&dir, "rb")];
    let boot_id = |name| guest_sh(&dir, name, "cat /proc/sys/kernel/random/boot_id", "10s");
    let boots = [boot_id("ra"), boot_id("rb")];
    let sender = start_paced_stream(&dir, ip(12));
    // Mid-transfer (some MiB arrived): SIGKILL, then the same switch again.
    let at_kill = wait_for_a_mib(&dir, t0);
    switch.0.kill().unwrap();
    let _ = switch.0.wait();
    println!("switch killed");
    let killed = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let _switch = start_switch_logged(&cfg, log_file(&cfg));
    let (back, flowing) = wait_until_flowing(&dir.join("ctl.sock"), &cfg, killed);
    let s = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64();
    println!(
        "killed with {at_kill} bytes received; restarted 1 s later; both vNICs reconnected {:.1} s and a MiB through the new switch {:.1} s after the kill",
        s(back),
        s(flowing)
    );
    let sent = sender.join().expect("the sender");
    stream_arrived_intact(&dir, &sent);
    assert_eq!(
        [qemu_pid(&dir, "ra"), qemu_pid(&dir, "rb")],
        pids,
        "the same QEMUs"
    );
    for pid in pids {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "QEMU {pid} runs"
        );
    }
    assert_eq!([boot_id("ra"), boot_id("rb")], boots, "no guest rebooted");
    println!(
        "{KIB} KiB intact across the restart; took {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}

/// The switch's configuration in `dir`: port a listens, port b dials.
fn switch_config(dir: &Path) -> PathBuf {
    let d = dir.display();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/ctl.sock\"\n\
             [[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"{d}/a.sock\"\n\
             [[port]]\nname = \"b\"\nkind = \"vhost-user\"\nsocket = \"{d}/b.sock\"\nmode = \"client\"\n"
        ),
    )
    .unwrap();
    cfg
}

/// Guests ra and rb (TCG) booted: a: QEMU dials the switch
/// (reconnect=1); b: QEMU listens (server=on) and the switch dials it.
fn launch_guests(dir: &Path, image: &str, ip: &dyn Fn(u8) -> String, work: &mut Work) {
    let d = dir.display();
    for (name, nic, g) in [("ra", "a.sock", 11), ("rb", "b.sock,server", 12)] {
        let nic = format!("vhost-user:{d}/{nic},ip={}/24", ip(g));
        let out = vm(
            dir,
            &[
                "run", "--name", name, "--nic", &nic, "--accel", "tcg", "--image", image,
            ],
        );
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        work.vms.push(name);
    }
    for name in ["ra", "rb"] {
        let t = Instant::now();
        while !vm(dir, &["exec", "--timeout", "10s", name, "true"])
            .status
            .success()
        {
            assert!(t.elapsed() < Duration::from_secs(300), "{name} booted");
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// b listens (busybox nc stops at the end of its stdin: a pipe that
/// stays open); a sends KIB random KiB, a MiB every half second, to `to`.
/// The pace keeps the stream going for 12 s at least: asking the receiving
/// guest how much arrived can take seconds under TCG, and a transfer
/// sent at full speed may be over before the switch is killed. The sender
/// returns what a printed (the md5 first).
fn start_paced_stream(dir: &Path, to: String) -> std::thread::JoinHandle<String> {
    guest_sh(
        dir,
        "rb",
        "(sleep 900 | nc -l -p 5001 > /tmp/recv 2>/dev/null) > /dev/null 2>&1 &",
        "10s",
    );
    let dir2 = dir.to_path_buf();
    std::thread::spawn(move || {
        let send = format!(
            "dd if=/dev/urandom of=/tmp/out bs=1024 count={KIB} 2>/dev/null && md5sum < /tmp/out && \
             i=0; while [ $i -lt {mib} ]; do dd if=/tmp/out bs=1048576 skip=$i count=1 2>/dev/null; i=$((i+1)); sleep 0.5; done \
             | nc -w 60 {to} 5001",
            mib = KIB / 1024
        );
        guest_sh(&dir2, "ra", &send, "600s")
    })
}

/// Bytes guest b received so far. (A TCG guest busy receiving may answer
/// slowly: a late answer is 0.)
fn received(dir: &Path, t0: Instant) -> u64 {
    let out = vm(
        dir,
        &["exec", "--timeout", "30s", "rb", "wc", "-c", "/tmp/recv"],
    );
    let n = text(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|w| w.parse::<u64>().ok())
        .unwrap_or(0);
    println!("{:.1} s: {n} bytes received", t0.elapsed().as_secs_f64());
    n
}

/// Waits until a MiB reached b; the bytes received then.
fn wait_for_a_mib(dir: &Path, t0: Instant) -> u64 {
    let t = Instant::now();
    let mut at_kill = received(dir, t0);
    while at_kill < 1 << 20 {
        assert!(t.elapsed() < Duration::from_secs(300), "the transfer began");
        std::thread::sleep(Duration::from_millis(200));
        at_kill = received(dir, t0);
    }
    at_kill
}

/// Both QEMUs back on the restarted switch (at `ctl`), and the stream
/// flowing through it again (a MiB crossed port b): when each happened
/// after `killed`.
fn wait_until_flowing(
    ctl: &Path,
    cfg: &Path,
    killed: Instant,
) -> (Option<Duration>, Option<Duration>) {
    let (mut back, mut flowing) = (None, None);
    let mut last = None;
    while flowing.is_none() {
        // TCG guests on a busy 2-CPU host: a stream that stalled for the
        // restart resumes on its TCP retransmission timer, which backs off.
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "the stream resumed after the restart (vNICs back after {back:?}; a and b (connections, bytes): {last:?}); the switches' log:\n{}",
            std::fs::read_to_string(cfg.with_extension("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
        let (Some(a), Some(b)) = (port_counters(ctl, "a"), port_counters(ctl, "b")) else {
            continue;
        };
        last = Some((a, b));
        if a.0 > 0 && b.0 > 0 && back.is_none() {
            back = Some(killed.elapsed());
        }
        if b.1 > 1 << 20 {
            flowing = Some(killed.elapsed());
        }
    }
    (back, flowing)
}

/// Every byte a `sent` reached b, with its md5.
fn stream_arrived_intact(dir: &Path, sent: &str) {
    let sent_md5 = sent.split_whitespace().next().unwrap_or("").to_string();
    let wait = format!(
        "n=0; while [ \"$(wc -c < /tmp/recv)\" -lt {} ] && [ $n -lt 300 ]; do usleep 100000; n=$((n+1)); done; md5sum < /tmp/recv; wc -c < /tmp/recv",
        KIB * 1024
    );
    let got = guest_sh(dir, "rb", &wait, "60s");
    let got: Vec<&str> = got.split_whitespace().collect();
    assert_eq!(
        (got.first().copied(), got.last().copied()),
        (
            Some(sent_md5.as_str()),
            Some((KIB * 1024).to_string().as_str())
        ),
        "the TCP stream arrived intact across the restart"
    );
}
