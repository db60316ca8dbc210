//! Placement: the knob that runs the line probe beside rate iterations,
//! the store that keeps its round trips (and adds their column to a file
//! made before it), and ratio findings given per placement from stored
//! runs: near only, far only, mixed, and a side without seconds at a
//! placement. No root, no network.

use vnio_lab::findings::{self, Outcome, PlacementRatio, Verdict};
use vnio_lab::report;
use vnio_lab::runner::{PointOutcome, Status};
use vnio_lab::scenario::{self, Capabilities, LabFile, Overrides, Plan, Source};
use vnio_lab::store::Store;
use vnio_measure::env::Environment;
use vnio_measure::placement::{LineRoundTrips, Placement};
use vnio_measure::result::{Document, IntervalPoint, Iteration, Measured};
use vnio_measure::switch_seconds::SwitchSecond;

/// vnio's switch and another against the same poll-mode pair, the rate
/// compared as a ratio, the probe on.
const SCENARIO: &str = r#"
title = "placement test"
maps_to = "a test"
[run]
duration = "4s"
warmup = "1s"
iterations = 2
interleave = true
[knobs]
switch_cpus = [0]
client_cpus = [1]
placement_probe = true
[[host]]
name = "a"
kind = "poll-mode"
[[host]]
name = "b"
kind = "poll-mode"
[[configuration]]
name = "vnio"
wire = "switch"
[[configuration]]
name = "other"
wire = "switch"
[[workload]]
name = "rate-64"
kind = "stream"
from = "a"
to = "b"
protocol = "udp"
size = 22
[[finding]]
id = "vnio-rate-vs-other"
study = "anchor switches on this machine"
claim = "vnio forwards 64 B frames at least as fast as the other"
workload = "rate-64"
statistic = "rate"
quantity = "ratio"
subject = { configuration = "vnio" }
against = { configuration = "other" }
expect = "above"
than = 1
"#;

const NEAR: f64 = 100.0;
const FAR: f64 = 450.0;

/// One second: its rate and the probe's median round trip (None: too few
/// samples completed).
type Second = (u64, Option<f64>);

/// A rate iteration as the pair records it: one interval per whole second
/// (and a cut-short last one, which never counts), with the probe's
/// seconds when `probed`.
fn iteration(index: usize, seconds: &[Second], probed: bool) -> Iteration {
    let ops: u64 = seconds.iter().map(|s| s.0).sum();
    let length = seconds.len() as f64 + 0.2;
    let mut intervals: Vec<IntervalPoint> = seconds
        .iter()
        .enumerate()
        .map(|(t, s)| IntervalPoint {
            t_s: t as u64,
            ops: s.0,
            ..Default::default()
        })
        .collect();
    // The window's last fifth of a second: a rate far below the others,
    // and a round trip too, which must not count.
    intervals.push(IntervalPoint {
        t_s: seconds.len() as u64,
        ops: 1000,
        ..Default::default()
    });
    let mut per_second_ns: Vec<Option<f64>> = seconds.iter().map(|s| s.1).collect();
    per_second_ns.push(Some(NEAR));
    Iteration {
        index,
        seconds: length,
        merged: Measured {
            target: "all".into(),
            ops,
            ops_per_s: ops as f64 / length,
            ..Default::default()
        },
        intervals,
        line_round_trip: probed.then(|| LineRoundTrips {
            cpus: [0, 1],
            median_ns: per_second_ns.iter().flatten().copied().next(),
            samples: 10 * per_second_ns.len(),
            completed: 10 * per_second_ns.iter().flatten().count(),
            per_second_ns,
        }),
        ..Default::default()
    }
}

fn document(iterations: &[Vec<Second>], probed: bool) -> Document {
    let mut doc = Document::new(
        "stream",
        serde_json::json!({"kind": "pair-rate"}),
        vec!["10.77.0.2".into()],
        Environment::default(),
    );
    for (i, s) in iterations.iter().enumerate() {
        doc.iterations.push(iteration(i, s, probed));
    }
    doc.conclude();
    doc
}

fn temp_db(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-placement-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("lab.db")
}

/// Stores a run whose points' iterations are `of(configuration)`, the
/// probe's seconds kept when `probed`; its id.
fn store_run(store: &Store, probed: bool, of: impl Fn(&str) -> Vec<Vec<Second>>) -> i64 {
    store_documents(store, |cfg| document(&of(cfg), probed))
}

