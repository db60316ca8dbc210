//! Findings: validation at load, verdicts judged from a stored run (with
//! documents recorded as the engine does: real histograms, iterations,
//! per-second series), the report's opening table and marks, old runs
//! without findings, and the verdicts that change between two runs. No
//! root, no network.

use vnio_lab::findings::{self, Outcome, SampleSource};
use vnio_lab::report;
use vnio_lab::runner::{PointOutcome, Status};
use vnio_lab::scenario::{self, Capabilities, LabFile, Overrides, Plan, Source};
use vnio_lab::store::Store;
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, IntervalPoint, Iteration, Measured};
use vnio_measure::stats::Latency;

/// Three configurations, one rr workload, and findings over them.
const SCENARIO: &str = r#"
title = "findings test"
maps_to = "a test"
[run]
duration = "2s"
warmup = "100ms"
iterations = 3
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
[[configuration]]
name = "switch"
wire = "switch"
[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"

[[finding]]
id = "switch-adds-latency"
study = "Network I/O Latency on VMware vSphere 5"
claim = "a virtual path adds 15-20 us over native"
workload = "rr"
statistic = "p50"
subject = { configuration = "switch" }
against = { configuration = "native" }
expect = "above"
reference = [15, 20]

[[finding]]
id = "switch-faster-than-native"
study = "made up"
claim = "the opposite of the above"
workload = "rr"
statistic = "p50"
subject = { configuration = "switch" }
against = { configuration = "native" }
expect = "below"

[[finding]]
id = "bridge-adds-latency"
study = "Network I/O Latency on VMware vSphere 5"
claim = "the bridge adds latency over native"
workload = "rr"
statistic = "p50"
subject = { configuration = "bridge" }
against = { configuration = "native" }
expect = "above"

[[finding]]
id = "tail-within-2x"
study = "Network I/O Latency on VMware vSphere 5"
claim = "p99 within 2x the mean"
workload = "rr"
statistic = "tail-ratio"
subject = { configuration = "native" }
expect = "below"
than = 2
reference = 2
"#;

/// One iteration like the engine's: 10 000 round trips in a body of
/// `base_us` to `base_us + width_us`, its per-second series (two seconds).
fn iteration(index: usize, base_us: u64, width_us: u64) -> Iteration {
    let mut lat = Latency::new();
    let mut seconds = [Latency::new(), Latency::new()];
    for k in 0..10_000u64 {
        let ns = (base_us * 1000) + (k * 7919) % (width_us * 1000 + 1);
        lat.record(ns);
        seconds[(k % 2) as usize].record(ns);
    }
    let mut m = Measured {
        target: "all".into(),
        ops: 10_000,
        sent: 10_000,
        ..Default::default()
    };
    m.finish(Some(&lat), 2.0);
    let intervals = seconds
        .iter()
        .enumerate()
        .map(|(t, l)| {
            let s = l.summary();
            IntervalPoint {
                t_s: t as u64,
                ops: s.count,
                mean_ns: s.mean_ns,
                p50_ns: s.p50_ns,
                p99_ns: s.p99_ns,
                max_ns: s.max_ns,
            }
        })
        .collect();
    Iteration {
        index,
        seconds: 2.0,
        merged: m,
        intervals,
        ..Default::default()
    }
}

/// A document whose iterations start at each of `bases` (µs).
fn document(bases: &[u64], width_us: u64) -> Document {
    let mut doc = Document::new(
        "rr",
        serde_json::json!({}),
        vec!["10.77.0.2:7700".into()],
        Environment::default(),
    );
    for (i, b) in bases.iter().enumerate() {
        doc.iterations.push(iteration(i, *b, width_us));
    }
    doc.conclude();
    doc
}

fn source(text: &str) -> (Source, Box<scenario::Scenario>) {
    let file = scenario::parse("findings.toml", text).unwrap();
    let LabFile::Scenario(s) = file.clone() else {
        panic!("a set")
    };
    let source = Source {
        name: "findings".into(),
        origin: "findings.toml".into(),
        text: text.into(),
        file,
    };
    (source, s)
}

/// Stores a run of `text` (configurations filtered by `only`) whose
/// points' iterations start at `bases(configuration)`; its id.
fn store_run(store: &Store, text: &str, only: &[&str], bases: impl Fn(&str) -> Vec<u64>) -> i64 {
    store_shaped(store, text, only, |cfg| (bases(cfg), 4))
}

/// As [`store_run`], the round trips of `shape(configuration)`'s
/// iterations starting at each base and spread over its width (µs).
fn store_shaped(
    store: &Store,
    text: &str,
    only: &[&str],
    shape: impl Fn(&str) -> (Vec<u64>, u64),
) -> i64 {
    let (src, s) = source(text);
    let o = Overrides {
        configurations: only.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    let plan = Plan::new(&s, &o, &Capabilities::current()).unwrap();
    let id = store
        .begin_run("findings", &s.title, "v-test", &Environment::default(), &o)
        .unwrap();
    store.add_scenario(id, 0, &src, &s, &plan).unwrap();
    for p in &plan.points {
        let out = PointOutcome {
            point: p.clone(),
            status: Status::Ok,
            error: None,
            document: Some({
                let (bases, width) = shape(&p.configuration);
                document(&bases, width)
            }),
            contention: None,
        };
        store.add_point(id, "findings", &out).unwrap();
    }
    store.finish_run(id, "complete", None).unwrap();
    id
}

fn temp_db(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-findings-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("lab.db")
}

fn why_of(f: &findings::RunFindings, id: &str) -> String {
    outcome(f, id).1
}

fn outcome(f: &findings::RunFindings, id: &str) -> (Outcome, String) {
    let v = f.verdicts.iter().find(|v| v.id == id).unwrap();
    (v.outcome, v.why.clone())
}

#[test]
fn verdicts_follow_the_spread_of_the_stored_run() {
    let db = temp_db("judge");
    let store = Store::open(&db).unwrap();
    // native 20-23 µs, switch 60-63 µs: far apart. The bridge is native
    // again: the interval of their p50s' difference straddles 0.
    let id = store_run(&store, SCENARIO, &[], |cfg| match cfg {
        "native" | "bridge" => vec![20, 21, 23],
        _ => vec![60, 61, 63],
    });
    let run = store.load(id).unwrap();
    let f = findings::judge_run(&run);
    assert_eq!(f.verdicts.len(), 4);
    assert!(f.without.is_empty() && f.unreadable.is_empty());
    let (o, why) = outcome(&f, "switch-adds-latency");
    assert_eq!(o, Outcome::Reproduced, "{why}");
    assert!(why.contains("switch − native p50"), "{why}");
    let (o, why) = outcome(&f, "switch-faster-than-native");
    assert_eq!(o, Outcome::NotReproduced, "{why}");
    let (o, why) = outcome(&f, "bridge-adds-latency");
    assert_eq!(o, Outcome::Inconclusive, "{why}");
    assert!(why.contains("straddles"), "{why}");
    let (o, why) = outcome(&f, "tail-within-2x");
    assert_eq!(o, Outcome::Reproduced, "{why}");

    // The numbers behind a verdict: the p50s over all three iterations'
    // round trips, the band from their order-statistic intervals, the
    // study's mark where the subject would be (native's median plus 15
    // and 20 µs).
    let v = f
        .verdicts
        .iter()
        .find(|v| v.id == "switch-adds-latency")
        .unwrap();
    assert_eq!(v.subject.samples, 30_000);
    assert_eq!(v.subject.source, Some(SampleSource::OrderStatistics));
    assert!(why_of(&f, "switch-adds-latency").contains("95% confidence interval"));
    let side = v.subject.band.unwrap();
    assert!(side.lo <= v.subject.value.unwrap() && v.subject.value.unwrap() <= side.hi);
    // The tail ratio is no percentile: judged on the iterations' spread.
    let t = f
        .verdicts
        .iter()
        .find(|v| v.id == "tail-within-2x")
        .unwrap();
    assert_eq!(t.subject.source, Some(SampleSource::Iterations));
    let (sv, nv) = (
        v.subject.value.unwrap(),
        v.against.as_ref().unwrap().value.unwrap(),
    );
    assert!((sv - nv - v.value.unwrap()).abs() < 1e-9);
    let band = v.band.unwrap();
    assert!(band.lo > 30.0 && band.hi < 50.0, "{band:?}");
    let mark = v.mark.as_ref().unwrap();
    assert_eq!(mark.values, vec![nv + 15.0, nv + 20.0]);

    // The report opens with the verdicts, and the figure marks the study.
    let html = report::render(&run);
    let table = html.find("verdicts of this run").unwrap();
    assert!(table < html.find("<section id=\"s0\"").unwrap());
    assert!(html.contains("not reproduced") && html.contains("inconclusive"));
    assert!(
        html.contains("study: switch-adds-latency"),
        "the mark's legend"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

/// A run of `scenario` whose points took one iteration: native 20 µs,
/// bridge 21 µs, the switch 60 µs.
fn store_one_iteration(store: &Store, scenario: &str) -> i64 {
    store_run(store, scenario, &[], |cfg| match cfg {
        "native" => vec![20],
        "bridge" => vec![21],
        _ => vec![60],
    })
}

#[test]
fn a_single_iteration_is_judged_on_its_seconds_or_not_at_all() {
    let db = temp_db("single");
    let store = Store::open(&db).unwrap();
    let one = SCENARIO.replace("iterations = 3", "iterations = 1");
    let id = store_one_iteration(&store, &one);
    let f = findings::judge_run(&store.load(id).unwrap());
    // A percentile needs no second iteration: its interval comes from the
    // order statistics of the one iteration's 10,000 round trips.
    let v = f
        .verdicts
        .iter()
        .find(|v| v.id == "switch-adds-latency")
        .unwrap();
    assert_eq!(v.subject.source, Some(SampleSource::OrderStatistics));
    assert_eq!(v.outcome, Outcome::Reproduced, "{}", v.why);
    // So does a mean, from its normal interval over the round trips.
    let mean = one.replace("statistic = \"p50\"", "statistic = \"mean\"");
    let id = store_one_iteration(&store, &mean);
    let f = findings::judge_run(&store.load(id).unwrap());
    let v = f
        .verdicts
        .iter()
        .find(|v| v.id == "switch-adds-latency")
        .unwrap();
    assert_eq!(v.subject.source, Some(SampleSource::MeanInterval));
    assert_eq!(v.outcome, Outcome::Reproduced, "{}", v.why);
    assert!(v.why.contains("normal interval"), "{}", v.why);
    // Except where the samples are too few for one: p99.99 of 10,000.
    let tail = one.replace("statistic = \"p50\"", "statistic = \"p99.99\"");
    let id = store_one_iteration(&store, &tail);
    let f = findings::judge_run(&store.load(id).unwrap());
    let (o, why) = outcome(&f, "switch-adds-latency");
    assert_eq!(o, Outcome::Inconclusive, "{why}");
    assert!(why.contains("too few round trips"), "{why}");
    let v = f
        .verdicts
        .iter()
        .find(|v| v.id == "switch-adds-latency")
        .unwrap();
    assert!(findings::measured(v).contains("too few samples for an interval"));
    // Spikes over 1 ms are a share of all round trips, with Wilson's
    // interval: none over 1 ms in 10,000 cannot tell 0.009 % (the upper
    // bound is about 0.04 %), but can tell 0.5 %.
    let spikes = |than: &str| {
        SCENARIO
            .replace("iterations = 3", "iterations = 1")
            .replace("statistic = \"tail-ratio\"", "statistic = \"over-1ms\"")
            .replace("than = 2\nreference = 2", &format!("than = {than}"))
    };
    let id = store_run(&store, &spikes("0.009"), &[], |_| vec![20]);
    let f = findings::judge_run(&store.load(id).unwrap());
    let (o, why) = outcome(&f, "tail-within-2x");
    assert_eq!(o, Outcome::Inconclusive, "{why}");
    assert!(why.contains("Wilson") && why.contains("straddles"), "{why}");
    let id = store_run(&store, &spikes("0.5"), &[], |_| vec![20]);
    let f = findings::judge_run(&store.load(id).unwrap());
    let v = f
        .verdicts
        .iter()
        .find(|v| v.id == "tail-within-2x")
        .unwrap();
    assert_eq!(v.subject.source, Some(SampleSource::ShareInterval));
    assert_eq!(v.outcome, Outcome::Reproduced, "{}", v.why);
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn a_point_left_out_of_the_run_is_inconclusive() {
    let db = temp_db("missing");
    let store = Store::open(&db).unwrap();
    let id = store_run(&store, SCENARIO, &["native", "bridge"], |_| {
        vec![20, 21, 22]
    });
    let f = findings::judge_run(&store.load(id).unwrap());
    let (o, why) = outcome(&f, "switch-adds-latency");
    assert_eq!(o, Outcome::Inconclusive);
    assert!(why.starts_with("switch was not measured"), "{why}");
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn the_anchors_judge_the_round_trip_at_the_median_and_at_p99() {
    let db = temp_db("anchors");
    let store = Store::open(&db).unwrap();
    let anchors = scenario::shipped("switch-anchors").unwrap().text;
    // Round trips spread evenly over [base, base + width] µs, 5 iterations
    // alike: vnio's median 10 µs and p99 about 16, OVS-DPDK's 15 and 20,
    // testpmd's 7 and 8. vnio is faster than OVS-DPDK at both; against
    // testpmd, 1.43x at the median (within 1.5x) but 2x at p99.
    let id = store_shaped(&store, anchors, &[], |cfg| match cfg {
        "vnio" => (vec![4; 5], 12),
        "ovs-dpdk" => (vec![10; 5], 10),
        _ => (vec![6; 5], 2),
    });
    let f = findings::judge_run(&store.load(id).unwrap());
    let ratio = |id: &str| {
        let v = f.verdicts.iter().find(|v| v.id == id).unwrap();
        (v.outcome, v.value.unwrap(), v.why.clone())
    };
    for (id, outcome, about) in [
        ("vnio-rtt-vs-ovs", Outcome::Reproduced, 10.0 / 15.0),
        ("vnio-rtt-p99-vs-ovs", Outcome::Reproduced, 16.0 / 20.0),
        ("vnio-rtt-vs-testpmd", Outcome::Reproduced, 10.0 / 7.0),
        (
            "vnio-rtt-p99-vs-testpmd",
            Outcome::NotReproduced,
            16.0 / 8.0,
        ),
    ] {
        let (o, value, why) = ratio(id);
        assert_eq!(o, outcome, "{id}: {why}");
        assert!((value - about).abs() < 0.05, "{id}: {value} vs {about}");
    }
    let (_, _, why) = ratio("vnio-rtt-p99-vs-testpmd");
    assert!(why.contains("vnio / testpmd p99"), "{why}");
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

#[test]
fn runs_without_findings_have_none_and_compare_shows_what_changed() {
    let db = temp_db("compare");
    let store = Store::open(&db).unwrap();
    // A scenario as stored before findings existed.
    let old = &SCENARIO[..SCENARIO.find("[[finding]]").unwrap()];
    let id = store_run(&store, old, &[], |_| vec![20, 21, 22]);
    let f = findings::judge_run(&store.load(id).unwrap());
    assert!(f.verdicts.is_empty());
    assert_eq!(f.without, vec!["findings".to_string()]);
    let html = report::render(&store.load(id).unwrap());
    assert!(html.contains("No scenario of this run declares a finding"));

    // Two runs: the switch is slower in the first, as fast as native in
    // the second.
    let a = store_run(&store, SCENARIO, &[], |cfg| match cfg {
        "switch" => vec![60, 61, 63],
        _ => vec![20, 21, 23],
    });
    let b = store_run(&store, SCENARIO, &[], |_| vec![20, 21, 23]);
    let (ra, rb) = (store.load(a).unwrap(), store.load(b).unwrap());
    let changed = findings::changes(&findings::judge_run(&ra), &findings::judge_run(&rb));
    let ids: Vec<&str> = changed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["switch-adds-latency", "switch-faster-than-native"]);
    assert_eq!(changed[0].a.outcome, Outcome::Reproduced);
    assert_eq!(changed[0].b.outcome, Outcome::Inconclusive);
    let html = report::compare(&ra, &rb);
    assert!(html.contains("Verdicts that changed") && html.contains("switch-adds-latency"));
    let _ = std::fs::remove_dir_all(db.parent().unwrap());
}

fn error(text: &str) -> String {
    scenario::parse("f.toml", text).unwrap_err().to_string()
}

#[test]
fn findings_are_checked_at_load() {
    let first = "subject = { configuration = \"switch\" }\nagainst = { configuration = \"native\" }\nexpect = \"above\"\nreference = [15, 20]";
    let cases: &[(&str, &str, &str)] = &[
        (
            "subject = { configuration = \"switch\" }",
            "subject = { configuration = \"swtich\" }",
            "f.toml: finding `switch-adds-latency`: subject: no configuration named \"swtich\" (configurations: native, bridge, switch)",
        ),
        (
            "workload = \"rr\"\nstatistic = \"p50\"\nsubject = { configuration = \"switch\" }\nagainst",
            "workload = \"ping\"\nstatistic = \"p50\"\nsubject = { configuration = \"switch\" }\nagainst",
            "f.toml: finding `switch-adds-latency`: workload: no workload named \"ping\" (workloads: rr)",
        ),
        (
            "statistic = \"p50\"",
            "statistic = \"gbps\"",
            "f.toml: finding `switch-adds-latency`: statistic: gbps does not apply to rr workloads",
        ),
        (
            "subject = { configuration = \"switch\" }",
            "subject = { configuration = \"switch\", sweep = 4 }",
            "f.toml: finding `switch-adds-latency`: subject: sweep: the scenario has no sweep",
        ),
        (
            first,
            "subject = { configuration = \"switch\" }\nexpect = \"above\"",
            "f.toml: finding `switch-adds-latency`: than: a value needs a bound to be judged against",
        ),
        (
            first,
            "subject = { configuration = \"switch\" }\nquantity = \"ratio\"\nexpect = \"above\"",
            "f.toml: finding `switch-adds-latency`: against: a ratio needs a point to compare with",
        ),
        (
            "against = { configuration = \"native\" }",
            "against = { configuration = \"switch\" }",
            "f.toml: finding `switch-adds-latency`: against: is the subject itself",
        ),
        (
            "id = \"switch-faster-than-native\"",
            "id = \"switch-adds-latency\"",
            "f.toml: finding `switch-adds-latency`: id: used twice",
        ),
        (
            "reference = [15, 20]",
            "reference = [15, 20, 25]",
            "f.toml: finding `switch-adds-latency`: reference: one number or a [low, high] pair",
        ),
    ];
    for (from, to, want) in cases {
        assert!(SCENARIO.contains(from), "{from}");
        let e = error(&SCENARIO.replacen(from, to, 1));
        assert_eq!(&e, want);
    }
    // Unknown names are refused by the parser, with the line.
    let e = error(&SCENARIO.replacen("statistic = \"p50\"", "statistic = \"p95\"", 1));
    assert!(e.starts_with("f.toml:32:13:"), "{e}");
    assert!(
        e.contains("unknown variant `p95`") && e.contains("`p99.99`"),
        "{e}"
    );
    let e = error(&SCENARIO.replacen("expect = \"above\"", "expect = \"over\"", 1));
    assert!(e.contains("unknown variant `over`"), "{e}");
    let e = error(&SCENARIO.replacen("claim =", "clam =", 1));
    assert!(e.contains("unknown field `clam`"), "{e}");

    // With a sweep: a value is required, and must be one of the sweep's.
    let swept = format!("{SCENARIO}\n[sweep]\nparameter = \"size\"\nvalues = [64, 1024]\n");
    let e = error(&swept);
    assert!(
        e.contains("subject: needs a sweep value: the scenario sweeps size over [64, 1024]"),
        "{e}"
    );
    let fixed = swept.replace(
        "subject = { configuration = \"switch\" }",
        "subject = { configuration = \"switch\", sweep = 100 }",
    );
    assert!(
        error(&fixed).contains("subject: sweep: 100 is not one of the size values [64, 1024]"),
        "{}",
        error(&fixed)
    );
    let e = error(&swept.replace(
        "{ configuration = \"switch\" }",
        "{ configuration = \"switch\", sweep = \"middle\" }",
    ));
    assert!(
        e.contains("expected a number, \"first\" or \"last\""),
        "{e}"
    );
}

#[test]
fn a_run_is_judged_from_what_it_stored_and_an_older_run_from_its_text() {
    let db = temp_db("stored");
    let store = Store::open(&db).unwrap();
    let id = store_run(&store, SCENARIO, &[], |cfg| match cfg {
        "native" | "bridge" => vec![20, 21, 23],
        _ => vec![60, 61, 63],
    });
    let run = store.load(id).unwrap();
    assert!(run.scenarios[0].findings.is_some());
    let before = findings::judge_run(&run);
    assert_eq!(before.verdicts.len(), 4);
    let c = rusqlite::Connection::open(&db).unwrap();
    let set_text = |text: &str| {
        c.execute(
            "UPDATE scenarios SET text = ?2 WHERE run_id = ?1",
            rusqlite::params![id, text],
        )
        .unwrap()
    };
    // Judged from what the run stored: its text is not parsed again.
    set_text("not a scenario [");
    assert_eq!(findings::judge_run(&store.load(id).unwrap()), before);
    // A run stored before the lab kept its findings: judged from its text.
    c.execute(
        "UPDATE scenarios SET findings = NULL WHERE run_id = ?1",
        rusqlite::params![id],
    )
    .unwrap();
    set_text(SCENARIO);
    assert_eq!(findings::judge_run(&store.load(id).unwrap()), before);
    // ...whose text no longer parses: said, scenario by scenario.
    set_text("not a scenario [");
    let f = findings::judge_run(&store.load(id).unwrap());
    assert!(f.verdicts.is_empty(), "{f:?}");
    assert_eq!(f.unreadable.len(), 1, "{f:?}");
}
