//! Writing a run into the store as it happens: the run, its scenarios and
//! testbeds, each point as soon as it is measured, and the final status.
//! Separate from reading because the runner only writes and the reports
//! only read; a point written is never rewritten.

use rusqlite::params;
use vnio_measure::env::Environment;

use super::{now_ns, EnvColumn, Store, StoreError};
use crate::guest::GuestEnvironment;
use crate::outcome::BedDescription;
use crate::outcome::PointOutcome;
use crate::scenario::{FindingsAsRun, Overrides, Plan, Source};

impl Store {
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
            "INSERT INTO scenarios (run_id, seq, name, origin, text, title, maps_to, cannot, run_spec, configurations, findings)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                serde_json::to_string(&FindingsAsRun::of(scenario)).unwrap_or_default(),
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
        // Each percentile's interval bounds, null where too few samples.
        let ci: [(Option<i64>, Option<i64>); 5] = l
            .map(|l| {
                l.ci.by_percentile()
                    .map(|(_, c)| (c.lo_ns.map(|v| v as i64), c.hi_ns.map(|v| v as i64)))
            })
            .unwrap_or_default();
        let doc = o
            .document
            .as_ref()
            .map(|d| serde_json::to_string(d).unwrap_or_default());
        self.sql(self.conn.execute(
            "INSERT OR REPLACE INTO points (run_id, scenario, seq, configuration, workload, kind, sweep_param, sweep_value,
                status, error, mean_ns, p50_ns, p90_ns, p99_ns, p999_ns, p9999_ns, max_ns, over_1ms_pct,
                ops_per_s, gbps, loss_pct, point, contention, document, line_rtt_ns,
                p50_lo_ns, p50_hi_ns, p90_lo_ns, p90_hi_ns, p99_lo_ns, p99_hi_ns,
                p999_lo_ns, p999_hi_ns, p9999_lo_ns, p9999_hi_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25,
                ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, ?35)",
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
                chosen
                    .and_then(|it| it.line_round_trip.as_ref())
                    .and_then(|l| l.median_ns),
                ci[0].0,
                ci[0].1,
                ci[1].0,
                ci[1].1,
                ci[2].0,
                ci[2].1,
                ci[3].0,
                ci[3].1,
                ci[4].0,
                ci[4].1,
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
}