/// Stores a run whose points' documents are `of(configuration)`; its id.
fn store_documents(store: &Store, of: impl Fn(&str) -> Document) -> i64 {
    let file = scenario::parse("placement.toml", SCENARIO).unwrap();
    let LabFile::Scenario(s) = file.clone() else {
        panic!("a set")
    };
    let src = Source {
        name: "placement".into(),
        origin: "placement.toml".into(),
        text: SCENARIO.into(),
        file,
    };
    let o = Overrides::default();
    let plan = Plan::new(&s, &o, &Capabilities::current()).unwrap();
    let id = store
        .begin_run("placement", &s.title, "v-test", &Environment::default(), &o)
        .unwrap();
    store.add_scenario(id, 0, &src, &s, &plan).unwrap();
    for p in &plan.points {
        let out = PointOutcome {
            point: p.clone(),
            status: Status::Ok,
            error: None,
            document: Some(of(&p.configuration)),
            contention: None,
        };
        store.add_point(id, "placement", &out).unwrap();
    }
    store.finish_run(id, "complete", None).unwrap();
    id
}

fn verdict(store: &Store, id: i64) -> Verdict {
    let f = findings::judge_run(&store.load(id).unwrap());
    assert_eq!(f.verdicts.len(), 1, "{f:?}");
    f.verdicts.into_iter().next().unwrap()
}

