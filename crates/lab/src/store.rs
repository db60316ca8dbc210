//! The results store: one SQLite file (default `results/lab.db`) holding
//! every run: the scenario texts, the revision of vnio that ran them, the
//! environment, the testbeds as built, and per point the statistics and the
//! full `vnio.result/2` document with its histograms. Reports and
//! comparisons are rendered from here only, so a run can be re-rendered at
//! any time, on any machine, from the file alone.
//!
//! Here: the schema, the types and opening; `store/record.rs` writes a run,
//! `store/load.rs` reads runs back.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use vnio_measure::env::Environment;

use crate::guest::GuestEnvironment;
use crate::outcome::BedDescription;
use crate::outcome::{PointOutcome, Status};
use crate::scenario::{FindingsAsRun, Overrides};

mod load;
mod record;

/// The `environment` column: the host's environment, and the guests' when
/// the run has VM hosts (an older row without them reads back as `None`).
#[derive(Serialize, Deserialize)]
struct EnvColumn {
    #[serde(flatten)]
    host: Environment,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guests: Option<GuestEnvironment>,
}

/// Default location of the store.
pub const DEFAULT_DB: &str = "results/lab.db";
/// Version of the tables below; bumped on incompatible changes.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    title TEXT NOT NULL,
    started_unix_ns INTEGER NOT NULL,
    finished_unix_ns INTEGER,
    status TEXT NOT NULL,
    pid INTEGER NOT NULL,
    revision TEXT NOT NULL,
    environment TEXT NOT NULL,
    overrides TEXT NOT NULL,
    error TEXT
);
CREATE TABLE IF NOT EXISTS scenarios (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    origin TEXT NOT NULL,
    text TEXT NOT NULL,
    title TEXT NOT NULL,
    maps_to TEXT NOT NULL,
    cannot TEXT,
    run_spec TEXT NOT NULL,
    configurations TEXT NOT NULL,
    testbeds TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS points (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    scenario TEXT NOT NULL,
    seq INTEGER NOT NULL,
    configuration TEXT NOT NULL,
    workload TEXT NOT NULL,
    kind TEXT NOT NULL,
    sweep_param TEXT,
    sweep_value INTEGER,
    status TEXT NOT NULL,
    error TEXT,
    mean_ns REAL, p50_ns INTEGER, p90_ns INTEGER, p99_ns INTEGER,
    p999_ns INTEGER, p9999_ns INTEGER, max_ns INTEGER,
    over_1ms_pct REAL, ops_per_s REAL, gbps REAL, loss_pct REAL,
    point TEXT NOT NULL,
    contention TEXT,
    document TEXT,
    line_rtt_ns REAL,
    PRIMARY KEY (run_id, scenario, seq)
);
";

/// Columns added after their table was first released, as (table, column,
/// type): a file made before them gets them when opened. Each is nullable
/// and appended, so a vnio from before it still reads and writes the file
/// (it names the columns it writes) and [`SCHEMA_VERSION`] stays.
/// - `points.line_rtt_ns`: the reported iteration's median cache-line
///   round trip between the switch's and the client's CPUs (knob
///   `placement_probe`); its seconds are in the document.
/// - `points.p50_lo_ns` .. `points.p9999_hi_ns`: the bounds of each
///   percentile's 95% confidence interval (null: too few samples).
/// - `scenarios.findings`: what judging the scenario's findings needs
///   ([`FindingsAsRun`], JSON); null in a run stored before it, whose
///   findings are read from its scenario text.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("points", "line_rtt_ns", "REAL"),
    ("points", "p50_lo_ns", "INTEGER"),
    ("points", "p50_hi_ns", "INTEGER"),
    ("points", "p90_lo_ns", "INTEGER"),
    ("points", "p90_hi_ns", "INTEGER"),
    ("points", "p99_lo_ns", "INTEGER"),
    ("points", "p99_hi_ns", "INTEGER"),
    ("points", "p999_lo_ns", "INTEGER"),
    ("points", "p999_hi_ns", "INTEGER"),
    ("points", "p9999_lo_ns", "INTEGER"),
    ("points", "p9999_hi_ns", "INTEGER"),
    ("scenarios", "findings", "TEXT"),
];

/// Why the store failed. One line.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused.
    #[error("results store {path}: {source}")]
    Sql {
        /// The database file.
        path: String,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// The file or its directory could not be made.
    #[error("results store {path}: {source}")]
    Io {
        /// The database file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stored value does not decode.
    #[error("results store {path}: run {run}: {detail}")]
    Corrupt {
        /// The database file.
        path: String,
        /// Run id.
        run: i64,
        /// What did not decode.
        detail: String,
    },
    /// No such run.
    #[error("results store {path}: no run {run} (see `vnio lab list`)")]
    NoRun {
        /// The database file.
        path: String,
        /// What was asked for.
        run: String,
    },
    /// A newer vnio wrote this file.
    #[error("results store {path}: schema version {found}, this vnio reads {SCHEMA_VERSION}")]
    Version {
        /// The database file.
        path: String,
        /// Version in the file.
        found: i64,
    },
}

/// A run as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// Run id.
    pub id: i64,
    /// Scenario or set name.
    pub name: String,
    /// Its title.
    pub title: String,
    /// Start, Unix ns.
    pub started_unix_ns: i64,
    /// End, Unix ns (None while running or if it was killed).
    pub finished_unix_ns: Option<i64>,
    /// running, complete, interrupted, failed, killed.
    pub status: String,
    /// `git describe` of the vnio that ran it.
    pub revision: String,
    /// Error that ended the run, if any.
    pub error: Option<String>,
    /// Points stored.
    pub points: i64,
    /// Knobs set for the run (`--knob`): it is not the scenario as written.
    #[serde(default)]
    pub knob_overrides: Vec<crate::scenario::KnobOverride>,
}

