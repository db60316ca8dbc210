//! The store round trip and the report rendered from a stored run, with
//! real measurement documents (histograms recorded and encoded as the
//! engine does). No root, no network.

use std::time::Duration;

use vnio_lab::contention::{ContentionReport, LoadsOutcome};
use vnio_lab::findings::{significance, Statistic};
use vnio_lab::report;
use vnio_lab::runner::{PointOutcome, Status};
use vnio_lab::scenario::{self, Capabilities, LabFile, Overrides, Plan};
use vnio_lab::store::Store;
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, Iteration, Measured};
use vnio_measure::stats::Latency;

fn temp_db(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-store-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir.join("sub").join("lab.db")
}

/// A document like the engine's: `iterations` iterations whose round trips
/// are spread around `base_us`.
fn document(base_us: u64, iterations: usize) -> Document {
    let mut doc = Document::new(
        "rr",
        serde_json::json!({"rr": {"size": 256}}),
        vec!["10.77.0.2:7700".into()],
        Environment::default(),
    );
    for i in 0..iterations {
        let mut lat = Latency::new();
        for k in 0..10_000u64 {
            // A body around base, a tail of rare slow ones.
            let us = base_us + (k % 7) + i as u64 + if k % 1000 == 0 { 20 * base_us } else { 0 };
            lat.record(us * 1000);
        }
        let mut m = Measured {
            target: "all".into(),
            ops: 10_000,
            sent: 10_000,
            ..Default::default()
        };
        m.finish(Some(&lat), 1.0);
        doc.iterations.push(Iteration {
            index: i,
            seconds: 1.0,
            merged: m,
            ..Default::default()
        });
    }
    doc.conclude();
    doc
}

fn outcomes(plan: &Plan) -> Vec<PointOutcome> {
    plan.points
        .iter()
        .map(|p| {
            if let Some(why) = &p.skip {
                return PointOutcome {
                    point: p.clone(),
                    status: Status::Skipped,
                    error: Some(why.clone()),
                    document: None,
                    contention: None,
                };
            }
            let base = 20 + 10 * p.seq as u64;
            let loads = p.contention.loads.as_ref().filter(|l| l.count > 0);
            PointOutcome {
                point: p.clone(),
                status: Status::Ok,
                error: None,
                document: Some(document(base, 3)),
                contention: loads.map(|l| ContentionReport {
                    loads: Some(LoadsOutcome {
                        count: l.count,
                        requested_rate: 5000.0 * f64::from(l.count),
                        achieved_rate: 4900.0 * f64::from(l.count),
                        cpu_pct: 20.0 * f64::from(l.count),
                    }),
                    flood: None,
                    errors: vec![],
                }),
            }
        })
        .collect()
}

