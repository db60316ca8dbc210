//! Interchange: a stored run's histograms as HdrHistogram interval logs
//! and its points as CSV, for tools that are not the lab's.
//!
//! **Interval logs** (`.hlog`, the format of HdrHistogram's
//! `HistogramLogWriter`, read by `HistogramLogProcessor` and by every
//! HdrHistogram implementation's log reader): one file per measured point,
//! one interval per iteration, values in nanoseconds. The untagged
//! intervals hold the point's merged histogram (every session of every
//! target); with several targets, each target's follows as an interval
//! tagged `target-ADDRESS`. Each iteration's interval starts where the
//! previous one ended, counted from the document's start (`BaseTime`):
//! the store keeps each iteration's length, not its start instant. The
//! header comments name the run, scenario, point and chosen iteration.
//! The maximum column is in milliseconds (`MaxValueDivisor` 10^6, as the
//! Java writer does).
//!
//! **CSV**: a header row, then one row per point of every scenario, in
//! plan order, with the chosen iteration's statistics ([`CSV_COLUMNS`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use vnio_measure::result::Document;
use vnio_measure::stats::Latency;

use crate::outcome::PointOutcome;
use crate::report::{sweep_value, Row};
use crate::store::StoredRun;

/// Why an export failed. One line.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A file or directory could not be written.
    #[error("{what}")]
    Io {
        /// What was being written.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A stored histogram does not decode or encode.
    #[error("run {run}, {point}: histogram: {detail}")]
    Histogram {
        /// Run id.
        run: i64,
        /// The point ("scenario configuration workload").
        point: String,
        /// What went wrong.
        detail: String,
    },
    /// The run holds no histogram at all (nothing measured, or streams only).
    #[error("run {0} holds no latency histogram to export (nothing measured, or streams only)")]
    Empty(i64),
}

/// The CSV's columns, in order. Latencies are nanoseconds of the chosen
/// iteration (the median by mean); empty where not measured.
pub const CSV_COLUMNS: &[&str] = &[
    "run",
    "scenario",
    "seq",
    "configuration",
    "workload",
    "kind",
    "sweep_parameter",
    "sweep_value",
    "status",
    "iterations",
    "chosen_iteration",
    "ops",
    "ops_per_s",
    "mean_ns",
    "stddev_ns",
    "min_ns",
    "p50_ns",
    "p90_ns",
    "p99_ns",
    "p999_ns",
    "p9999_ns",
    "max_ns",
    "over_1ms_pct",
    "over_5ms_pct",
    "gbps",
    "loss_pct",
    "contention",
    "error",
    "hlog",
    "p50_lo_ns",
    "p50_hi_ns",
    "p90_lo_ns",
    "p90_hi_ns",
    "p99_lo_ns",
    "p99_hi_ns",
    "p999_lo_ns",
    "p999_hi_ns",
    "p9999_lo_ns",
    "p9999_hi_ns",
];

/// The `.hlog` file name of a point: `SCENARIO.CONFIGURATION.WORKLOAD`
/// (and `.PARAMETER-VALUE` for a sweep point), characters other than
/// letters, digits, `-` and `_` replaced by `_`.
pub fn hlog_name(scenario: &str, o: &PointOutcome) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let p = &o.point;
    let mut name = format!(
        "{}.{}.{}",
        clean(scenario),
        clean(&p.configuration),
        clean(&p.workload.name)
    );
    if let Some((param, v)) = p.sweep {
        name.push_str(&format!(".{}-{v}", clean(param.as_str())));
    }
    name.push_str(".hlog");
    name
}

/// True when a point has a histogram to export.
fn has_histogram(o: &PointOutcome) -> bool {
    o.document
        .as_ref()
        .is_some_and(|d| d.iterations.iter().any(|i| i.merged.histogram.is_some()))
}

/// Writes one `.hlog` per measured point of `run` into `dir` (created);
/// the files written, in plan order.
pub fn hlogs(run: &StoredRun, dir: &Path) -> Result<Vec<PathBuf>, ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Io {
        what: format!("creating {}", dir.display()),
        source,
    })?;
    let mut written = Vec::new();
    for sc in &run.scenarios {
        for o in sc.points.iter().filter(|o| has_histogram(o)) {
            let path = dir.join(hlog_name(&sc.name, o));
            let mut text = Vec::new();
            write_hlog(run, &sc.name, o, &mut text)?;
            std::fs::write(&path, text).map_err(|source| ExportError::Io {
                what: format!("writing {}", path.display()),
                source,
            })?;
            written.push(path);
        }
    }
    if written.is_empty() {
        return Err(ExportError::Empty(run.row.id));
    }
    Ok(written)
}

