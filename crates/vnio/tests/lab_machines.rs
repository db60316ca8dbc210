//! `vnio lab` across machines, end to end through the real SSH path: the
//! machine is a network namespace running its own sshd (scripts/lab-machines),
//! reached with the system's `ssh`. A two-machine run of the shipped
//! `across-machines` scenario (plain wire, VXLAN overlay, poll-mode endpoints
//! on the overlay) stores and reports like a local run and leaves nothing on
//! either machine; a SIGKILLed run leaves its parts on both, and `vnio lab
//! clean` removes them all. Root, sshd and ssh needed (`skip:` otherwise).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod machines;

use machines::{ready_or_skip, Machines};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");
fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-machines-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn base36(mut n: u32) -> String {
    const D: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(D[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

fn lab(journal: &Path) -> Command {
    let mut c = Command::new(VNIO);
    c.arg("lab").env("VNIO_LAB_JOURNAL", journal);
    c
}

/// Everything of run `pid` still there, on this machine and on m1 (whose
/// file system is this one): namespaces, scratch directories, links in
/// either machine's own namespace, processes (the far side's carry its
/// scratch directory in their environment, SSH's its control path in their
/// command line), and journal lines.
fn leftovers(pid: u32, journal: &Path) -> Vec<String> {
    let id = format!("{}x", base36(pid));
    let mut out = Vec::new();
    for (dir, prefix) in [
        ("/run/netns", format!("vnio-{id}")),
        ("/run/vnio/lab", format!("vnio-lab-{id}")),
    ] {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                out.push(format!("{dir}/{}", e.file_name().to_string_lossy()));
            }
        }
    }
    if let Ok(mut h) = vnio_lab::Handle::root() {
        for l in h.links().unwrap_or_default() {
            if l.name.contains(&id) {
                out.push(format!("link {} here", l.name));
            }
        }
    }
    // m1's own namespace (the machine's "root").
    let m1 = Command::new("ip")
        .args(["-n", "vnio-m1", "-o", "link"])
        .output();
    for l in m1.iter().flat_map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .into_owned()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    }) {
        if l.contains(&id) {
            out.push(format!("link on m1: {l}"));
        }
    }
    let marker = format!("vnio-lab-{id}");
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = p.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == std::process::id().to_string() {
            continue;
        }
        let environ = std::fs::read(p.path().join("environ")).unwrap_or_default();
        let cmd = std::fs::read_to_string(p.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).contains(&marker) || cmd.contains(&marker) {
            out.push(format!("process {name}: {}", cmd.replace('\0', " ")));
        }
    }
    for j in [journal.to_path_buf(), journal.with_extension("machines")] {
        let text = std::fs::read_to_string(&j).unwrap_or_default();
        if !text.trim().is_empty() {
            out.push(format!(
                "{}: {}",
                j.display(),
                text.trim().replace('\n', " | ")
            ));
        }
    }
    out
}