fn stored_run(db: &std::path::Path, name: &str) -> (Store, i64, Vec<PointOutcome>) {
    let source = scenario::load(name).unwrap();
    let LabFile::Scenario(s) = &source.file else {
        panic!()
    };
    let o = Overrides {
        duration: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    let plan = Plan::new(s, &o, &Capabilities::current()).unwrap();
    let store = Store::open(db).unwrap();
    let id = store
        .begin_run(name, &s.title, "v-test", &Environment::default(), &o)
        .unwrap();
    store.add_scenario(id, 0, &source, s, &plan).unwrap();
    let outs = outcomes(&plan);
    for o in &outs {
        store.add_point(id, name, o).unwrap();
    }
    store.finish_run(id, "complete", None).unwrap();
    (store, id, outs)
}

#[test]
fn a_run_round_trips_through_the_store() {
    let db = temp_db("rt");
    let (store, id, outs) = stored_run(&db, "cpu-contention");
    let loaded = store.load(id).unwrap();
    assert_eq!(loaded.row.status, "complete");
    assert_eq!(loaded.row.revision, "v-test");
    assert_eq!(loaded.row.points, outs.len() as i64);
    assert_eq!(loaded.overrides.duration, Some(Duration::from_millis(500)));
    let sc = &loaded.scenarios[0];
    assert_eq!(sc.name, "cpu-contention");
    assert_eq!(sc.text, scenario::shipped("cpu-contention").unwrap().text);
    assert_eq!(sc.run_spec.duration, Duration::from_millis(500));
    assert_eq!(sc.points.len(), outs.len());
    for (a, b) in sc.points.iter().zip(&outs) {
        assert_eq!(a.point, b.point);
        assert_eq!(a.status, b.status);
        assert_eq!(a.contention, b.contention);
        // The whole document, histograms included, comes back as stored.
        assert_eq!(a.document, b.document);
        let h = a.document.as_ref().unwrap().merged_latency().unwrap();
        assert_eq!(h.count(), 30_000);
    }
    // The stored points carry each percentile's interval: 10,000 samples
    // give p99's, and too few for p99.99's (which needs 36,887).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (p99, lo, hi, tail): (i64, Option<i64>, Option<i64>, Option<i64>) = conn
        .query_row(
            "SELECT p99_ns, p99_lo_ns, p99_hi_ns, p9999_lo_ns FROM points
             WHERE run_id = ?1 AND status = 'ok' LIMIT 1",
            rusqlite::params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert!(
        lo.unwrap() <= p99 && p99 <= hi.unwrap(),
        "{lo:?} {p99} {hi:?}"
    );
    assert_eq!(tail, None);
    drop(conn);
    assert_eq!(store.resolve("last").unwrap(), id);
    assert!(store.resolve("last-1").is_err());
    assert!(store
        .resolve("nope")
        .unwrap_err()
        .to_string()
        .contains("no run nope"));

    // A run left "running" by a process that is gone reads as killed.
    let id2 = store
        .begin_run(
            "x",
            "x",
            "v",
            &Environment::default(),
            &Overrides::default(),
        )
        .unwrap();
    drop(store);
    let conn = forge_dead_owner(&db, id2);
    assert!(conn);
    let store = Store::open(&db).unwrap();
    let row = store
        .runs()
        .unwrap()
        .into_iter()
        .find(|r| r.id == id2)
        .unwrap();
    assert_eq!(row.status, "killed");
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

/// Pretend run `id` was started by a process that no longer exists.
fn forge_dead_owner(db: &std::path::Path, id: i64) -> bool {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute(
        "UPDATE runs SET pid = 999999999 WHERE id = ?1",
        rusqlite::params![id],
    )
    .is_ok()
}

#[test]
fn the_report_renders_from_a_stored_run() {
    let db = temp_db("report");
    let (store, id, _) = stored_run(&db, "cpu-contention");
    let html = report::render(&store.load(id).unwrap());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.ends_with("</html>\n"));
    // Self-contained: nothing fetched.
    assert!(!html.contains("src=\"http") && !html.contains("<script") && !html.contains("<link"));
    // The study, what cannot be reproduced, each workload, the figures.
    assert!(html.contains("Study experiment:") && html.contains("Not reproducible here:"));
    assert!(html.contains("round trip against loads"));
    assert!(html.contains("percentiles at the ends of the sweep"));
    // Two workloads x (sweep lines + end bars) = 4 figures.
    assert_eq!(html.matches("<svg").count(), 4, "figures");
    // Log axis labels in microseconds and the sweep axis with its unit.
    assert!(
        html.contains(" µs<") || html.contains(" µs</text>"),
        "µs labels"
    );
    assert!(html.contains("background loads"));
    // Bars are drawn: the percentile colours appear as filled rectangles.
    assert!(html.matches("<rect").count() > 20);
    // Contention achieved is in the table.
    assert!(html.contains("8 loads: 39200/40000 req/s, 160% of a core"));
    // Each percentile's interval is in the table, p99.99's too few.
    assert!(html.contains("<span class=\"ci\">too few</span>"));
    assert!(html.matches("<span class=\"ci\">").count() > html.matches("too few").count());
    // Whiskers on the bars: three strokes (the line and its caps) per
    // percentile with an interval, four of five here, on every bar group.
    let bars = html
        .split("percentiles at the ends of the sweep")
        .nth(1)
        .unwrap();
    assert!(bars.matches("<polyline").count() >= 12, "whiskers");
    // The scenario text is escaped into the page.
    assert!(html.contains("[contention.loads]"));
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

#[test]
fn skipped_points_and_throughput_render() {
    let db = temp_db("skip");
    let (store, id, _) = stored_run(&db, "native-bridge-switch");
    let html = report::render(&store.load(id).unwrap());
    assert!(html.contains("class=\"skipped\""));
    assert!(html.contains("poll-mode endpoint"));
    assert!(html.contains("round-trip percentiles per configuration"));
    let (store2, id2, _) = stored_run(&db, "stream-sessions");
    let html = report::render(&store2.load(id2).unwrap());
    assert!(html.contains("throughput against sessions"));
    assert!(html.contains("throughput (Gbit/s)"));
    let _ = (store, id);
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

#[test]
fn two_runs_compare_point_by_point() {
    let db = temp_db("compare");
    let (store, a, _) = stored_run(&db, "cpu-contention");
    let (store, b) = {
        drop(store);
        let (s, b, _) = stored_run(&db, "cpu-contention");
        (s, b)
    };
    let ra = store.load(a).unwrap();
    let rb = store.load(b).unwrap();
    let pairs = report::pairs(&ra, &rb);
    assert_eq!(pairs.len(), ra.scenarios[0].points.len());
    let html = report::compare(&ra, &rb);
    assert!(html.contains(&format!("run {a} vs run {b}")));
    assert!(html.contains("<svg"));
    // Identical runs: B / A is 1 within its interval at every point.
    assert!(html.contains("+0.0% ["), "identical runs differ by 0%");
    assert!(html.contains("no significant change"));
    assert!(!html.contains("significant at 95%"));
    for p in &pairs {
        for c in p.change.iter().flatten() {
            assert_eq!(c.verdict, significance::Verdict::NoChange, "{}", c.words());
        }
    }
    // A point twice as slow in B is a significant slowdown, and back.
    let pa = ra.scenarios[0]
        .points
        .iter()
        .find(|o| o.document.is_some())
        .unwrap();
    let mut slow = pa.clone();
    slow.document = Some(document(80, 3));
    let mut fast = pa.clone();
    fast.document = Some(document(40, 3));
    let c = significance::of_points(&fast, &slow, Statistic::P50).unwrap();
    assert_eq!(c.verdict, significance::Verdict::Slower, "{}", c.words());
    assert!(c.band.unwrap().lo > 1.0 && c.words().contains("slower, significant at 95%"));
    let c = significance::of_points(&slow, &fast, Statistic::P99).unwrap();
    assert_eq!(c.verdict, significance::Verdict::Faster, "{}", c.words());
    // p99.99 of 30,000 round trips: too few to tell.
    let c = significance::of_points(&slow, &fast, Statistic::P9999).unwrap();
    assert_eq!(c.verdict, significance::Verdict::TooFew, "{}", c.words());
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

#[test]
fn the_guests_accelerator_is_stored_with_the_run_and_reported() {
    use vnio_lab::guest::GuestEnvironment;
    use vnio_lab::testbed::{BedDescription, GuestDescription, HostDescription};
    let db = temp_db("guests");
    let (store, id, _) = stored_run(&db, "vm-vm");
    // A run without guests says so; older rows have no guests field at all.
    let html = report::render(&store.load(id).unwrap());
    assert!(html.contains("none (no VM host in this run)"));
    let guests = GuestEnvironment {
        accel: "tcg".into(),
        why: "/dev/kvm cannot run a stock guest".into(),
        qemu: "QEMU emulator version 7.2.22".into(),
        image: "0123456789abcdef".into(),
        kernel: "6.1.0-56-amd64".into(),
    };
    store.set_guests(id, &guests).unwrap();
    let bed = BedDescription {
        configuration: "switch".into(),
        wire: vnio_lab::scenario::WireKind::Switch,
        knobs: Default::default(),
        hosts: vec![HostDescription {
            name: "b".into(),
            kind: vnio_lab::scenario::HostKind::Vm,
            netns: None,
            machine: None,
            addr: "10.77.1.2".parse().unwrap(),
            ifname: None,
            guest: Some(GuestDescription {
                accel: "tcg".into(),
                nic: "vhost-user port h2".into(),
                ready_s: 14.25,
            }),
        }],
        notes: Vec::new(),
        machines: Vec::new(),
    };
    store.set_testbeds(id, "vm-vm", &[bed]).unwrap();
    let loaded = store.load(id).unwrap();
    assert_eq!(loaded.guests.as_ref(), Some(&guests));
    // The host's environment is untouched by the guests' next to it.
    assert_eq!(loaded.environment, Environment::default());
    let html = report::render(&loaded);
    assert!(
        html.contains("TCG (/dev/kvm cannot run a stock guest)"),
        "environment row"
    );
    assert!(html.contains("guests ran under TCG"), "the warning");
    assert!(
        html.contains("TCG guest on vhost-user port h2, agent ready 14.2 s"),
        "the testbed"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

/// A stored run exported and read back with the hdrhistogram crate's own
/// interval-log reader: one interval per iteration, back to back from the
/// document's start, each the stored histogram bucket for bucket; and the
/// CSV read back with a CSV reader: a header, a row per point, the chosen
/// iteration's numbers.
#[test]
fn a_stored_run_exports_as_interval_logs_and_csv_that_read_back() {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use vnio_lab::export;
    use vnio_measure::stats::Encoded;

    let db = temp_db("export");
    let (store, id, outs) = stored_run(&db, "cpu-contention");
    let run = store.load(id).unwrap();
    let dir = db.parent().unwrap().join("hlog");
    let files = export::hlogs(&run, &dir).unwrap();
    let measured: Vec<&PointOutcome> = outs.iter().filter(|o| o.document.is_some()).collect();
    assert_eq!(files.len(), measured.len());
    for (o, file) in measured.iter().zip(&files) {
        assert_eq!(file, &dir.join(export::hlog_name("cpu-contention", o)));
        let text = std::fs::read(file).unwrap();
        let doc = o.document.as_ref().unwrap();
        let mut intervals = Vec::new();
        let mut base = None;
        for entry in IntervalLogIterator::new(&text) {
            match entry.unwrap() {
                LogEntry::BaseTime(t) => base = Some(t),
                LogEntry::StartTime(_) => {}
                LogEntry::Interval(h) => intervals.push((
                    h.start_timestamp(),
                    h.duration(),
                    h.encoded_histogram().to_owned(),
                )),
            }
        }
        let started = Duration::from_nanos(doc.started_unix_ns);
        let base = base.unwrap();
        assert!(
            base.abs_diff(started) < Duration::from_millis(1),
            "BaseTime"
        );
        assert_eq!(intervals.len(), doc.iterations.len());
        for (i, (it, (start, length, b64))) in doc.iterations.iter().zip(&intervals).enumerate() {
            assert_eq!(*start, Duration::from_secs(i as u64), "back to back");
            assert_eq!(*length, Duration::from_secs(1));
            let read = Latency::decode(&Encoded {
                hdr_v2_deflate_b64: b64.clone(),
                over_1ms: 0,
                over_5ms: 0,
                clamped: 0,
            })
            .unwrap();
            let stored = Latency::decode(it.merged.histogram.as_ref().unwrap()).unwrap();
            assert_eq!(read.histogram(), stored.histogram(), "iteration {i}");
            let s = it.merged.latency.as_ref().unwrap();
            assert_eq!(read.quantile(0.5), s.p50_ns);
            assert_eq!(read.quantile(0.99), s.p99_ns);
            assert_eq!(read.quantile(0.999), s.p999_ns);
        }
    }

    let mut text = Vec::new();
    assert_eq!(export::csv(&run, &mut text).unwrap(), outs.len());
    let mut reader = csv::Reader::from_reader(text.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header, export::CSV_COLUMNS);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), outs.len());
    for (row, o) in rows.iter().zip(&outs) {
        assert_eq!(row[col("configuration")], o.point.configuration);
        assert_eq!(row[col("status")], *o.status.as_str());
        match o.document.as_ref().and_then(|d| d.chosen()) {
            Some(it) => {
                let s = it.merged.latency.as_ref().unwrap();
                assert_eq!(row[col("p99_ns")], s.p99_ns.to_string());
                assert_eq!(row[col("ops")], it.merged.ops.to_string());
                assert!(row[col("hlog")].ends_with(".hlog"));
            }
            None => {
                assert_eq!(&row[col("p99_ns")], "");
                assert!(!row[col("error")].is_empty(), "a skipped point says why");
            }
        }
    }
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

#[test]
fn machines_and_their_clocks_are_stored_and_reported() {
    use vnio_lab::machine::ClockOffset;
    use vnio_lab::testbed::span::MachineDescription;
    use vnio_lab::testbed::{BedDescription, HostDescription};
    let db = temp_db("machines");
    let (store, id, _) = stored_run(&db, "native-bridge-switch");
    let machine = MachineDescription {
        name: "m1".into(),
        ssh: "root@192.0.2.7".into(),
        address: "192.0.2.7".into(),
        interface: "eth0".into(),
        local_address: "192.0.2.1".into(),
        binary: "/x/vnio".into(),
        clock: Some(ClockOffset {
            offset_ns: -2_500,
            uncertainty_ns: 41_000,
            rtt_ns: 82_000,
            samples: 16,
        }),
    };
    let bed = BedDescription {
        configuration: "overlay".into(),
        wire: vnio_lab::scenario::WireKind::Switch,
        knobs: Default::default(),
        hosts: vec![HostDescription {
            name: "server".into(),
            kind: vnio_lab::scenario::HostKind::Namespace,
            netns: None,
            machine: Some("m1".into()),
            addr: "10.77.1.2".parse().unwrap(),
            ifname: None,
            guest: None,
        }],
        notes: Vec::new(),
        machines: vec![machine.clone()],
    };
    store
        .set_testbeds(id, "native-bridge-switch", &[bed])
        .unwrap();
    let loaded = store.load(id).unwrap();
    let beds = &loaded.scenarios[0].testbeds;
    assert_eq!(beds[0].machines, vec![machine]);
    let html = report::render(&loaded);
    assert!(html.contains("Machines and clocks"), "the machines table");
    assert!(
        html.contains("<td>-2.5</td><td>41.0</td><td>82.0</td>"),
        "the clock"
    );
    assert!(html.contains("refused below 41.0 µs"), "the one-way rule");
    assert!(
        html.contains("server (namespace, 10.77.1.2, on machine m1)"),
        "the host"
    );
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}

#[test]
fn failed_sample_checks_are_warnings_on_the_report() {
    let db = temp_db("checks");
    let (store, id, _) = stored_run(&db, "cpu-contention");
    let mut run = store.load(id).unwrap();
    // Every second slower than the last: neither independent nor stationary.
    for o in run.scenarios[0].points.iter_mut() {
        if let Some(d) = o.document.as_mut() {
            for it in d.iterations.iter_mut() {
                it.seconds = 20.0;
                it.intervals = (0..20)
                    .map(|t| vnio_measure::result::IntervalPoint {
                        t_s: t,
                        ops: 1000,
                        mean_ns: 20_000.0 + 500.0 * t as f64,
                        ..Default::default()
                    })
                    .collect();
            }
            d.conclude();
            assert!(d.checks.iter().all(|c| !c.passed), "{:?}", d.checks);
        }
    }
    let html = report::render(&run);
    assert!(
        html.contains("warning: the run is not stationary"),
        "stationarity"
    );
    assert!(html.contains("are not independent"), "independence");
    // A document stored before intervals (vnio.result/1) shows none, and
    // does not claim its samples were too few.
    for o in run.scenarios[0].points.iter_mut() {
        if let Some(d) = o.document.as_mut() {
            for it in d.iterations.iter_mut() {
                if let Some(l) = it.merged.latency.as_mut() {
                    l.ci = Default::default();
                }
            }
        }
    }
    let html = report::render(&run);
    assert!(!html.contains("<span class=\"ci\">"), "no intervals");
    let _ = std::fs::remove_dir_all(db.parent().unwrap().parent().unwrap());
}
