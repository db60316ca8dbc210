//! `vnio lab` end to end on the real kernel (root): the quick set with a
//! short duration builds, runs, stores and reports, and leaves no
//! namespace, link, process or scratch directory behind; a run killed with
//! SIGKILL is cleaned up by `vnio lab clean`; the report opens in headless
//! Chromium and its figures render; a scenario with a guest (QEMU) on a
//! switch port and on a tap on a Linux bridge runs, stores its accelerator
//! and leaves no QEMU, tap, socket or namespace, also after SIGKILL and
//! `vnio lab clean`. Bad input fails in one line, as any user. A small
//! scenario with findings yields its verdicts through `vnio lab findings`.

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-run-{}-{tag}", std::process::id()));
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

/// Names of everything a lab run with pid `pid` creates start with this
/// (namespaces `vnio-ID-...`, scratch `vnio-lab-ID`, ID = base36(pid)x...).
fn run_id(pid: u32) -> String {
    format!("{}x", base36(pid))
}

fn lab(journal: &Path) -> Command {
    let mut c = Command::new(VNIO);
    c.arg("lab").env("VNIO_LAB_JOURNAL", journal);
    c
}

/// Inode numbers of the run's namespaces, watched while it runs: after it,
/// no process may still be in (or hold a descriptor of) any of them.
fn watch_namespaces(pid: u32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<HashSet<u64>> {
    use std::os::unix::fs::MetadataExt;
    let prefix = format!("vnio-{}", run_id(pid));
    std::thread::spawn(move || {
        let mut inodes = HashSet::new();
        while !done.load(Ordering::Relaxed) {
            if let Ok(dir) = std::fs::read_dir("/run/netns") {
                for e in dir.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&prefix) {
                        if let Ok(m) = std::fs::metadata(e.path()) {
                            inodes.insert(m.ino());
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        inodes
    })
}

/// Everything of run `pid` that still exists, one line each.
fn leftovers(pid: u32, journal: &Path, namespaces: &HashSet<u64>) -> Vec<String> {
    let id = run_id(pid);
    let mut out = Vec::new();
    // Named namespaces and scratch directories.
    for (dir, prefix) in [
        ("/run/netns", format!("vnio-{id}")),
        ("/run/vnio/lab", format!("vnio-lab-{id}")),
    ] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    out.push(format!("{dir}/{}", e.file_name().to_string_lossy()));
                }
            }
        }
    }
    // Root-namespace links, through netlink.
    if let Ok(mut h) = vnio_lab::Handle::root() {
        for l in h.links().unwrap_or_default() {
            if l.name.contains(&id) {
                out.push(format!("link {}", l.name));
            }
        }
    }
    // Processes: every child inherits the run's journal path.
    let marker = format!("VNIO_LAB_JOURNAL={}", journal.display());
    let unnamed: HashSet<String> = namespaces.iter().map(|i| format!("net:[{i}]")).collect();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let name = p.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) || name == std::process::id().to_string() {
                continue;
            }
            let environ = std::fs::read(p.path().join("environ")).unwrap_or_default();
            if environ.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()) {
                let cmd = std::fs::read_to_string(p.path().join("cmdline")).unwrap_or_default();
                out.push(format!("process {name}: {}", cmd.replace('\0', " ")));
            }
            // A process in, or holding, one of the run's namespaces.
            let mut links = vec![p.path().join("ns/net")];
            if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
                links.extend(fds.flatten().map(|f| f.path()));
            }
            for l in links {
                if let Ok(target) = std::fs::read_link(&l) {
                    if unnamed.contains(target.to_string_lossy().as_ref()) {
                        out.push(format!("{} -> {}", l.display(), target.display()));
                    }
                }
            }
        }
    }
    // The journal lists nothing.
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    if !text.trim().is_empty() {
        out.push(format!("journal: {}", text.trim().replace('\n', " | ")));
    }
    out
}

/// Leftovers after giving killed processes a moment to go.
fn settled_leftovers(pid: u32, journal: &Path, namespaces: &HashSet<u64>) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = leftovers(pid, journal, namespaces);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `vnio lab` command started with its namespaces watched, so that what
/// it leaves can be checked once it has ended or been killed.
struct Watched {
    child: Child,
    done: Arc<AtomicBool>,
    watcher: std::thread::JoinHandle<HashSet<u64>>,
}

