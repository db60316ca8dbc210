//! The switch knobs the shell benches became (root: a real run, about
//! 15 s): an egress limit holds a poll-mode vNIC's rate, a latency-high
//! policy lands on the port `port_policy_hosts` names (its worker busy-polls
//! a core, which the testbed's CPU accounting sees), and the other knobs
//! (coalescing, LRO, budget, uplink capacity) reach the switch and the
//! stored testbed; nothing is left behind. And the `lro` scenario's TCP
//! stream between two poll-mode endpoints (about 8 s): LRO off delivers
//! MTU segments, on 64 KiB aggregates, every byte as sent. And poll-mode
//! endpoints on hugepages (about 5 s): the pool raised for the run and
//! given back.

use std::path::{Path, PathBuf};
use std::process::Command;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

const SCENARIO: &str = r#"
title = "switch knobs"
maps_to = "the benches' knobs"

[run]
duration = "500ms"
warmup = "100ms"
iterations = 2

[knobs]
testbed_cpu = true
uplink_capacity_mbit = 1000
poll_mode_wait = true

[[host]]
name = "client"
kind = "poll-mode"

[[host]]
name = "kclient"

[[host]]
name = "echo"
kind = "poll-mode"

[[host]]
name = "server"
remote = true

[[configuration]]
name = "plain"
wire = "switch"

[[configuration]]
name = "knobs"
wire = "switch"
knobs = { egress_limit_mbit = { client = 5 }, coalesce = "off", lro = false, switch_budget = 8, port_policy = "latency-high", port_policy_hosts = ["echo"], uplink_queues = 3 }

[[workload]]
name = "big"
kind = "rr"
from = "client"
to = "server"
protocol = "udp"
size = 1472
response_size = 64
rate = 2000

[[workload]]
name = "echo"
kind = "rr"
from = "kclient"
to = "echo"
protocol = "udp"
size = 64
rate = 1000

[[finding]]
id = "policy-takes-a-core"
study = "test"
claim = "latency-high busy-polls"
workload = "echo"
statistic = "switch-busy"
subject = { configuration = "knobs" }
against = { configuration = "plain" }
expect = "above"
"#;

fn vnio(journal: &Path, args: &[&str]) -> String {
    let out = Command::new(VNIO)
        .env("VNIO_LAB_JOURNAL", journal)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vnio {args:?}:\n{text}");
    text
}

/// A fresh directory for test `tag`: its journal and results store, and
/// (when `scenario` is given) a scenario file holding it.
fn workdir(tag: &str, scenario: Option<&str>) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("vnio-lab-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (journal, db, file) = (
        dir.join("journal"),
        dir.join("lab.db"),
        dir.join(format!("{tag}.toml")),
    );
    if let Some(text) = scenario {
        std::fs::write(&file, text).unwrap();
    }
    (dir, journal, db, file)
}

