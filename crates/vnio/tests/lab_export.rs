//! `vnio lab export` end to end (root: a real run): a short rr-burst run
//! is stored, exported as interval logs and CSV, and HdrHistogram's Python
//! implementation (the `hdrhistogram` package, `scripts/setup --e2e`)
//! reads every `.hlog` back with the same p50, p99 and p99.9 as the store.

use std::path::Path;
use std::process::{Command, Stdio};

use vnio_lab::runner::PointOutcome;
use vnio_measure::result::Iteration;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// Reads each interval log given and prints, per untagged interval, its
/// count, p50, p99 and p99.9 in ns, and every recorded bucket (value,
/// count): one JSON document.
const READER: &str = r#"
import json, sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
out = {}
for path in sys.argv[1:]:
    reader = HistogramLogReader(path, HdrHistogram(1, 100_000_000_000, 3))
    rows = []
    while True:
        h = reader.get_next_interval_histogram()
        if h is None:
            break
        if h.get_tag() is None:
            rows.append({
                "count": h.get_total_count(),
                "percentiles": [h.get_value_at_percentile(p) for p in (50, 99, 99.9)],
                "buckets": [[i.value_iterated_to, i.count_at_value_iterated_to]
                            for i in h.get_recorded_iterator()],
            })
    reader.close()
    out[path] = rows
print(json.dumps(out))
"#;

fn python_hdrh() -> bool {
    Command::new("python3")
        .args(["-c", "import hdrh.log"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn vnio(journal: &Path, args: &[&str]) -> String {
    let out = Command::new(VNIO)
        .env("VNIO_LAB_JOURNAL", journal)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "vnio {args:?}:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The recorded buckets of a stored histogram: (highest equivalent
/// value, count), ascending.
fn buckets(m: &vnio_measure::result::Measured) -> Vec<(u64, u64)> {
    let lat = vnio_measure::stats::Latency::decode(m.histogram.as_ref().unwrap()).unwrap();
    lat.histogram()
        .iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

#[test]
fn exported_interval_logs_read_back_in_python_with_the_same_percentiles() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the stored run needs root (network namespaces)");
        return;
    }
    if !python_hdrh() {
        eprintln!(
            "skipped: Python's hdrhistogram package is missing (scripts/setup --e2e installs it)"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("vnio-lab-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (journal, db, hlogs, csv) = (
        dir.join("journal"),
        dir.join("lab.db"),
        dir.join("hlog"),
        dir.join("points.csv"),
    );
    run_and_export(&journal, &db, &hlogs, &csv);
    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let points = &run.scenarios[0].points;
    assert_eq!(points.len(), 2, "--quick: burst 1 and 4");

    let files: Vec<String> = points
        .iter()
        .map(|o| {
            let name = vnio_lab::export::hlog_name("rr-burst", o);
            hlogs.join(name).to_str().unwrap().to_owned()
        })
        .collect();
    let read = read_in_python(&files);
    for (o, file) in points.iter().zip(&files) {
        let doc = o.document.as_ref().unwrap();
        let rows = read[file].as_array().unwrap();
        assert_eq!(
            rows.len(),
            doc.iterations.len(),
            "{file}: one per iteration"
        );
        for (it, row) in doc.iterations.iter().zip(rows) {
            python_reads_the_same(file, it, row);
        }
    }
    csv_has_a_row_per_point(&csv, points);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vnio lab run rr-burst` (native, two iterations) into `db`, exported as
/// interval logs under `hlogs` and as `csv`.
fn run_and_export(journal: &Path, db: &Path, hlogs: &Path, csv: &Path) {
    let db_arg = db.to_str().unwrap();
    vnio(
        journal,
        &[
            "lab",
            "run",
            "rr-burst",
            "-c",
            "native",
            "--quick",
            "--duration",
            "400ms",
            "--warmup",
            "100ms",
            "--iterations",
            "2",
            "--db",
            db_arg,
        ],
    );
    vnio(
        journal,
        &[
            "lab",
            "export",
            "last",
            "--db",
            db_arg,
            "--hlog",
            hlogs.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ],
    );
}

/// What Python's hdrhistogram reads from each interval log `files`: per
/// file, per iteration, its count, buckets and percentiles.
fn read_in_python(files: &[String]) -> serde_json::Value {
    let out = Command::new("python3")
        .arg("-c")
        .arg(READER)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Python read iteration `it` of `file` as we recorded it: the same count,
/// the same histogram bucket for bucket, the same percentiles.
fn python_reads_the_same(file: &str, it: &Iteration, row: &serde_json::Value) {
    let ours = it.merged.latency.as_ref().unwrap();
    assert!(ours.count > 100, "{file}: measured");
    assert_eq!(row["count"], ours.count, "{file}: count");
    // The same histogram, bucket for bucket.
    let theirs: Vec<(u64, u64)> = serde_json::from_value(row["buckets"].clone()).unwrap();
    assert_eq!(theirs, buckets(&it.merged), "{file}: buckets");
    // The same percentiles. Implementations round a percentile's
    // rank differently (Java's and Python's to the nearest count,
    // Rust's up): where the ranks differ by one, the value may be
    // the neighbouring recorded one, never further.
    let values: Vec<u64> = theirs.iter().map(|b| b.0).collect();
    let at = |v: u64| values.iter().position(|&x| x == v);
    let said: Vec<u64> = serde_json::from_value(row["percentiles"].clone()).unwrap();
    for (name, a, b) in [
        ("p50", ours.p50_ns, said[0]),
        ("p99", ours.p99_ns, said[1]),
        ("p99.9", ours.p999_ns, said[2]),
    ] {
        let (ia, ib) = (at(a).unwrap(), at(b).unwrap());
        assert!(
            ia.abs_diff(ib) <= 1,
            "{file} {name}: ours {a}, Python's {b}"
        );
    }
}

/// The CSV: a header, one row per point, the chosen iteration's p99.
fn csv_has_a_row_per_point(csv: &Path, points: &[PointOutcome]) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header, vnio_lab::export::CSV_COLUMNS);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), points.len());
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for (row, o) in rows.iter().zip(points) {
        let chosen = o.document.as_ref().unwrap().chosen().unwrap();
        let p99 = chosen.merged.latency.as_ref().unwrap().p99_ns;
        assert_eq!(row[col("p99_ns")], p99.to_string());
        assert_eq!(row[col("status")], "ok");
        assert_eq!(row[col("sweep_parameter")], "burst");
    }
}

#[test]
fn export_refuses_bad_input_in_one_line_and_creates_nothing() {
    let dir = std::env::temp_dir().join(format!("vnio-lab-export-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("none.db");
    let fails = |args: &[&str], want: &str| {
        let out = Command::new(VNIO)
            .args(["lab", "export"])
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
    };
    let csv = dir.join("x.csv");
    fails(
        &["last", "--csv", csv.to_str().unwrap()],
        "no results store",
    );
    fails(&["last"], "--hlog");
    assert!(!db.exists() && !csv.exists(), "nothing created");
    let _ = std::fs::remove_dir_all(&dir);
}