/// Writes the interval log of point `o` (of scenario `scenario` in `run`).
pub fn write_hlog(
    run: &StoredRun,
    scenario: &str,
    o: &PointOutcome,
    out: &mut impl Write,
) -> Result<(), ExportError> {
    let label = format!(
        "{scenario} {} {}",
        o.point.configuration, o.point.workload.name
    );
    let fail = |detail: String| ExportError::Histogram {
        run: run.row.id,
        point: label.clone(),
        detail,
    };
    let Some(doc) = o.document.as_ref() else {
        return Err(fail("not measured".into()));
    };
    let started = UNIX_EPOCH + Duration::from_nanos(doc.started_unix_ns);
    let mut serializer = V2DeflateSerializer::new();
    let mut builder = IntervalLogWriterBuilder::new();
    builder
        .add_comment("[Histogram log format version 1.3]")
        .add_comment(&format!(
            " vnio lab run {} ({}), scenario {scenario}",
            run.row.id, run.row.name
        ))
        .add_comment(&format!(
            " point: {}, workload {} ({}){}",
            o.point.configuration,
            o.point.workload.name,
            o.point.workload.describe(),
            o.point
                .sweep
                .map(|(p, v)| format!(", {}", sweep_value(p, v)))
                .unwrap_or_default()
        ))
        .add_comment(&format!(
            " values in nanoseconds; one interval per iteration ({}), the chosen one (median by mean) is {}",
            doc.iterations.len(),
            doc.chosen + 1
        ))
        .with_start_time(started)
        .with_base_time(started)
        .with_max_value_divisor(1e6);
    let io = |source: std::io::Error| ExportError::Io {
        what: format!("writing the interval log of {label}"),
        source,
    };
    let mut log = builder.begin_log_with(out, &mut serializer).map_err(io)?;
    let mut offset = Duration::ZERO;
    for it in &doc.iterations {
        let length = Duration::from_secs_f64(it.seconds.max(0.0));
        let mut intervals = vec![(None, &it.merged)];
        if it.per_target.len() > 1 {
            intervals.extend(it.per_target.iter().map(|m| (Some(&m.target), m)));
        }
        for (target, m) in intervals {
            let Some(encoded) = &m.histogram else {
                continue;
            };
            let lat = Latency::decode(encoded).map_err(|e| fail(e.to_string()))?;
            let tag_text = target.map(|t| format!("target-{}", t.replace([',', ' '], "_")));
            let tag = tag_text.as_deref().and_then(Tag::new);
            log.write_histogram(lat.histogram(), offset, length, tag)
                .map_err(|e| fail(format!("{e:?}")))?;
        }
        offset += length;
    }
    Ok(())
}

/// Writes `run`'s points as CSV ([`CSV_COLUMNS`]) to `out`; the rows
/// written (the header not counted).
pub fn csv(run: &StoredRun, out: impl Write) -> Result<usize, ExportError> {
    let mut w = ::csv::Writer::from_writer(out);
    let io = |e: ::csv::Error| ExportError::Io {
        what: "writing the CSV".into(),
        source: e.into(),
    };
    w.write_record(CSV_COLUMNS).map_err(io)?;
    let mut rows = 0;
    for sc in &run.scenarios {
        for o in &sc.points {
            w.write_record(csv_row(run.row.id, &sc.name, o))
                .map_err(io)?;
            rows += 1;
        }
    }
    w.flush().map_err(|source| ExportError::Io {
        what: "writing the CSV".into(),
        source,
    })?;
    Ok(rows)
}

fn csv_row(run: i64, scenario: &str, o: &PointOutcome) -> Vec<String> {
    let r = Row::of(o);
    let doc: Option<&Document> = o.document.as_ref();
    let chosen = doc.and_then(|d| d.chosen());
    let m = chosen.map(|i| &i.merged);
    let l = m.and_then(|m| m.latency.as_ref());
    let opt = |v: Option<String>| v.unwrap_or_default();
    let lat = |f: fn(&vnio_measure::stats::Summary) -> String| opt(l.map(f));
    let mut row = vec![
        run.to_string(),
        scenario.to_owned(),
        o.point.seq.to_string(),
        r.configuration.clone(),
        r.workload.clone(),
        r.kind.as_str().to_owned(),
        opt(r.sweep.map(|(p, _)| p.as_str().to_owned())),
        opt(r.sweep.map(|(_, v)| v.to_string())),
        r.status.as_str().to_owned(),
        opt(doc.map(|d| d.iterations.len().to_string())),
        opt(chosen.map(|_| r.iterations.1.to_string())),
        opt(m.map(|m| m.ops.to_string())),
        opt(m.map(|m| m.ops_per_s.to_string())),
        lat(|l| l.mean_ns.to_string()),
        lat(|l| l.stddev_ns.to_string()),
        lat(|l| l.min_ns.to_string()),
        lat(|l| l.p50_ns.to_string()),
        lat(|l| l.p90_ns.to_string()),
        lat(|l| l.p99_ns.to_string()),
        lat(|l| l.p999_ns.to_string()),
        lat(|l| l.p9999_ns.to_string()),
        lat(|l| l.max_ns.to_string()),
        lat(|l| l.over_1ms_pct.to_string()),
        lat(|l| l.over_5ms_pct.to_string()),
        opt(m.map(|m| m.gbps.to_string())),
        opt(m.map(|m| m.loss_pct.to_string())),
        r.contention.clone().unwrap_or_default(),
        r.error.clone().unwrap_or_default(),
        if has_histogram(o) {
            hlog_name(scenario, o)
        } else {
            String::new()
        },
    ];
    // Each percentile's 95% interval, empty where the samples were too few.
    for (_, c) in l.map(|l| l.ci.by_percentile()).into_iter().flatten() {
        row.push(opt(c.lo_ns.map(|v| v.to_string())));
        row.push(opt(c.hi_ns.map(|v| v.to_string())));
    }
    row.resize(CSV_COLUMNS.len(), String::new());
    row
}