#[test]
fn switch_knobs_reach_the_switch_and_the_testbed_cpu_is_stored() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the run needs root (network namespaces)");
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: latency-high needs two CPUs (one to dedicate)");
        return;
    }
    let (dir, journal, db, file) = workdir("knobs", Some(SCENARIO));
    let db_arg = db.to_str().unwrap();
    vnio(
        &journal,
        &["lab", "run", file.to_str().unwrap(), "--db", db_arg],
    );

    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let sc = &run.scenarios[0];
    let point = |cfg: &str, w: &str| {
        sc.points
            .iter()
            .find(|o| o.point.configuration == cfg && o.point.workload.name == w)
            .unwrap_or_else(|| panic!("no point {cfg}/{w}"))
    };
    for o in &sc.points {
        assert_eq!(o.status.as_str(), "ok", "{:?}", o.error);
        let doc = o.document.as_ref().unwrap();
        // One measurement per iteration, each with the testbed's CPU.
        assert_eq!(doc.iterations.len(), 2);
        for it in &doc.iterations {
            let names: Vec<&str> = it.testbed_cost.iter().map(|c| c.name.as_str()).collect();
            assert!(names.contains(&"switch"), "{names:?}");
            assert!(names.contains(&"endpoint echo"), "{names:?}");
            let sw = &it.testbed_cost[0];
            assert!(sw.cpu_ns > 0 && sw.ns_per_op > 0.0, "{sw:?}");
        }
    }
    // 1472 B requests at 2000/s ask 24 Mbit/s: the 5 Mbit/s limit holds
    // the client's port to about 420 a second, the open port sends them all.
    let rate = |cfg: &str| {
        let doc = point(cfg, "big").document.as_ref().unwrap();
        doc.chosen().unwrap().merged.ops_per_s
    };
    let (open, limited) = (rate("plain"), rate("knobs"));
    assert!(limited < 600.0, "limited to 5 Mbit/s: {limited}/s");
    assert!(open > 2.0 * limited, "open {open}/s vs limited {limited}/s");
    // The policy went to echo's port (its dedicated worker busy-polls).
    let busy = |cfg: &str| {
        let doc = point(cfg, "echo").document.as_ref().unwrap();
        let it = doc.chosen().unwrap();
        it.testbed_cost
            .iter()
            .find(|c| c.name == "switch")
            .unwrap()
            .busy_pct
    };
    let (plain, high) = (busy("plain"), busy("knobs"));
    assert!(
        high > 25.0 && high > plain,
        "switch busy: {plain:.0} % plain, {high:.0} % with echo latency-high"
    );
    let notes = sc
        .testbeds
        .iter()
        .find(|t| t.configuration == "knobs")
        .unwrap()
        .notes
        .join("; ");
    for want in [
        "switch LRO off",
        "switch egress limits: client 5 Mbit/s",
        "switch budget 8",
        "latency-high on the ports of echo",
        "egress capacity 1000 Mbit/s",
        "coalesce = off",
    ] {
        assert!(notes.contains(want), "{want:?} in {notes}");
    }
    // The finding reads the stored testbed CPU.
    let findings = vnio(&journal, &["lab", "findings", "--db", db_arg, "--json"]);
    assert!(findings.contains("policy-takes-a-core"), "{findings}");
    // Nothing left: the journal holds no entry a clean would remove.
    let clean = vnio(&journal, &["lab", "clean"]);
    assert!(clean.contains("clean: 0 removed, 0 failed"), "{clean}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lro_scenario_merges_a_poll_mode_tcp_stream() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the run needs root (network namespaces)");
        return;
    }
    let (dir, journal, db, _) = workdir("lro", None);
    let db_arg = db.to_str().unwrap();
    vnio(
        &journal,
        &[
            "lab",
            "run",
            "lro",
            "--duration",
            "500ms",
            "--warmup",
            "100ms",
            "--iterations",
            "2",
            "--db",
            db_arg,
        ],
    );
    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let frames_per_mib = |cfg: &str| {
        let o = run.scenarios[0]
            .points
            .iter()
            .find(|o| o.point.configuration == cfg)
            .unwrap();
        assert_eq!(o.status.as_str(), "ok", "{cfg}: {:?}", o.error);
        let doc = o.document.as_ref().unwrap();
        for it in &doc.iterations {
            assert!(
                it.merged.bytes > 1 << 20,
                "{cfg}: {} bytes",
                it.merged.bytes
            );
            assert_eq!(it.merged.lost, 0, "{cfg}: the window keeps every byte");
            assert!(it.testbed_cost.iter().any(|c| c.name == "switch"));
        }
        let it = doc.chosen().unwrap();
        it.merged.ops as f64 / (it.merged.bytes as f64 / (1 << 20) as f64)
    };
    // 1448-byte segments: 724 per MiB; aggregates of up to 64 KiB: ~16.
    let (off, on) = (frames_per_mib("lro-off"), frames_per_mib("lro-on"));
    assert!(
        (700.0..760.0).contains(&off),
        "LRO off: {off:.1} frames/MiB"
    );
    assert!(on < 200.0, "LRO on: {on:.1} frames/MiB");
    let clean = vnio(&journal, &["lab", "clean"]);
    assert!(clean.contains("clean: 0 removed, 0 failed"), "{clean}");
    let _ = std::fs::remove_dir_all(&dir);
}

const HUGE: &str = r#"
title = "endpoint pages"
maps_to = "the pair's endpoints on 4 KiB and 2 MiB pages"

[run]
duration = "500ms"
warmup = "100ms"
iterations = 2

[knobs]
switch_busy_poll = true

[[host]]
name = "a"
kind = "poll-mode"

[[host]]
name = "b"
kind = "poll-mode"

[[configuration]]
name = "small"
wire = "switch"

[[configuration]]
name = "huge"
wire = "switch"
knobs = { endpoint_hugepages = true }

[[workload]]
name = "rate-64"
kind = "stream"
from = "a"
to = "b"
protocol = "udp"
size = 22
"#;

/// The kernel's pool of 2 MiB hugepages.
fn pool() -> u64 {
    std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn endpoints_on_hugepages_measure_and_the_pool_goes_back() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the run needs root (network namespaces, the hugepage pool)");
        return;
    }
    let (dir, journal, db, file) = workdir("huge", Some(HUGE));
    let before = pool();
    vnio(
        &journal,
        &[
            "lab",
            "run",
            file.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ],
    );
    assert_eq!(pool(), before, "the pool is given back");
    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    for (cfg, huge) in [("small", false), ("huge", true)] {
        let o = run.scenarios[0]
            .points
            .iter()
            .find(|o| o.point.configuration == cfg)
            .unwrap();
        assert_eq!(o.status.as_str(), "ok", "{cfg}: {:?}", o.error);
        let doc = o.document.as_ref().unwrap();
        assert_eq!(doc.params["hugepages"], huge, "{cfg}");
        for it in &doc.iterations {
            assert!(it.merged.ops > 10_000, "{cfg}: {} frames", it.merged.ops);
        }
    }
    let clean = vnio(&journal, &["lab", "clean"]);
    assert!(clean.contains("clean: 0 removed, 0 failed"), "{clean}");
    let _ = std::fs::remove_dir_all(&dir);
}