fn at(v: &Verdict, p: Placement) -> &PlacementRatio {
    v.by_placement.iter().find(|r| r.placement == p).unwrap()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

/// `n` seconds at `rate` (+ 0, 10, 20, ... so the median is known) in
/// placement `ns`.
fn run_of(rate: u64, ns: f64, n: u64) -> Vec<Second> {
    (0..n).map(|k| (rate + 10 * k, Some(ns))).collect()
}

#[test]
fn near_only_gives_no_far_ratio() {
    let db = temp_db("near");
    let store = Store::open(&db).unwrap();
    // 4 s a side, two iterations: vnio's seconds 6000-6030, the other's
    // 5000-5030 (medians 6015 and 5015).
    let id = store_run(&store, true, |cfg| {
        let rate = if cfg == "vnio" { 6000 } else { 5000 };
        vec![run_of(rate, NEAR, 4), run_of(rate, NEAR, 4)]
    });
    let v = verdict(&store, id);
    let near = at(&v, Placement::Near);
    assert!(close(near.ratio, 6015.0 / 5015.0), "{near:?}");
    assert_eq!((near.subject_seconds, near.against_seconds), (8, 8));
    let far = at(&v, Placement::Far);
    assert_eq!(far.ratio, None);
    assert_eq!((far.subject_seconds, far.against_seconds), (0, 0));
    let words = findings::by_placement(&v).unwrap();
    assert!(
        words.starts_with("near 1.20x (vnio 8 s, other 8 s)"),
        "{words}"
    );
    assert!(
        words.contains("far no seconds (vnio 0 s, other 0 s)"),
        "{words}"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn far_only_gives_no_near_ratio() {
    let db = temp_db("far");
    let store = Store::open(&db).unwrap();
    let id = store_run(&store, true, |cfg| {
        let rate = if cfg == "vnio" { 4600 } else { 5000 };
        vec![run_of(rate, FAR, 4), run_of(rate, FAR, 4)]
    });
    let v = verdict(&store, id);
    assert_eq!(at(&v, Placement::Near).ratio, None);
    let far = at(&v, Placement::Far);
    assert!(close(far.ratio, 4615.0 / 5015.0), "{far:?}");
    assert!(close(far.subject_median, 4615.0) && close(far.against_median, 5015.0));
    assert_eq!((far.subject_seconds, far.against_seconds), (8, 8));
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn mixed_placements_give_both_ratios_and_the_verdict_stays_the_rules() {
    let db = temp_db("mixed");
    let store = Store::open(&db).unwrap();
    // vnio: 6590 near, 4610 far; the other: 6550 near, 5070 far (the
    // rates of docs/switch.md, per second). vnio's first iteration is
    // mostly near, its second far; the other's the opposite, so their
    // median iterations sit at different placements. One second of each
    // iteration has no round trip (too few samples) and is left out.
    let mixed = |near: u64, far: u64, near_first: bool| {
        let (n, f) = (run_of(near, NEAR, 3), run_of(far, FAR, 3));
        let (first, second) = if near_first {
            (
                [n.clone(), f[..1].to_vec()].concat(),
                [f.clone(), n[..1].to_vec()].concat(),
            )
        } else {
            (
                [f.clone(), n[..1].to_vec()].concat(),
                [n.clone(), f[..1].to_vec()].concat(),
            )
        };
        let blind = |mut s: Vec<Second>| {
            s.push((near, None));
            s
        };
        vec![blind(first), blind(second)]
    };
    let id = store_run(&store, true, |cfg| match cfg {
        "vnio" => mixed(6590, 4610, true),
        _ => mixed(6550, 5070, false),
    });
    let v = verdict(&store, id);
    let (near, far) = (at(&v, Placement::Near), at(&v, Placement::Far));
    // Near: 6590, 6600, 6610 and the extra 6590: median 6595 for vnio;
    // 6550, 6560, 6570, 6550: 6555 for the other.
    assert_eq!((near.subject_seconds, near.against_seconds), (4, 4));
    assert!(close(near.ratio, 6595.0 / 6555.0), "{near:?}");
    assert_eq!((far.subject_seconds, far.against_seconds), (4, 4));
    assert!(close(far.ratio, 4615.0 / 5075.0), "{far:?}");

    // The verdict itself is the rule's over the iterations, as without
    // the probe: same value, band and outcome.
    let plain = store_run(&store, false, |cfg| match cfg {
        "vnio" => mixed(6590, 4610, true),
        _ => mixed(6550, 5070, false),
    });
    let p = verdict(&store, plain);
    assert!(p.by_placement.is_empty());
    assert_eq!((p.value, p.band, p.outcome), (v.value, v.band, v.outcome));
    assert!(findings::by_placement(&p).is_none());

    // In the JSON document and the report's table.
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["by_placement"][0]["placement"], "near");
    assert_eq!(json["by_placement"][1]["against_seconds"], 4);
    let html = report::render(&store.load(id).unwrap());
    assert!(
        html.contains("by placement: near 1.01x (vnio 4 s, other 4 s)"),
        "the table"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

/// vnio's switch's figures of a second with busy share `busy` (None: its
/// counters were not read in time).
fn switch_second(busy: Option<f64>) -> Option<SwitchSecond> {
    busy.map(|busy| SwitchSecond {
        busy,
        frames: 6_000_000,
        frames_per_busy_round: Some(12.0),
        busy_ns_per_frame: Some(busy * 1e9 / 6e6),
    })
}

#[test]
fn the_switchs_busy_share_is_given_per_placement_where_read() {
    let db = temp_db("busy");
    let store = Store::open(&db).unwrap();
    // vnio's switch read every second but one of its near iteration;
    // the other switch is not vnio's: its seconds have no busy share.
    let id = store_documents(&store, |cfg| {
        let rates = if cfg == "vnio" {
            [6590, 4610]
        } else {
            [6550, 5070]
        };
        let mut doc = document(&[run_of(rates[0], NEAR, 4), run_of(rates[1], FAR, 4)], true);
        if cfg == "vnio" {
            let busy = [
                [Some(0.97), None, Some(0.99), Some(0.98)],
                [Some(0.6), Some(0.66), Some(0.62), Some(0.64)],
            ];
            for (it, shares) in doc.iterations.iter_mut().zip(busy) {
                it.switch_seconds = Some(shares.into_iter().map(switch_second).collect());
            }
        }
        doc
    });
    let v = verdict(&store, id);
    let (near, far) = (at(&v, Placement::Near), at(&v, Placement::Far));
    assert!(close(near.subject_busy, 0.98), "{near:?}");
    assert!(close(far.subject_busy, 0.63), "{far:?}");
    assert_eq!((near.against_busy, far.against_busy), (None, None));
    // Every second counts toward the ratio, read or not.
    assert_eq!((near.subject_seconds, far.subject_seconds), (4, 4));
    let words = findings::by_placement(&v).unwrap();
    assert!(
        words.starts_with(
            "near 1.01x (vnio 4 s busy 0.98, other 4 s); far 0.91x (vnio 4 s busy 0.63, other 4 s)"
        ),
        "{words}"
    );

    // In the JSON document (null where not read), and a document made
    // before the fields existed still reads.
    let json = serde_json::to_value(&v).unwrap();
    assert!(close(
        json["by_placement"][1]["subject_busy"].as_f64(),
        0.63
    ));
    assert!(json["by_placement"][1]["against_busy"].is_null());
    let mut old = json["by_placement"][0].clone();
    let o = old.as_object_mut().unwrap();
    o.remove("subject_busy");
    o.remove("against_busy");
    let read: PlacementRatio = serde_json::from_value(old).unwrap();
    assert_eq!((read.subject_busy, read.against_busy), (None, None));
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn a_side_without_seconds_at_a_placement_has_no_ratio_there() {
    let db = temp_db("one-sided");
    let store = Store::open(&db).unwrap();
    // vnio saw both placements; the other only near.
    let id = store_run(&store, true, |cfg| match cfg {
        "vnio" => vec![run_of(6590, NEAR, 4), run_of(4610, FAR, 4)],
        _ => vec![run_of(6550, NEAR, 4), run_of(6560, NEAR, 4)],
    });
    let v = verdict(&store, id);
    let far = at(&v, Placement::Far);
    assert_eq!(far.ratio, None, "{far:?}");
    assert!(close(far.subject_median, 4625.0), "{far:?}");
    assert_eq!(far.against_median, None);
    assert_eq!((far.subject_seconds, far.against_seconds), (4, 0));
    assert!(at(&v, Placement::Near).ratio.is_some());
    let words = findings::by_placement(&v).unwrap();
    assert!(
        words.ends_with("far no seconds (vnio 4 s, other 0 s)"),
        "{words}"
    );
    // The overall verdict does not depend on it.
    assert_ne!(v.outcome, Outcome::Reproduced, "{}", v.why);
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn the_store_keeps_the_reported_iterations_round_trip_and_adds_its_column() {
    let db = temp_db("column");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    // A file as the store made it before the column existed.
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema', '1');
             CREATE TABLE points (
                run_id INTEGER NOT NULL, scenario TEXT NOT NULL, seq INTEGER NOT NULL,
                configuration TEXT NOT NULL, workload TEXT NOT NULL, kind TEXT NOT NULL,
                sweep_param TEXT, sweep_value INTEGER, status TEXT NOT NULL, error TEXT,
                mean_ns REAL, p50_ns INTEGER, p90_ns INTEGER, p99_ns INTEGER,
                p999_ns INTEGER, p9999_ns INTEGER, max_ns INTEGER,
                over_1ms_pct REAL, ops_per_s REAL, gbps REAL, loss_pct REAL,
                point TEXT NOT NULL, contention TEXT, document TEXT,
                PRIMARY KEY (run_id, scenario, seq));",
        )
        .unwrap();
    }
    let store = Store::open(&db).unwrap();
    let id = store_run(&store, true, |cfg| {
        let ns = if cfg == "vnio" { NEAR } else { FAR };
        vec![run_of(6000, ns, 4), run_of(6100, ns, 4)]
    });
    drop(store);
    // Opened again: the column is there once.
    let store = Store::open(&db).unwrap();
    let run = store.load(id).unwrap();
    let doc = run.scenarios[0].points[0].document.as_ref().unwrap();
    let line = doc.iterations[0].line_round_trip.as_ref().unwrap();
    assert_eq!(line.per_second_ns.len(), 5);
    let c = rusqlite::Connection::open(&db).unwrap();
    let rtt: Vec<(String, Option<f64>)> = c
        .prepare("SELECT configuration, line_rtt_ns FROM points ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rtt,
        vec![("vnio".into(), Some(NEAR)), ("other".into(), Some(FAR))]
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn the_probe_needs_two_different_cpus() {
    let err = |text: &str| scenario::parse("t.toml", text).unwrap_err().to_string();
    let e = err(&SCENARIO.replace("client_cpus = [1]\n", ""));
    assert!(
        e.contains("placement_probe: needs switch_cpus and client_cpus"),
        "{e}"
    );
    let e = err(&SCENARIO.replace("client_cpus = [1]", "client_cpus = [0]"));
    assert!(
        e.contains("the switch's CPU and the client's are both 0"),
        "{e}"
    );
    // The shipped anchors run it.
    let LabFile::Scenario(s) = scenario::load("switch-anchors").unwrap().file else {
        panic!("a set")
    };
    assert_eq!(s.knobs.probe_cpus(), Some([0, 1]));
}
