//! `vnio lab run switch-anchors` end to end (root, dpdk-testpmd and DPDK's
//! development files; OVS-DPDK when installed): vnio's switch, testpmd's
//! io forwarding and OVS-DPDK each forward every workload between the
//! lab's DPDK endpoints, with sane rates second by second and ordered
//! round-trip percentiles; the run stores every point and judges the
//! ratios, and the hugepages, the hugetlbfs, DPDK's run-time directories,
//! the processes and the journal are given back. About 25 s with
//! `--quick`. The same with the lab's own endpoints (`--knob
//! endpoints=vnio`, vnio's switch and testpmd, about 12 s; dpdk-testpmd
//! only): every point measured, and the run records the knob and its
//! findings and report say so. On packed virtqueues (`--knob
//! virtqueue=packed`, vnio's switch and OVS-DPDK, about 20 s): every point
//! measured, and vnio's switch says it served packed rings in order on
//! both ports. And `latency-shield --quick` (about 15 s):
//! every configuration measured with CPU 1 shielded, every task put back
//! in the root cpuset afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

use vnio_lab::runner::Status;
use vnio_lab::store::Store;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// One run at a time: a shield moves every other task, a concurrent run's
/// busy-polling switch included.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-anchors-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn nr_hugepages() -> String {
    std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap()
}

fn hugetlbfs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter(|l| l.contains("hugetlbfs") && l.contains("vnio-lab-"))
        .map(str::to_owned)
        .collect()
}

fn dpdk_runtime_dirs() -> Vec<PathBuf> {
    std::fs::read_dir("/var/run/dpdk")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains("vnio-lab-"))
                .collect()
        })
        .unwrap_or_default()
}

fn journal_lines(journal: &Path) -> Vec<String> {
    std::fs::read_to_string(journal)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// True as root; otherwise says which test is skipped, and why.
fn root_or_skip(what: &str) -> bool {
    if vnio_lab::is_root() {
        return true;
    }
    eprintln!("skipped {what}: hugepages and namespaces need root");
    false
}

/// Runs `vnio lab run switch-anchors --quick` with `args` after it in a
/// store of its own under `dir`, checking that the hugepages, the
/// hugetlbfs, DPDK's run-time directories, the lab's DPDK programs and
/// the journal are as before; the run as stored.
fn run_anchors(dir: &Path, args: &[&str]) -> vnio_lab::store::StoredRun {
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    let huge_before = nr_hugepages();
    let out = Command::new(VNIO)
        .args(["lab", "run", "switch-anchors", "--quick"])
        .args(args)
        .arg("--db")
        .arg(&db)
        .arg("--report")
        .arg(dir.join("anchors.html"))
        .env("VNIO_LAB_JOURNAL", &journal)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "vnio lab run switch-anchors {args:?}:\n{said}"
    );

    // Everything given back: no program left running, no hugepages, no
    // DPDK run-time directory, nothing in the journal.
    assert!(dpdk_pairs().is_empty(), "{:?}", dpdk_pairs());
    assert_eq!(nr_hugepages(), huge_before, "hugepages restored");
    assert!(hugetlbfs_mounts().is_empty(), "{:?}", hugetlbfs_mounts());
    assert!(dpdk_runtime_dirs().is_empty(), "{:?}", dpdk_runtime_dirs());
    assert!(
        journal_lines(&journal).is_empty(),
        "{:?}",
        journal_lines(&journal)
    );
    let store = Store::open(&db).unwrap();
    store.load(store.resolve("last").unwrap()).unwrap()
}