fn settled_leftovers(pid: u32, journal: &Path) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = leftovers(pid, journal);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_run_across_machines_stores_reports_and_leaves_nothing_also_when_killed() {
    if !ready_or_skip() {
        return;
    }
    let _machines = Machines::up();
    let dir = temp("run");
    let journal = dir.join("journal");
    let db = dir.join("lab.db");
    let report = dir.join("report.html");

    // A whole run: every configuration built on both machines, measured,
    // stored, reported, removed.
    let pid = run_across_machines(&journal, &db, &report);
    every_configuration_measured(&db);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(
        html.contains("m1") && html.contains("clock"),
        "the report shows the machines"
    );
    let left = settled_leftovers(pid, &journal);
    assert!(left.is_empty(), "a run across machines left: {left:?}");

    // SIGKILL once the far side is built: its parts stay on both machines
    // until `vnio lab clean`.
    let pid = killed_once_the_far_side_is_built(&journal, &db);
    let out = lab(&journal).arg("clean").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vnio lab clean: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("removed machine m1"), "{stdout}");
    let left = settled_leftovers(pid, &journal);
    assert!(left.is_empty(), "after clean: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vnio lab run across-machines` to its end, into `db` and `report`; its pid.
fn run_across_machines(journal: &Path, db: &Path, report: &Path) -> u32 {
    let started = Instant::now();
    let child = lab(journal)
        .args([
            "run",
            "across-machines",
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
        ])
        .args(["--iterations", "1", "--db"])
        .arg(db)
        .arg("--report")
        .arg(report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vnio lab run: {stderr}");
    eprintln!("across-machines ran in {:?}", started.elapsed());
    pid
}

/// The run is complete: every point measured or skipped, the expected ones
/// measured; each testbed records the machine, its interface and its clock.
fn every_configuration_measured(db: &Path) {
    let store = vnio_lab::store::Store::open(db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    assert_eq!(run.row.status, "complete");
    let s = &run.scenarios[0];
    let mut measured = Vec::new();
    for p in &s.points {
        use vnio_lab::runner::Status;
        assert!(
            matches!(p.status, Status::Ok | Status::Skipped),
            "{:?}: {:?} {:?}",
            p.point.configuration,
            p.status,
            p.error
        );
        if p.status == Status::Ok {
            let m = &p.document.as_ref().unwrap().chosen().unwrap().merged;
            assert!(m.ops > 0, "{}: nothing measured", p.point.configuration);
            measured.push(format!(
                "{}/{}",
                p.point.configuration, p.point.workload.name
            ));
        }
    }
    for want in [
        "wire/rr-udp",
        "wire/rr-tcp",
        "overlay/rr-udp",
        "overlay/rr-tcp",
        "overlay-pmd/rr-udp",
    ] {
        assert!(
            measured.iter().any(|m| m == want),
            "{want} measured: {measured:?}"
        );
    }
    assert_eq!(s.testbeds.len(), 3);
    for bed in &s.testbeds {
        let m = &bed.machines[0];
        assert_eq!(
            (m.name.as_str(), m.address.as_str(), m.interface.as_str()),
            ("m1", "10.99.0.2", "eth0")
        );
        let clock = m.clock.as_ref().expect("clock measured");
        // One host, one clock: the offset is within its own uncertainty.
        assert!(
            clock.offset_ns.unsigned_abs() <= clock.uncertainty_ns + 1_000,
            "{clock:?}"
        );
        assert!(clock.samples >= 8 && clock.rtt_ns > 0, "{clock:?}");
        let server = bed.hosts.iter().find(|h| h.name == "server").unwrap();
        assert_eq!(server.machine.as_deref(), Some("m1"));
    }
}

/// A run of the overlay configuration SIGKILLed once m1's namespace is
/// built and it measures: it leaves its far side. Its pid.
fn killed_once_the_far_side_is_built(journal: &Path, db: &Path) -> u32 {
    let mut child = lab(journal)
        .args([
            "run",
            "across-machines",
            "-c",
            "overlay",
            "--duration",
            "30s",
            "--iterations",
            "1",
            "--db",
        ])
        .arg(db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let far = format!("vnio-{}x", base36(pid));
    let deadline = Instant::now() + Duration::from_secs(60);
    let built = loop {
        let remote_ns = std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(&far) && n.contains("-m1-")
            });
        let measuring = std::fs::read_to_string(journal).is_ok_and(|j| j.contains("process"));
        if remote_ns && measuring || Instant::now() > deadline {
            break remote_ns;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The far side's agent is up once its namespace has one; give the
    // controller a moment to start measuring.
    std::thread::sleep(Duration::from_secs(2));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(built, "the far side was never built");
    let before = leftovers(pid, journal);
    assert!(
        before.iter().any(|l| l.contains("-m1-")) && before.iter().any(|l| l.contains("machines")),
        "a SIGKILLed run leaves its far side: {before:?}"
    );
    pid
}

/// A scenario is code: its `ssh_options` that run commands are refused in
/// one line naming the option unless the run says `--trust-scenario`, and
/// then they run (a ProxyCommand that leaves a mark, then fails).
#[test]
fn ssh_options_that_run_commands_need_trust() {
    if !ready_or_skip() {
        return;
    }
    let dir = temp("trust");
    let mark = dir.join("proxy-command-ran");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/across-machines.toml"),
    )
    .unwrap()
    .replace(
        "ssh_config = \"/run/vnio/machines/ssh_config\"",
        // No SSH configuration file: the ProxyCommand runs before any
        // connection, so no machine needs to be up.
        &format!(
            "ssh_options = [\"Port=22\", \"proxycommand=touch {} && false\"]",
            mark.display()
        ),
    );
    assert!(text.contains("proxycommand="), "the machine entry moved");
    let file = dir.join("planted.toml");
    std::fs::write(&file, text).unwrap();
    let run = |trust: bool| {
        let mut c = lab(&dir.join("journal"));
        c.arg("run").arg(&file);
        c.args([
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--iterations",
            "1",
        ]);
        c.arg("--db").arg(dir.join("lab.db"));
        if trust {
            c.arg("--trust-scenario");
        }
        c.stdin(Stdio::null()).output().unwrap()
    };
    let out = run(false);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("untrusted: {}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("machine `m1`: ssh_options \"proxycommand=touch"),
        "{err}"
    );
    assert!(err.contains("--trust-scenario"), "{err}");
    assert!(!mark.exists(), "the ProxyCommand ran");
    // Trusted, it runs (the machine's points then fail: the proxy
    // connects nothing).
    let out = run(true);
    assert!(
        mark.exists(),
        "--trust-scenario lets the ProxyCommand run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
