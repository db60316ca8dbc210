//! The results store: one SQLite file (default `results/lab.db`) holding
//! every run: the scenario texts, the revision of vnio that ran them, the
//! environment, the testbeds as built, and per point the statistics and the
//! full `vnio.result/1` document with its histograms. Reports and
//! comparisons are rendered from here only, so a run can be re-rendered at
//! any time, on any machine, from the file alone.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use vnio_measure::env::Environment;

use crate::guest::GuestEnvironment;
use crate::runner::{PointOutcome, Status};
use crate::scenario::{Overrides, Plan, Source};
use crate::testbed::BedDescription;

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
    PRIMARY KEY (run_id, scenario, seq)
);
";

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

    /// Record a new run; returns its id.
    pub fn begin_run(
        &self,
        name: &str,
        title: &str,
        revision: &str,
        environment: &Environment,
        overrides: &Overrides,
    ) -> Result<i64, StoreError> {
        let env = serde_json::to_string(environment).unwrap_or_default();
        let ov = serde_json::to_string(overrides).unwrap_or_default();
        self.sql(self.conn.execute(
            "INSERT INTO runs (name, title, started_unix_ns, status, pid, revision, environment, overrides)
             VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7)",
            params![name, title, now_ns(), std::process::id(), revision, env, ov],
        ))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Record the guests' environment of run `run` (accelerator, QEMU,
    /// image) next to the host's.
    pub fn set_guests(&self, run: i64, guests: &GuestEnvironment) -> Result<(), StoreError> {
        let env: String = self.sql(self.conn.query_row(
            "SELECT environment FROM runs WHERE id = ?1",
            params![run],
            |r| r.get(0),
        ))?;
        let mut column: EnvColumn = serde_json::from_str(&env)
            .map_err(|e| self.corrupt(run, format!("environment: {e}")))?;
        column.guests = Some(guests.clone());
        self.sql(self.conn.execute(
            "UPDATE runs SET environment = ?2 WHERE id = ?1",
            params![run, serde_json::to_string(&column).unwrap_or_default()],
        ))?;
        Ok(())
    }

    /// Record a scenario of run `run` (before its points).
    pub fn add_scenario(
        &self,
        run: i64,
        seq: usize,
        source: &Source,
        scenario: &crate::scenario::Scenario,
        plan: &Plan,
    ) -> Result<(), StoreError> {
        let cfgs: Vec<(String, Option<String>)> = plan
            .configurations
            .iter()
            .map(|c| (c.name.clone(), c.description.clone()))
            .collect();
        self.sql(self.conn.execute(
            "INSERT INTO scenarios (run_id, seq, name, origin, text, title, maps_to, cannot, run_spec, configurations)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                run,
                seq as i64,
                source.name,
                source.origin,
                source.text,
                scenario.title,
                scenario.maps_to,
                scenario.cannot,
                serde_json::to_string(&plan.run).unwrap_or_default(),
                serde_json::to_string(&cfgs).unwrap_or_default(),
            ],
        ))?;
        Ok(())
    }

    /// Record the testbeds a scenario of run `run` built.
    pub fn set_testbeds(
        &self,
        run: i64,
        scenario: &str,
        testbeds: &[BedDescription],
    ) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "UPDATE scenarios SET testbeds = ?3 WHERE run_id = ?1 AND name = ?2",
            params![
                run,
                scenario,
                serde_json::to_string(testbeds).unwrap_or_default()
            ],
        ))?;
        Ok(())
    }

    /// Record one point's outcome.
    pub fn add_point(&self, run: i64, scenario: &str, o: &PointOutcome) -> Result<(), StoreError> {
        let p = &o.point;
        let chosen = o.document.as_ref().and_then(|d| d.chosen());
        let m = chosen.map(|it| &it.merged);
        let l = m.and_then(|m| m.latency.as_ref());
        let doc = o
            .document
            .as_ref()
            .map(|d| serde_json::to_string(d).unwrap_or_default());
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO points (run_id, scenario, seq, configuration, workload, kind, sweep_param, sweep_value,
                status, error, mean_ns, p50_ns, p90_ns, p99_ns, p999_ns, p9999_ns, max_ns, over_1ms_pct,
                ops_per_s, gbps, loss_pct, point, contention, document)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
            params![
                run,
                scenario,
                p.seq as i64,
                p.configuration,
                p.workload.name,
                p.workload.kind.as_str(),
                p.sweep.map(|(k, _)| k.as_str()),
                p.sweep.map(|(_, v)| v as i64),
                o.status.as_str(),
                o.error,
                l.map(|l| l.mean_ns),
                l.map(|l| l.p50_ns as i64),
                l.map(|l| l.p90_ns as i64),
                l.map(|l| l.p99_ns as i64),
                l.map(|l| l.p999_ns as i64),
                l.map(|l| l.p9999_ns as i64),
                l.map(|l| l.max_ns as i64),
                l.map(|l| l.over_1ms_pct),
                m.map(|m| m.ops_per_s),
                m.map(|m| m.gbps),
                m.map(|m| m.loss_pct),
                serde_json::to_string(p).unwrap_or_default(),
                o.contention.as_ref().map(|c| serde_json::to_string(c).unwrap_or_default()),
                doc,
            ],
        ))?;
        Ok(())
    }

    /// Close run `run` with its final status.
    pub fn finish_run(
        &self,
        run: i64,
        status: &str,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        self.sql(self.conn.execute(
            "UPDATE runs SET status = ?2, error = ?3, finished_unix_ns = ?4 WHERE id = ?1",
            params![run, status, error, now_ns()],
        ))?;
        Ok(())
    }

    /// Every run, newest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare(
            "SELECT r.id, r.name, r.title, r.started_unix_ns, r.finished_unix_ns, r.status, r.revision, r.error,
                    (SELECT COUNT(*) FROM points p WHERE p.run_id = r.id)
             FROM runs r ORDER BY r.id DESC",
        ))?;
        let rows = stmt.query_map([], |r| {
            Ok(RunRow {
                id: r.get(0)?,
                name: r.get(1)?,
                title: r.get(2)?,
                started_unix_ns: r.get(3)?,
                finished_unix_ns: r.get(4)?,
                status: r.get(5)?,
                revision: r.get(6)?,
                error: r.get(7)?,
                points: r.get(8)?,
            })
        });
        self.sql(rows.and_then(|it| it.collect()))
    }

    /// Resolve "last", "last-1" or a number to a run id.
    pub fn resolve(&self, which: &str) -> Result<i64, StoreError> {
        let runs = self.runs()?;
        let no_run = || StoreError::NoRun {
            path: self.path.clone(),
            run: which.to_owned(),
        };
        let back = match which {
            "last" | "latest" => Some(0),
            _ => which
                .strip_prefix("last-")
                .and_then(|n| n.parse::<usize>().ok()),
        };
        if let Some(back) = back {
            return runs.get(back).map(|r| r.id).ok_or_else(no_run);
        }
        let id: i64 = which.parse().map_err(|_| no_run())?;
        runs.iter()
            .find(|r| r.id == id)
            .map(|r| r.id)
            .ok_or_else(no_run)
    }

    /// Everything about run `id`.
    pub fn load(&self, id: i64) -> Result<StoredRun, StoreError> {
        let row = self
            .runs()?
            .into_iter()
            .find(|r| r.id == id)
            .ok_or_else(|| StoreError::NoRun {
                path: self.path.clone(),
                run: id.to_string(),
            })?;
        let (env, ov): (String, String) = self.sql(self.conn.query_row(
            "SELECT environment, overrides FROM runs WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        ))?;
        let EnvColumn {
            host: environment,
            guests,
        } = serde_json::from_str(&env)
            .map_err(|e| self.corrupt(id, format!("environment: {e}")))?;
        let overrides =
            serde_json::from_str(&ov).map_err(|e| self.corrupt(id, format!("overrides: {e}")))?;
        let mut stmt = self.sql(self.conn.prepare(
            "SELECT name, origin, text, title, maps_to, cannot, run_spec, configurations, testbeds
             FROM scenarios WHERE run_id = ?1 ORDER BY seq",
        ))?;
        type Row = (
            String,
            String,
            String,
            String,
            String,
            Option<String>,
            String,
            String,
            String,
        );
        let rows: Vec<Row> = self.sql(
            stmt.query_map(params![id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .and_then(|it| it.collect()),
        )?;
        let mut scenarios = Vec::new();
        for (name, origin, text, title, maps_to, cannot, run_spec, cfgs, beds) in rows {
            let bad = |what: &str, e: serde_json::Error| {
                self.corrupt(id, format!("scenario {name}: {what}: {e}"))
            };
            let points = self.points(id, &name)?;
            scenarios.push(StoredScenario {
                run_spec: serde_json::from_str(&run_spec).map_err(|e| bad("run", e))?,
                configurations: serde_json::from_str(&cfgs)
                    .map_err(|e| bad("configurations", e))?,
                testbeds: serde_json::from_str(&beds).map_err(|e| bad("testbeds", e))?,
                name,
                origin,
                text,
                title,
                maps_to,
                cannot,
                points,
            });
        }
        Ok(StoredRun {
            row,
            environment,
            guests,
            overrides,
            scenarios,
        })
    }

    fn points(&self, run: i64, scenario: &str) -> Result<Vec<PointOutcome>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare(
            "SELECT point, status, error, contention, document FROM points
             WHERE run_id = ?1 AND scenario = ?2 ORDER BY seq",
        ))?;
        type Row = (
            String,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let rows: Vec<Row> = self.sql(
            stmt.query_map(params![run, scenario], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|it| it.collect()),
        )?;
        let mut out = Vec::new();
        for (point, status, error, contention, document) in rows {
            let bad = |what: &str, e: serde_json::Error| {
                self.corrupt(run, format!("scenario {scenario}: point {what}: {e}"))
            };
            out.push(PointOutcome {
                point: serde_json::from_str(&point).map_err(|e| bad("plan", e))?,
                status: serde_json::from_value(serde_json::Value::String(status))
                    .map_err(|e| bad("status", e))?,
                error,
                contention: contention
                    .map(|c| serde_json::from_str(&c))
                    .transpose()
                    .map_err(|e| bad("contention", e))?,
                document: document
                    .map(|d| serde_json::from_str(&d))
                    .transpose()
                    .map_err(|e| bad("document", e))?,
            });
        }
        Ok(out)
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
