//! Reading runs back from the store: the listing, "last"/"last-N"/id
//! resolution, and a whole run with its scenarios and points decoded, which
//! is everything a report or a comparison renders from.

use rusqlite::params;

use super::{EnvColumn, RunRow, Store, StoreError, StoredRun, StoredScenario};
use crate::outcome::PointOutcome;
use crate::scenario::Overrides;

impl Store {
    /// Every run, newest first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        let mut stmt = self.sql(self.conn.prepare(
            "SELECT r.id, r.name, r.title, r.started_unix_ns, r.finished_unix_ns, r.status, r.revision, r.error,
                    (SELECT COUNT(*) FROM points p WHERE p.run_id = r.id), r.overrides
             FROM runs r ORDER BY r.id DESC",
        ))?;
        let rows = stmt.query_map([], |r| {
            // A listing shows what it can: overrides that do not decode
            // are reported when the run itself is loaded.
            let overrides: String = r.get(9)?;
            let knob_overrides = serde_json::from_str::<Overrides>(&overrides)
                .map(|o| o.knobs)
                .unwrap_or_default();
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
                knob_overrides,
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
            "SELECT name, origin, text, title, maps_to, cannot, run_spec, configurations, testbeds,
                    findings
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
            Option<String>,
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
                    r.get(9)?,
                ))
            })
            .and_then(|it| it.collect()),
        )?;
        let mut scenarios = Vec::new();
        for (name, origin, text, title, maps_to, cannot, run_spec, cfgs, beds, findings) in rows {
            let bad = |what: &str, e: serde_json::Error| {
                self.corrupt(id, format!("scenario {name}: {what}: {e}"))
            };
            let points = self.points(id, &name)?;
            scenarios.push(StoredScenario {
                run_spec: serde_json::from_str(&run_spec).map_err(|e| bad("run", e))?,
                configurations: serde_json::from_str(&cfgs)
                    .map_err(|e| bad("configurations", e))?,
                testbeds: serde_json::from_str(&beds).map_err(|e| bad("testbeds", e))?,
                findings: findings
                    .map(|f| serde_json::from_str(&f))
                    .transpose()
                    .map_err(|e| bad("findings", e))?,
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