/// `vnio lab findings --json` of the last run in `dir`'s store.
fn findings_json(dir: &Path) -> serde_json::Value {
    let out = Command::new(VNIO)
        .args(["lab", "findings", "--json", "--db"])
        .arg(dir.join("lab.db"))
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Processes running the lab's DPDK endpoint program.
fn dpdk_pairs() -> Vec<String> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path().join("exe")).ok())
                .map(|exe| exe.display().to_string())
                .filter(|exe| exe.contains("dpdk-pair/pair-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn switch_anchors_drives_every_switch_with_the_dpdk_endpoints_and_gives_everything_back() {
    if !root_or_skip("the anchor switches") {
        return;
    }
    if let Some(why) = vnio_lab::anchor_switch::missing(vnio_lab::scenario::WireKind::Testpmd)
        .or_else(vnio_lab::pair::program::missing)
    {
        println!("skip: the anchor switches with the DPDK endpoints: {why}");
        return;
    }
    let ovs = vnio_lab::anchor_switch::missing(vnio_lab::scenario::WireKind::OvsDpdk);
    let _turn = turn();
    let dir = temp("dpdk");
    let run = run_anchors(&dir, &[]);
    assert!(run.overrides.knobs.is_empty(), "the scenario as shipped");

    // Every installed switch forwarded every workload, driven by the DPDK
    // program.
    let points = &run.scenarios[0].points;
    assert_eq!(points.len(), 9, "3 switches x 3 workloads");
    let two_cpus = std::thread::available_parallelism().unwrap().get() >= 2;
    for p in points {
        let cfg = p.point.configuration.as_str();
        let at = format!("{cfg} {}", p.point.workload.name);
        if cfg == "ovs-dpdk" && ovs.is_some() {
            assert_eq!(p.status, Status::Skipped, "{p:?}");
            assert!(p
                .error
                .as_ref()
                .unwrap()
                .contains("openvswitch-switch-dpdk"));
            continue;
        }
        assert_eq!(p.status, Status::Ok, "{at}: {:?}", p.error);
        let doc = p.document.as_ref().unwrap();
        assert_eq!(doc.params["endpoints"], "dpdk", "{at}");
        assert_eq!(doc.params["hugepages"], true, "{at}");
        let it = &doc.iterations[doc.chosen];
        let m = &it.merged;
        let slack = in_flight_at_open(&doc.params);
        assert!(m.ops > 0 && m.ops <= m.sent + slack, "{at}: {m:?}");
        assert!(
            it.client_cost.cpu.total_ns() > 0,
            "{at}: {:?}",
            it.client_cost
        );
        // A point a second (--quick measures 1 s), what they count adding
        // up to no more than the window's total.
        assert!(!it.intervals.is_empty(), "{at}: no per-second points");
        let counted: u64 = it.intervals.iter().map(|i| i.ops).sum();
        assert!(counted > 0 && counted <= m.ops, "{at}: {:?}", it.intervals);
        if p.point.workload.name.starts_with("rate") {
            assert!(m.ops_per_s > 1000.0, "{at}: {m:?}");
            assert_eq!(m.bytes, m.ops * u64::from(p.point.workload.size), "{at}");
            if two_cpus {
                // The line probe ran beside the rate (placement_probe).
                assert!(
                    it.line_round_trip.is_some() || !it.errors.is_empty(),
                    "{at}: {it:?}"
                );
            }
        } else {
            let lat = m.latency.as_ref().unwrap();
            assert!(lat.min_ns > 0, "{at}: {lat:?}");
            assert!(
                lat.min_ns <= lat.p50_ns
                    && lat.p50_ns <= lat.p99_ns
                    && lat.p99_ns <= lat.p999_ns
                    && lat.p999_ns <= lat.max_ns,
                "{at}: {lat:?}"
            );
            assert_eq!(lat.count, m.ops, "{at}: every round trip in the histogram");
            assert!(m.histogram.is_some(), "{at}");
        }
    }
    let testbeds = &run.scenarios[0].testbeds;
    assert!(testbeds.iter().all(|b| b
        .notes
        .iter()
        .any(|n| n.contains("lab's DPDK program") && n.contains("on hugepages"))));
    assert!(testbeds.iter().any(|b| b
        .notes
        .iter()
        .any(|n| n.contains("dpdk-testpmd io forwarding"))));
    assert!(testbeds
        .iter()
        .any(|b| b.notes.iter().any(|n| n.contains("busy-poll"))));
    if two_cpus {
        assert_switch_seconds(points);
    }

    // The ratios are judged (one quick iteration: inconclusive is fine):
    // both rates and the round trip's p50 and p99, against each anchor.
    let v = findings_json(&dir);
    assert!(v.get("knob_overrides").is_none(), "{v}");
    let verdicts = v["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 8);
    for f in verdicts
        .iter()
        .filter(|f| f["id"].as_str().unwrap().ends_with("testpmd"))
    {
        assert!(f["value"].as_f64().is_some_and(|r| r > 0.0), "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn switch_anchors_with_the_labs_own_endpoints_is_one_knob_away() {
    if !root_or_skip("the lab's own endpoints") {
        return;
    }
    if let Some(why) = vnio_lab::anchor_switch::missing(vnio_lab::scenario::WireKind::Testpmd) {
        println!("skip: the anchor switches with the lab's own endpoints: {why}");
        return;
    }
    let _turn = turn();
    let dir = temp("own");
    let run = run_anchors(
        &dir,
        &["--knob", "endpoints=vnio", "-c", "vnio", "-c", "testpmd"],
    );
    // The run records the knob: it is not the scenario as shipped.
    let knobs: Vec<String> = run.overrides.knobs.iter().map(|k| k.to_string()).collect();
    assert_eq!(knobs, ["endpoints = \"vnio\""]);

    let points = &run.scenarios[0].points;
    assert_eq!(points.len(), 6, "2 switches x 3 workloads");
    for p in points {
        let cfg = p.point.configuration.as_str();
        let at = format!("{cfg} {}", p.point.workload.name);
        assert_eq!(p.status, Status::Ok, "{at}: {:?}", p.error);
        let doc = p.document.as_ref().unwrap();
        assert_ne!(doc.params["endpoints"], "dpdk", "{at}: {}", doc.params);
        assert_measured(
            &at,
            &p.point.workload.name,
            &doc.iterations[doc.chosen].merged,
            in_flight_at_open(&doc.params),
        );
    }
    let testbeds = &run.scenarios[0].testbeds;
    assert!(testbeds
        .iter()
        .all(|b| !b.notes.iter().any(|n| n.contains("lab's DPDK program"))));

    // Its findings and its report say which knob it set.
    let v = findings_json(&dir);
    assert_eq!(
        v["knob_overrides"],
        serde_json::json!([{ "key": "endpoints", "value": "vnio" }])
    );
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 8);
    let html = std::fs::read_to_string(dir.join("anchors.html")).unwrap();
    assert!(
        html.contains("endpoints = &quot;vnio&quot; (--knob, over &quot;dpdk&quot; in [knobs])"),
        "the report says what the knob replaced"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn placement_seconds_repeat_the_whole_plan_until_each_placement_has_them() {
    if !root_or_skip("placement seconds") {
        return;
    }
    if std::thread::available_parallelism().unwrap().get() < 2 {
        println!("skip: placement seconds: the line probe needs two CPUs");
        return;
    }
    let _turn = turn();
    let dir = temp("placed");
    // --quick measures 1 s per iteration: at most one whole second per
    // repetition, so 2 seconds at a placement take at least two.
    let run = run_anchors(
        &dir,
        &[
            "--knob",
            "endpoints=vnio",
            "-c",
            "vnio",
            "--placement-seconds",
            "2",
            "--max-iterations",
            "3",
        ],
    );
    let points = &run.scenarios[0].points;
    assert_eq!(points.len(), 3, "vnio x 3 workloads");
    let reps: Vec<usize> = points
        .iter()
        .map(|p| p.document.as_ref().unwrap().iterations.len())
        .collect();
    // Every repetition ran the whole plan, the unprobed round trip too.
    assert!(reps.iter().all(|&n| n == reps[0]), "{reps:?}");
    let placed: Vec<[usize; 2]> = points
        .iter()
        .filter_map(vnio_lab::findings::placement::seconds_placed)
        .collect();
    assert_eq!(placed.len(), 2, "both rates carry the probe: {placed:?}");
    println!("placement seconds: {reps:?} repetitions, placed (near, far) {placed:?}");
    assert_switch_seconds(points);
    let reached: Vec<usize> = (0..2)
        .filter(|&i| placed.iter().any(|c| c[i] > 0))
        .collect();
    if reached.is_empty() {
        // No second placed (the probe's threads did not get to run):
        // nothing to wait for, nothing repeated.
        assert_eq!(reps[0], 1, "{placed:?}");
    } else {
        assert!((2..=3).contains(&reps[0]), "{reps:?} {placed:?}");
        let enough = reached.iter().all(|&i| placed.iter().all(|c| c[i] >= 2));
        assert!(
            enough || reps[0] == 3,
            "stopped at {} repetitions short of 2 seconds: {placed:?}",
            reps[0]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every probed rate iteration on vnio's switch carries the switch's
/// figures of each whole second of its window, in range where read, and
/// some second of the run has them; no other iteration carries any.
fn assert_switch_seconds(points: &[vnio_lab::outcome::PointOutcome]) {
    let mut read = Vec::new();
    for p in points {
        let Some(doc) = &p.document else {
            continue;
        };
        let at = format!("{} {}", p.point.configuration, p.point.workload.name);
        let probed = !doc.params["placement_probe"].is_null();
        let on_vnio = p.point.configuration == "vnio";
        for it in &doc.iterations {
            if !(probed && on_vnio) {
                assert!(
                    it.switch_seconds.is_none(),
                    "{at}: not a probed rate on vnio's switch"
                );
                continue;
            }
            let seconds = it
                .switch_seconds
                .as_ref()
                .unwrap_or_else(|| panic!("{at} iteration {}: no switch seconds", it.index));
            assert_eq!(
                seconds.len(),
                it.seconds.floor() as usize,
                "{at}: {seconds:?}"
            );
            for s in seconds.iter().flatten() {
                assert!(s.busy > 0.0 && s.busy <= 1.0, "{at}: {s:?}");
                assert!(s.frames > 0, "{at}: {s:?}");
                assert!(
                    s.frames_per_busy_round.is_some_and(|f| f > 0.0),
                    "{at}: {s:?}"
                );
                assert!(
                    s.busy_ns_per_frame.is_some_and(|ns| ns > 0.0),
                    "{at}: {s:?}"
                );
                read.push((s.busy * 100.0).round() / 100.0);
            }
        }
    }
    println!("switch seconds read, busy: {read:?}");
    assert!(
        !read.is_empty(),
        "no second of the run has the switch's figures"
    );
}

#[test]
fn switch_anchors_on_packed_virtqueues_is_one_knob_away_and_vnio_serves_them() {
    if !root_or_skip("packed virtqueues") {
        return;
    }
    if let Some(why) = vnio_lab::pair::program::missing() {
        println!("skip: the anchor switches on packed virtqueues: {why}");
        return;
    }
    let ovs = vnio_lab::anchor_switch::missing(vnio_lab::scenario::WireKind::OvsDpdk);
    let _turn = turn();
    let dir = temp("packed");
    let run = run_anchors(
        &dir,
        &["--knob", "virtqueue=packed", "-c", "vnio", "-c", "ovs-dpdk"],
    );
    let knobs: Vec<String> = run.overrides.knobs.iter().map(|k| k.to_string()).collect();
    assert_eq!(knobs, ["virtqueue = \"packed\""]);

    let points = &run.scenarios[0].points;
    assert_eq!(points.len(), 6, "2 switches x 3 workloads");
    for p in points {
        let cfg = p.point.configuration.as_str();
        let at = format!("{cfg} {}", p.point.workload.name);
        if cfg == "ovs-dpdk" && ovs.is_some() {
            assert_eq!(p.status, Status::Skipped, "{p:?}");
            continue;
        }
        assert_eq!(p.status, Status::Ok, "{at}: {:?}", p.error);
        let doc = p.document.as_ref().unwrap();
        assert_eq!(doc.params["virtqueue"], "packed", "{at}");
        let m = &doc.iterations[doc.chosen].merged;
        assert_measured(
            &at,
            &p.point.workload.name,
            m,
            in_flight_at_open(&doc.params),
        );
        if p.point.workload.name.starts_with("rate") {
            println!("packed {at}: {:.3} Mpps", m.ops_per_s / 1e6);
        } else if let Some(lat) = &m.latency {
            let us = |ns: u64| ns as f64 / 1e3;
            println!(
                "packed {at}: p50 {:.2} us, p99 {:.2} us",
                us(lat.p50_ns),
                us(lat.p99_ns)
            );
        }
        // vnio's switch itself says it served both ports packed rings in
        // order, read from its control socket while the point ran.
        if cfg == "vnio" {
            assert_eq!(
                doc.params["rings"],
                serde_json::json!({ "a": "packed in-order", "b": "packed in-order" }),
                "{at}: {}",
                doc.params
            );
        } else {
            assert!(doc.params.get("rings").is_none(), "{at}: {}", doc.params);
        }
    }
    let testbeds = &run.scenarios[0].testbeds;
    assert!(testbeds.iter().all(|b| b
        .notes
        .iter()
        .any(|n| n.contains("packed virtqueues in order"))));

    // Its findings and its report say which layout was measured.
    let v = findings_json(&dir);
    assert_eq!(
        v["knob_overrides"],
        serde_json::json!([{ "key": "virtqueue", "value": "packed" }])
    );
    let html = std::fs::read_to_string(dir.join("anchors.html")).unwrap();
    assert!(
        html.contains("virtqueue = &quot;packed&quot; (--knob; unset in the file)"),
        "the report says the layout"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Frames a rate window may count beyond those it sent in it: frames sent
/// during the warm-up and still in flight when the window opened (in A's
/// transmit ring or B's receive ring) arrive in the window. At most two
/// rings' worth: the point's `queue_size`, or the endpoints' 256.
fn in_flight_at_open(params: &serde_json::Value) -> u64 {
    2 * params
        .get("queue_size")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(256)
}

/// Asserts that point `at` (workload `workload`) measured something: a
/// rate above 1000 frames/s, one way (no more arrived than were sent, but
/// for the `slack` in flight when the window opened), or a round trip with
/// a p50 no longer than its p99.
fn assert_measured(at: &str, workload: &str, m: &vnio_measure::result::Measured, slack: u64) {
    if workload.starts_with("rate") {
        assert!(
            m.ops_per_s > 1000.0 && m.ops <= m.sent + slack,
            "{at}: {m:?}"
        );
    } else {
        let lat = m.latency.as_ref().unwrap();
        assert!(lat.p50_ns > 0 && lat.p50_ns <= lat.p99_ns, "{at}: {lat:?}");
    }
}

fn shield_cpusets() -> Vec<PathBuf> {
    std::fs::read_dir(vnio_topo_cpuset_root())
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains("vnio-lab-shield-"))
                .collect()
        })
        .unwrap_or_default()
}

fn vnio_topo_cpuset_root() -> &'static str {
    "/sys/fs/cgroup/cpuset"
}

#[test]
fn latency_shield_measures_with_cpu_1_shielded_and_puts_every_task_back() {
    if !vnio_lab::is_root() {
        eprintln!("skipped the shielded run: namespaces and cpusets need root");
        return;
    }
    let root = Path::new(vnio_topo_cpuset_root());
    if !root.join("cgroup.procs").exists()
        || std::thread::available_parallelism().unwrap().get() < 2
    {
        println!("skip: the shielded run: no cgroup v1 cpuset controller, or one CPU");
        return;
    }
    let _turn = turn();
    let dir = temp("shield");
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    let out = Command::new(VNIO)
        .args(["lab", "run", "latency-shield", "--quick", "--db"])
        .arg(&db)
        .arg("--report")
        .arg(dir.join("shield.html"))
        .env("VNIO_LAB_JOURNAL", &journal)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vnio lab run latency-shield:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shield_cpusets().is_empty(), "{:?}", shield_cpusets());
    assert!(
        journal_lines(&journal).is_empty(),
        "{:?}",
        journal_lines(&journal)
    );
    // This test's process was moved with every other task, and put back.
    let mine = std::fs::read_to_string("/proc/self/cpuset").unwrap();
    assert_eq!(mine.trim(), "/");
    let store = Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let sc = &run.scenarios[0];
    assert_eq!(sc.points.len(), 4);
    for p in &sc.points {
        assert_eq!(
            p.status,
            Status::Ok,
            "{}: {:?}",
            p.point.configuration,
            p.error
        );
    }
    for b in &sc.testbeds {
        assert!(
            b.notes.iter().any(|n| n.contains("shielded")),
            "{}: {:?}",
            b.configuration,
            b.notes
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