impl Watched {
    fn start(cmd: &mut Command) -> Self {
        let child = cmd.spawn().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let watcher = watch_namespaces(child.id(), done.clone());
        Self {
            child,
            done,
            watcher,
        }
    }

    /// Its output once it has ended, and the namespaces it made.
    fn finish(self) -> (Output, HashSet<u64>) {
        let out = self.child.wait_with_output().unwrap();
        self.done.store(true, Ordering::Relaxed);
        (out, self.watcher.join().unwrap())
    }

    /// SIGKILLs it, as a crash would: it cleans nothing up. The namespaces
    /// it made.
    fn kill(mut self) -> HashSet<u64> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.done.store(true, Ordering::Relaxed);
        self.watcher.join().unwrap()
    }
}

/// What a run that ended left to check: its output and the namespaces it
/// made (all gone).
struct Finished {
    stdout: String,
    stderr: String,
    namespaces: HashSet<u64>,
}

/// Runs `cmd` (a `vnio lab run`, journal at `journal`) to its end and
/// asserts that it succeeded (`what` failed, otherwise) and that nothing of
/// it is left.
/// A scenario run to its end in a fresh temporary directory (its journal,
/// store and report there), leaving nothing behind.
struct ScenarioRun {
    dir: PathBuf,
    journal: PathBuf,
    db: PathBuf,
    report: PathBuf,
    run: Finished,
}

fn run_scenario(tag: &str, text: &str, what: &str) -> ScenarioRun {
    let dir = temp(tag);
    let (journal, db, report) = (
        dir.join("journal"),
        dir.join("lab.db"),
        dir.join(format!("{tag}.html")),
    );
    let scenario = dir.join(format!("{tag}.toml"));
    std::fs::write(&scenario, text).unwrap();
    let run = run_leaving_nothing(
        lab(&journal)
            .arg("run")
            .arg(&scenario)
            .arg("--db")
            .arg(&db)
            .arg("--report")
            .arg(&report),
        &journal,
        what,
    );
    ScenarioRun {
        dir,
        journal,
        db,
        report,
        run,
    }
}

fn run_leaving_nothing(cmd: &mut Command, journal: &Path, what: &str) -> Finished {
    let run = Watched::start(cmd.stdout(Stdio::piped()).stderr(Stdio::piped()));
    let pid = run.child.id();
    let (out, namespaces) = run.finish();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    let left = settled_leftovers(pid, journal, &namespaces);
    assert!(left.is_empty(), "left behind:\n{}", left.join("\n"));
    Finished {
        stdout,
        stderr,
        namespaces,
    }
}

/// `vnio lab clean` after run `pid` was killed: it succeeds and nothing of
/// the run is left. What clean said.
fn clean_leaves_nothing(journal: &Path, pid: u32, namespaces: &HashSet<u64>) -> String {
    let said = succeeds(lab(journal).arg("clean"));
    let left = settled_leftovers(pid, journal, namespaces);
    assert!(left.is_empty(), "left after clean:\n{}", left.join("\n"));
    said
}

/// Runs `cmd` to its end and asserts that it succeeded; its stdout.
fn succeeds(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The quick set and the guest run take turns: TCG guests booting next to
/// the quick set's measurements starve its contention generators (on 2
/// CPUs a load server then answers nothing), which is a result about the
/// machine, not a failure of the lab.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn root_or_skip(what: &str) -> bool {
    if vnio_lab::is_root() {
        return true;
    }
    eprintln!("skipped {what}: network namespaces need root");
    false
}