/// One scenario of a stored run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredScenario {
    /// Name.
    pub name: String,
    /// Where it came from.
    pub origin: String,
    /// The TOML text as run.
    pub text: String,
    /// Title.
    pub title: String,
    /// Study experiment.
    pub maps_to: String,
    /// What this machine cannot reproduce.
    pub cannot: Option<String>,
    /// Length per iteration as run (after overrides).
    pub run_spec: crate::scenario::RunSpec,
    /// Configuration names and descriptions, in run order.
    pub configurations: Vec<(String, Option<String>)>,
    /// The testbeds as built.
    pub testbeds: Vec<BedDescription>,
    /// Its points, in plan order.
    pub points: Vec<PointOutcome>,
    /// What judging its findings needs, as the run stored it; none for a
    /// run stored before the lab kept it (judged from `text` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<FindingsAsRun>,
}

/// Everything about one run, enough to render its report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRun {
    /// The listing row.
    pub row: RunRow,
    /// Environment at the start of the run.
    pub environment: Environment,
    /// The guests' side of it (accelerator, QEMU, image), for runs with VM
    /// hosts.
    pub guests: Option<GuestEnvironment>,
    /// Overrides given on the command line or by the set.
    pub overrides: Overrides,
    /// Its scenarios, in run order.
    pub scenarios: Vec<StoredScenario>,
}

/// The store.
pub struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    /// Open (creating file, directory and tables as needed). Runs left
    /// "running" by a process that no longer exists are marked "killed".
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let name = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: name.clone(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(|source| StoreError::Sql {
            path: name.clone(),
            source,
        })?;
        let store = Store { conn, path: name };
        store.sql(store.conn.busy_timeout(std::time::Duration::from_secs(10)))?;
        store.sql(store.conn.execute_batch(SCHEMA))?;
        store.add_columns()?;
        let found: Option<String> = store.sql(
            store
                .conn
                .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                    r.get(0)
                })
                .optional(),
        )?;
        match found.and_then(|v| v.parse::<i64>().ok()) {
            None => {
                store.sql(store.conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?1)",
                    params![SCHEMA_VERSION.to_string()],
                ))?;
            }
            Some(v) if v != SCHEMA_VERSION => {
                return Err(StoreError::Version {
                    path: store.path.clone(),
                    found: v,
                })
            }
            Some(_) => {}
        }
        store.mark_killed()?;
        Ok(store)
    }

    fn sql<T>(&self, r: rusqlite::Result<T>) -> Result<T, StoreError> {
        r.map_err(|source| StoreError::Sql {
            path: self.path.clone(),
            source,
        })
    }

    fn corrupt(&self, run: i64, detail: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            run,
            detail: detail.to_string(),
        }
    }

    /// Adds the [`ADDED_COLUMNS`] a file made before them lacks.
    fn add_columns(&self) -> Result<(), StoreError> {
        for (table, column, kind) in ADDED_COLUMNS {
            let mut stmt = self.sql(self.conn.prepare(&format!("PRAGMA table_info({table})")))?;
            let names: Vec<String> = self.sql(
                stmt.query_map([], |r| r.get::<_, String>(1))
                    .and_then(|it| it.collect()),
            )?;
            if !names.iter().any(|n| n == column) {
                self.sql(
                    self.conn
                        .execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}")),
                )?;
            }
        }
        Ok(())
    }

    fn mark_killed(&self) -> Result<(), StoreError> {
        let mut stmt = self.sql(
            self.conn
                .prepare("SELECT id, pid FROM runs WHERE status = 'running'"),
        )?;
        let rows: Vec<(i64, i64)> = self.sql(
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|it| it.collect()),
        )?;
        for (id, pid) in rows {
            // A zombie or exiting runner is gone too (it stores nothing more).
            let alive =
                vnio_topo::owner::is_running(pid as i32) && pid != i64::from(std::process::id());
            if !alive {
                self.sql(self.conn.execute(
                    "UPDATE runs SET status = 'killed', error = 'the run ended without finishing (killed?)' WHERE id = ?1",
                    params![id],
                ))?;
            }
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &str {
        &self.path
    }
}

fn now_ns() -> i64 {
    vnio_measure::clock::realtime_ns() as i64
}

/// The revision of vnio that runs: `git describe --always --dirty --tags`
/// of the tree it was built from (recorded at build time by `build.rs`),
/// else the package version.
pub fn revision() -> String {
    match option_env!("VNIO_GIT_DESCRIBE") {
        Some(d) if !d.is_empty() => d.to_owned(),
        _ => format!("v{}", env!("CARGO_PKG_VERSION")),
    }
}

/// Is a stored status one that counts as measured.
pub fn measured(status: Status) -> bool {
    matches!(status, Status::Ok | Status::Interrupted)
}