#[test]
fn quick_set_builds_runs_stores_reports_and_leaves_nothing() {
    if !root_or_skip("the quick set") {
        return;
    }
    let _turn = heavy();
    let dir = temp("quick");
    let (journal, db, report) = (
        dir.join("journal"),
        dir.join("lab.db"),
        dir.join("quick.html"),
    );
    run_quick_set(&journal, &db, &report);
    store_holds_every_point(&db);
    let html = report_rerenders_identically(&journal, &db, &report, &dir);
    let verdicts = findings_judged(&journal, &db, &html);
    second_run_compares(&journal, &db, &dir);
    let outcomes: HashSet<&str> = verdicts
        .iter()
        .map(|v| v["outcome"].as_str().unwrap())
        .collect();
    screenshot_shows_the_verdicts_and_figures(&report, &dir, &outcomes);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vnio lab run quick --quick` into `db` and `report`: it says where the
/// report is, built namespaces and left nothing.
fn run_quick_set(journal: &Path, db: &Path, report: &Path) {
    let run = run_leaving_nothing(
        lab(journal)
            .args([
                "run",
                "quick",
                "--quick",
                "--duration",
                "300ms",
                "--warmup",
                "100ms",
            ])
            .arg("--db")
            .arg(db)
            .arg("--report")
            .arg(report),
        journal,
        "vnio lab run quick",
    );
    assert!(
        run.stdout
            .contains(&format!("report: {}", report.display())),
        "{}",
        run.stdout
    );
    assert!(
        run.namespaces.len() >= 4,
        "the run built namespaces ({:?})",
        run.namespaces
    );
}

/// The store holds every scenario of the set and every point.
fn store_holds_every_point(db: &Path) {
    let store = vnio_lab::store::Store::open(db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    assert_eq!(run.row.status, "complete");
    assert_eq!(run.scenarios.len(), 8, "the quick set's scenarios");
    let mut measured = 0;
    for s in &run.scenarios {
        assert!(!s.testbeds.is_empty(), "{}: testbeds recorded", s.name);
        for p in &s.points {
            use vnio_lab::runner::Status;
            assert_ne!(
                p.status,
                Status::Failed,
                "{} {:?}: {:?}",
                s.name,
                p.point,
                p.error
            );
            if p.status == Status::Ok {
                measured += 1;
                let doc = p.document.as_ref().unwrap();
                let m = &doc.chosen().unwrap().merged;
                // Under a flood a shared queue may starve the probe (the
                // finding itself); elsewhere something must be measured.
                assert!(
                    m.ops > 0 || p.contention.is_some(),
                    "{} {}: nothing measured",
                    s.name,
                    p.point.configuration
                );
                if p.point.workload.kind != vnio_lab::scenario::WorkloadKind::Stream {
                    assert!(m.histogram.is_some(), "histograms stored");
                }
            }
            // Contention ran and says what it achieved.
            let errors = p.contention.as_ref().map(|c| &c.errors);
            if let Some(l) = p.contention.as_ref().and_then(|c| c.loads.as_ref()) {
                assert!(
                    l.achieved_rate > 0.0 && l.cpu_pct > 0.0,
                    "{} {}: {l:?} {errors:?}",
                    s.name,
                    p.point.configuration
                );
            }
            if let Some(f) = p.contention.as_ref().and_then(|c| c.flood.as_ref()) {
                assert!(
                    f.sent_pps > 0.0 && f.received_pps > 0.0,
                    "{} {}: {f:?} {errors:?}",
                    s.name,
                    p.point.configuration
                );
            }
        }
    }
    assert!(measured >= 40, "{measured} points measured");
    // The poll-mode configurations ran through the switch's endpoint.
    let nbs = run
        .scenarios
        .iter()
        .find(|s| s.name == "native-bridge-switch")
        .unwrap();
    for cfg in ["switch-poll-server", "switch-poll-client"] {
        let p = nbs
            .points
            .iter()
            .find(|p| p.point.configuration == cfg && p.point.workload.name == "rr-udp")
            .unwrap();
        assert_eq!(
            p.status,
            vnio_lab::runner::Status::Ok,
            "{cfg}: {:?}",
            p.error
        );
    }
}

/// The report re-renders from the store alone, identically; its HTML.
fn report_rerenders_identically(journal: &Path, db: &Path, report: &Path, dir: &Path) -> String {
    let again = dir.join("again.html");
    succeeds(
        lab(journal)
            .args(["report", "last", "--db"])
            .arg(db)
            .arg("-o")
            .arg(&again),
    );
    let html = std::fs::read_to_string(report).unwrap();
    assert_eq!(html, std::fs::read_to_string(&again).unwrap());
    assert!(html.matches("<svg").count() >= 14, "figures in the report");
    html
}

/// Every finding the shipped scenarios declare is judged from the store,
/// each verdict the rule's over its band, with a reason; the report shows
/// them. Returns the verdicts.
fn findings_judged(journal: &Path, db: &Path, html: &str) -> Vec<serde_json::Value> {
    let json = succeeds(
        lab(journal)
            .args(["findings", "last", "--json", "--db"])
            .arg(db),
    );
    let found: serde_json::Value = serde_json::from_str(&json).unwrap();
    let verdicts = found["verdicts"].as_array().unwrap().clone();
    assert!(verdicts.len() >= 15, "{} verdicts", verdicts.len());
    for v in &verdicts {
        verdict_follows_its_band(v);
    }
    let flat = verdicts
        .iter()
        .find(|v| v["id"] == "flat-beyond-cpus")
        .unwrap();
    assert!(
        flat["why"].as_str().unwrap().contains("was not measured"),
        "--quick leaves out 2 sessions: {flat}"
    );
    assert!(html.contains("verdicts of this run"));
    verdicts
}

/// A second run of one scenario compares with the first.
fn second_run_compares(journal: &Path, db: &Path, dir: &Path) {
    succeeds(
        lab(journal)
            .args([
                "run",
                "ping-sessions",
                "-c",
                "native",
                "--quick",
                "--duration",
                "200ms",
                "--warmup",
                "100ms",
                "--db",
            ])
            .arg(db),
    );
    let cmp = dir.join("cmp.html");
    let text = succeeds(
        lab(journal)
            .args(["compare", "last-1", "last", "--db"])
            .arg(db)
            .arg("-o")
            .arg(&cmp),
    );
    assert!(text.contains("2 common points"), "{text}");
    assert!(std::fs::read_to_string(&cmp).unwrap().contains("<svg"));
}

/// A small real scenario with findings: native (veth) and Linux bridge
/// between two namespaces, ping and UDP rr, two iterations of 300 ms. The
/// verdicts come from the store through `vnio lab findings --json`, with
/// the numbers behind them; which verdict this machine gives is its own
/// business, the shape and the consistency are the test's.
const FINDINGS_SCENARIO: &str = r#"
title = "findings end to end"
maps_to = "a test"
cannot = "anything"
[run]
duration = "300ms"
warmup = "100ms"
iterations = 2
[[host]]
name = "client"
[[host]]
name = "server"
[[configuration]]
name = "native"
wire = "veth"
[[configuration]]
name = "bridge"
wire = "bridge"
[[workload]]
name = "ping"
kind = "ping"
from = "client"
to = "server"
[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
protocol = "udp"
[[finding]]
id = "bridge-adds-latency"
study = "Network I/O Latency on VMware vSphere 5"
claim = "a virtual path adds 15-20 us per round trip over native"
workload = "rr"
statistic = "p50"
subject = { configuration = "bridge" }
against = { configuration = "native" }
expect = "above"
reference = [15, 20]
[[finding]]
id = "idle-tail-within-2x-mean"
study = "Network I/O Latency on VMware vSphere 5"
claim = "the 99th percentile within two times the mean when idle"
workload = "ping"
statistic = "tail-ratio"
subject = { configuration = "native" }
expect = "below"
than = 2
reference = 2
"#;

/// A verdict of `vnio lab findings --json` is the rule's over its band:
/// reproduced when the band is wholly on the study's side of `than`, not
/// reproduced when wholly on the other, else (or with no band: a point
/// not measured, a single sample) inconclusive; and it says why.
fn verdict_follows_its_band(v: &serde_json::Value) {
    assert!(!v["why"].as_str().unwrap().is_empty(), "{v}");
    let outcome = v["outcome"].as_str().unwrap();
    let (lo, hi) = (v["band"]["lo"].as_f64(), v["band"]["hi"].as_f64());
    let than = v["than"].as_f64().unwrap();
    let want = match (v["expect"].as_str().unwrap(), lo, hi) {
        ("above", Some(lo), _) if lo > than => "reproduced",
        ("above", _, Some(hi)) if hi <= than => "not-reproduced",
        ("below", _, Some(hi)) if hi < than => "reproduced",
        ("below", Some(lo), _) if lo >= than => "not-reproduced",
        _ => "inconclusive",
    };
    assert_eq!(outcome, want, "{v}");
}

#[test]
fn a_stored_run_yields_its_verdicts_through_vnio_lab_findings() {
    if !root_or_skip("the findings run") {
        return;
    }
    let _turn = heavy();
    let ScenarioRun {
        dir,
        journal,
        db,
        report,
        run,
    } = run_scenario("findings", FINDINGS_SCENARIO, "vnio lab run findings.toml");
    assert!(run.stdout.contains("findings: "), "{}", run.stdout);

    let json = succeeds(
        lab(&journal)
            .args(["findings", "last", "--json", "--db"])
            .arg(&db),
    );
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["name"], "findings");
    assert!(doc["run"].as_i64().unwrap() >= 1);
    let verdicts = doc["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2, "{json}");
    for v in verdicts {
        let id = v["id"].as_str().unwrap();
        assert_eq!(v["scenario"], "findings", "{id}");
        let outcome = v["outcome"].as_str().unwrap();
        assert!(
            ["reproduced", "not-reproduced", "inconclusive"].contains(&outcome),
            "{id}: {outcome}"
        );
        assert!(!v["why"].as_str().unwrap().is_empty(), "{id}");
        assert!(v["claim"].is_string() && v["study"].is_string(), "{id}");
        // Both points were measured, two iterations each: a value, a band
        // holding it; a percentile over all round trips of both
        // iterations with its order-statistic interval, the tail ratio
        // over the two iterations.
        let value = v["value"].as_f64().unwrap_or_else(|| panic!("{id}: {v}"));
        let band = &v["band"];
        let (lo, hi) = (band["lo"].as_f64().unwrap(), band["hi"].as_f64().unwrap());
        assert!(lo <= value && value <= hi, "{id}: {value} in [{lo}, {hi}]");
        let subject = &v["subject"];
        if v["statistic"] == "p50" {
            assert!(
                subject["samples"].as_u64().unwrap() > 100,
                "{id}: {subject}"
            );
            assert_eq!(subject["source"], "order-statistics", "{id}");
            assert!(
                v["why"]
                    .as_str()
                    .unwrap()
                    .contains("95% confidence interval"),
                "{v}"
            );
        } else {
            assert_eq!(subject["samples"], 2, "{id}: {subject}");
            assert_eq!(subject["source"], "iterations", "{id}");
        }
        assert!(subject["value"].as_f64().unwrap() > 0.0, "{id}");
        verdict_follows_its_band(v);
    }
    let bridge = verdicts
        .iter()
        .find(|v| v["id"] == "bridge-adds-latency")
        .unwrap();
    assert_eq!(bridge["quantity"], "difference");
    assert_eq!(bridge["against"]["point"], "native");
    assert_eq!(bridge["reference"], serde_json::json!([15.0, 20.0]));
    assert_eq!(bridge["mark"]["values"].as_array().unwrap().len(), 2);

    // The same table on the terminal, and at the top of the report.
    let text = succeeds(lab(&journal).args(["findings", "--db"]).arg(&db));
    for v in verdicts {
        let id = v["id"].as_str().unwrap();
        let line = text.lines().find(|l| l.contains(id)).unwrap();
        let shown = v["outcome"].as_str().unwrap().replace('-', " ");
        assert!(line.contains(&shown), "{line}");
    }
    let html = std::fs::read_to_string(&report).unwrap();
    let top = html.find("verdicts of this run").unwrap();
    assert!(top < html.find("<section id=\"s0\"").unwrap());
    assert!(
        html.contains("study: bridge-adds-latency"),
        "the figure's mark"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The background of the report's table rows of class `outcome`, from its
/// CSS rule `tr.OUTCOME td,...{background:#rrggbb}`.
fn row_background(html: &str, outcome: &str) -> [u8; 3] {
    let rule = format!("tr.{outcome} td");
    let at = html
        .find(&rule)
        .unwrap_or_else(|| panic!("no CSS rule for {outcome} rows"));
    let hex = html[at..]
        .split_once("background:#")
        .and_then(|(_, rest)| rest.get(..6))
        .unwrap_or_else(|| panic!("no background for {outcome} rows"));
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    [byte(0), byte(2), byte(4)]
}

/// Headless Chromium opens the report: the verdict table opens it, with
/// rows in the colour of every outcome the run's verdicts have; the first
/// figure's bars are there in the percentile colours, and the page is not
/// blank.
fn screenshot_shows_the_verdicts_and_figures(report: &Path, dir: &Path, outcomes: &HashSet<&str>) {
    let Some(chromium) = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        eprintln!("skipped the screenshot check: no chromium (scripts/setup --e2e installs it)");
        return;
    };
    let shot = dir.join("report.png");
    let mut cmd = Command::new(chromium);
    cmd.args([
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1000,4000",
    ])
    .arg(format!("--screenshot={}", shot.display()))
    .arg(format!("file://{}", report.display()))
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if vnio_lab::is_root() {
        cmd.arg("--no-sandbox");
    }
    // Bounded: a browser that hangs fails the test instead of blocking it.
    let mut child = cmd.process_group(0).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let pixels = buf[..info.buffer_size()].chunks(channels);
    let mut colours = HashSet::new();
    let (mut bars, mut non_white) = (0usize, 0usize);
    // The verdict rows' backgrounds, read from the report's own CSS: pixels
    // and the first screen row of each.
    let html = std::fs::read_to_string(report).unwrap();
    let verdict_colours = ["reproduced", "not-reproduced", "inconclusive"]
        .map(|outcome| (outcome, row_background(&html, outcome)));
    let mut verdict_px = [(0usize, usize::MAX); 3];
    let width = info.width as usize;
    // The percentile colours of the bars (p50 to p99.99).
    let bar_colours: [[u8; 3]; 5] = [
        [158, 202, 225],
        [107, 174, 214],
        [49, 130, 189],
        [8, 81, 156],
        [8, 48, 107],
    ];
    for (k, px) in pixels.enumerate() {
        let rgb = [px[0], px[1], px[2]];
        colours.insert(rgb);
        if rgb != [255, 255, 255] {
            non_white += 1;
        }
        if bar_colours.contains(&rgb) {
            bars += 1;
        }
        if let Some(i) = verdict_colours.iter().position(|(_, c)| *c == rgb) {
            verdict_px[i].0 += 1;
            verdict_px[i].1 = verdict_px[i].1.min(k / width);
        }
    }
    for (i, (outcome, _)) in verdict_colours.iter().enumerate() {
        if outcomes.contains(outcome) {
            // A table row's background: hundreds of pixels wide, a line high.
            let n = verdict_px[i].0;
            assert!(n > 2000, "{n} pixels of the {outcome} rows' colour");
        }
    }
    // The table opens the report: its first row is in the first screen
    // (a 1000 px window), above the scenarios' tables and figures.
    let first = verdict_px.iter().map(|&(_, row)| row).min().unwrap();
    assert!(
        first < 1000,
        "the verdict table's first row is at y {first}"
    );
    let total = (info.width * info.height) as usize;
    assert!(
        colours.len() > 50,
        "{} distinct colours: blank page?",
        colours.len()
    );
    assert!(
        non_white > total / 50,
        "{non_white} of {total} pixels are not white"
    );
    assert!(
        bars > 2000,
        "{bars} pixels in the bars' colours: the figures did not render"
    );
}

#[test]
fn a_killed_run_is_removed_by_clean() {
    if !root_or_skip("the killed run") {
        return;
    }
    let dir = temp("killed");
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    // Contention on, so load processes are running when the run dies.
    let scenario = dir.join("busy.toml");
    std::fs::write(
        &scenario,
        r#"
title = "busy"
maps_to = "a test"
cannot = "anything"
[run]
duration = "30s"
warmup = "100ms"
iterations = 1
[[host]]
name = "client"
[[host]]
name = "server"
[[host]]
name = "neighbour"
[[host]]
name = "loadgen"
[[configuration]]
name = "switch"
wire = "switch"
[contention.loads]
count = 2
on = "neighbour"
from = "loadgen"
rate = 1000
work_us = 20
[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
"#,
    )
    .unwrap();
    let mut run = Watched::start(
        lab(&journal)
            .arg("run")
            .arg(&scenario)
            .arg("--db")
            .arg(&db)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let pid = run.child.id();
    // Wait until the switch, 4 agents, 2 load servers and the driver run.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        if text.lines().filter(|l| l.starts_with("process ")).count() >= 8 {
            break;
        }
        assert!(
            run.child.try_wait().unwrap().is_none(),
            "the run ended early: {text}"
        );
        assert!(
            Instant::now() < deadline,
            "contention never started: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let namespaces = run.kill();
    std::thread::sleep(Duration::from_millis(200));
    let before = leftovers(pid, &journal, &namespaces);
    assert!(
        before.iter().filter(|l| l.starts_with("process ")).count() >= 7
            && before.iter().any(|l| l.starts_with("/run/netns/")),
        "a SIGKILLed run leaves its parts: {before:?}"
    );

    let text = clean_leaves_nothing(&journal, pid, &namespaces);
    assert!(text.contains("removed netns vnio-"), "{text}");

    // The store says the run was killed.
    let out = lab(&journal)
        .args(["list", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("busy") && l.contains("killed")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_fails_in_one_line_and_leaves_nothing() {
    let dir = temp("bad");
    let journal = dir.join("journal");
    let db = dir.join("never.db");
    let one_line = |args: &[&str], want: &str| {
        let out = lab(&journal)
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    };
    one_line(
        &["run", "no-such-scenario"],
        "no scenario named \"no-such-scenario\"",
    );
    let typo = dir.join("typo.toml");
    std::fs::write(&typo, "title = \"t\"\nmaps_to = \"m\"\ncolour = 3\n").unwrap();
    one_line(
        &["run", typo.to_str().unwrap()],
        "typo.toml:3:1: unknown field `colour`",
    );
    let vm_veth = dir.join("vmveth.toml");
    std::fs::write(
        &vm_veth,
        "title = \"t\"\nmaps_to = \"m\"\n[[host]]\nname = \"a\"\nkind = \"vm\"\n[[host]]\nname = \"b\"\n\
         [[configuration]]\nname = \"c\"\nwire = \"veth\"\n[[workload]]\nname = \"p\"\nkind = \"ping\"\nfrom = \"b\"\nto = \"a\"\n",
    )
    .unwrap();
    one_line(
        &["run", vm_veth.to_str().unwrap()],
        "a VM host needs wire = \"switch\"",
    );
    one_line(
        &["run", "rr-size", "-c", "nope"],
        "no configuration \"nope\"",
    );
    one_line(&["report", "last"], "no results store");
    // Without root: one line saying so, nothing created.
    let mut cmd = lab(&journal);
    cmd.args(["run", "quick", "--db"]).arg(&db);
    if vnio_lab::is_root() {
        cmd.uid(65_534).gid(65_534);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("needs root"), "{err}");
    assert!(!db.exists(), "no store created by refused runs");
    assert!(!journal.exists(), "no journal written by refused runs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A namespace and a guest, on the switch and on the Linux bridge: traffic
/// both ways (ping to the guest from the namespace, TCP rr from inside the
/// guest), short. The switch port's coalescing is off: with the default
/// adaptive policy a TCG guest's round trips stall for tens to hundreds of
/// milliseconds (see docs/lab.md, vm-vm), and 300 ms may then hold no
/// transaction at all; this test is about the lab's plumbing.
const GUEST_SCENARIO: &str = r#"
title = "guest"
maps_to = "a test"
cannot = "anything"
[run]
duration = "300ms"
warmup = "100ms"
iterations = 1
[[host]]
name = "native"
[[host]]
name = "g"
kind = "vm"
[[configuration]]
name = "switch"
wire = "switch"
knobs = { coalesce = "off" }
[[configuration]]
name = "bridge"
wire = "bridge"
[[workload]]
name = "ping"
kind = "ping"
from = "native"
to = "g"
[[workload]]
name = "rr-from-guest"
kind = "rr"
from = "g"
to = "native"
"#;

/// What the guest tests need (root, QEMU, the guests' static vnio, which
/// `scripts/setup --e2e` builds), or `false` after one "skip:" line.
fn guests_or_skip(what: &str) -> bool {
    let why = if !vnio_lab::is_root() {
        "needs root (namespaces, taps)".to_owned()
    } else if let Err(e) = vnio_vm::accel::qemu_version() {
        e.to_string()
    } else if let Err(e) = vnio_vm::image::find_guest_vnio(None) {
        e.to_string()
    } else {
        return true;
    };
    println!("skip: {what}: {why}");
    false
}

/// The run's guests: QEMU processes with the run's journal variable whose
/// state is in a lab scratch directory (not `qemu --version` and the like).
fn qemus(journal: &Path) -> Vec<u32> {
    let marker = format!("VNIO_LAB_JOURNAL={}", journal.display());
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
        let environ = std::fs::read(p.path().join("environ")).unwrap_or_default();
        let cmdline = std::fs::read_to_string(p.path().join("cmdline")).unwrap_or_default();
        if comm.starts_with("qemu-system")
            && cmdline.contains("/run/vnio/lab/vnio-lab-")
            && environ.split(|&b| b == 0).any(|kv| kv == marker.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn a_guest_run_stores_its_accelerator_and_leaves_nothing_also_when_killed() {
    if !guests_or_skip("the lab with a guest") {
        return;
    }
    let _turn = heavy();
    let ScenarioRun {
        dir,
        journal,
        db,
        report,
        run,
    } = run_scenario("guest", GUEST_SCENARIO, "the guest run");
    println!("{}", run.stderr);

    // Stored: the accelerator with the run, each guest with its testbed,
    // every point measured both ways.
    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    assert_eq!(run.row.status, "complete");
    let guests = run.guests.as_ref().expect("the guests' environment");
    assert!(
        ["kvm", "tcg"].contains(&guests.accel.as_str()),
        "{guests:?}"
    );
    let s = &run.scenarios[0];
    assert_eq!(s.testbeds.len(), 2);
    for bed in &s.testbeds {
        let g = bed.hosts.iter().find(|h| h.name == "g").unwrap();
        let launched = g.guest.as_ref().expect("the guest as launched");
        assert_eq!(launched.accel, guests.accel);
        assert!(launched.ready_s > 0.0);
        println!(
            "{}: guest on {}, ready {:.1} s after QEMU started ({})",
            bed.configuration, launched.nic, launched.ready_s, launched.accel
        );
    }
    for p in &s.points {
        assert_eq!(
            p.status,
            vnio_lab::runner::Status::Ok,
            "{} {}: {:?}",
            p.point.configuration,
            p.point.workload.name,
            p.error
        );
        let m = &p.document.as_ref().unwrap().chosen().unwrap().merged;
        assert!(
            m.ops > 0,
            "{} {}",
            p.point.configuration,
            p.point.workload.name
        );
    }
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains(&format!(
        "<td class=\"l\">{} (",
        guests.accel.to_uppercase()
    )));

    // Killed while its guest boots: the orphaned QEMU goes with `clean`.
    let log = dir.join("killed.log");
    let mut run = Watched::start(
        lab(&journal)
            .arg("run")
            .arg(dir.join("guest.toml"))
            .args(["-c", "bridge", "--db"])
            .arg(&db)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap()),
    );
    let pid = run.child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while qemus(&journal).is_empty() {
        assert!(
            run.child.try_wait().unwrap().is_none(),
            "the run ended early"
        );
        assert!(Instant::now() < deadline, "no QEMU started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the launcher finish (tap moved onto the bridge, guest running).
    std::thread::sleep(Duration::from_secs(2));
    let before = qemus(&journal);
    assert!(
        run.child.try_wait().unwrap().is_none(),
        "the run ended early"
    );
    let namespaces = run.kill();
    assert!(
        !qemus(&journal).is_empty(),
        "QEMU outlives the killed run (before the kill: {before:?}; journal: {}; the run said: {})",
        std::fs::read_to_string(&journal).unwrap_or_default(),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    clean_leaves_nothing(&journal, pid, &namespaces);
    assert!(qemus(&journal).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
