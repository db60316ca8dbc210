//! Running a prepared scenario or set into the store: prepare the guests
//! when a plan has VM hosts, record the run, run every scenario's plan
//! (each outcome stored as soon as it is known), finish the run, write
//! its report and judge its findings. Progress goes to the caller's
//! [`Progress`]; the caller's stop flag (its signal handlers) ends the
//! run early, with what was measured kept.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{Lab, LabError, Prepared};
use crate::findings::{self, RunFindings};
use crate::guest::{GuestEnvironment, GuestKit};
use crate::runner::{self, Observer, RunnerOptions};
use crate::store::{self, Store, StoredScenario};

/// What a run reports beyond the runner's [`Observer`] events.
pub trait Progress: Observer {
    /// A line for the user (what a set leaves out, the guests prepared).
    fn note(&self, _line: &str) {}
    /// A scenario of the run starts.
    fn scenario_started(&self, _name: &str) {}
    /// A scenario of the run ended; its points as stored.
    fn scenario_finished(&self, _scenario: &StoredScenario) {}
}

impl Progress for runner::Silent {}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The `vnio` binary the hosts run (agents, switch, generators).
    pub vnio: PathBuf,
    /// Where to write the report [default: next to the store,
    /// `lab-run-ID.html`].
    pub report: Option<PathBuf>,
    /// The crash journal.
    pub journal: vnio_topo::Journal,
    /// The scenarios may carry `ssh_options` that run commands
    /// (`--trust-scenario`; [`crate::scenario::machines::TRUSTED_ONLY`]).
    pub trust_scenario: bool,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its id in the store.
    pub run: i64,
    /// "complete", "interrupted" or "failed", as stored.
    pub status: &'static str,
    /// The error that ended it (its scenario named), if any.
    pub failure: Option<String>,
    /// True when the stop flag ended it.
    pub stopped: bool,
    /// The store it is in.
    pub store: String,
    /// Its report.
    pub report: PathBuf,
    /// The guests' environment, for runs with VM hosts.
    pub guests: Option<GuestEnvironment>,
    /// Its verdicts.
    pub findings: RunFindings,
}

impl Lab {
    /// Runs `prepared` (needs root) and stores it. Failures of points are
    /// stored with them; a scenario's run that fails ends the run
    /// ([`Finished::failure`]), which is still stored and reported.
    pub fn run<P: Progress>(
        &self,
        prepared: &Prepared,
        settings: &RunSettings,
        stop: &Arc<AtomicBool>,
        progress: &P,
    ) -> Result<Finished, LabError> {
        if !crate::is_root() {
            return Err(LabError::NotRoot);
        }
        for (src, s, _) in &prepared.runs {
            crate::scenario::machines::check_trust(&src.name, s, settings.trust_scenario)
                .map_err(LabError::Plan)?;
        }
        for n in &prepared.notes {
            progress.note(n);
        }
        let guests = if prepared.runs.iter().any(|(_, _, p)| p.has_vm_hosts()) {
            progress.note("vnio lab: preparing the guests (image, accelerator)");
            let kit = GuestKit::prepare().map_err(LabError::Guests)?;
            let g = kit.environment();
            progress.note(&format!(
                "vnio lab: guests: image {} (kernel {}), accel {} ({})",
                g.image, g.kernel, g.accel, g.why
            ));
            Some(kit)
        } else {
            None
        };
        let store = Store::open(&self.db)?;
        let env = vnio_measure::env::Environment::capture(250);
        let source = &prepared.source;
        let run_id = store.begin_run(
            &source.name,
            &super::title_of(source),
            &store::revision(),
            &env,
            &prepared.overrides,
        )?;
        let guest_env = guests.as_ref().map(GuestKit::environment);
        if let Some(g) = &guest_env {
            store.set_guests(run_id, g)?;
        }
        let opts = RunnerOptions {
            vnio: settings.vnio.clone(),
            journal: settings.journal.clone(),
            guests,
        };
        let mut failure: Option<String> = None;
        for (seq, (src, s, plan)) in prepared.runs.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            progress.scenario_started(&src.name);
            store.add_scenario(run_id, seq, src, s, plan)?;
            let mut sink = |o: &runner::PointOutcome| {
                store
                    .add_point(run_id, &src.name, o)
                    .map_err(|e| e.to_string())
            };
            match runner::run(s, plan, &opts, stop, progress, &mut sink) {
                Ok(summary) => store.set_testbeds(run_id, &src.name, &summary.testbeds)?,
                Err(e) => {
                    failure = Some(format!("{}: {e}", src.name));
                    break;
                }
            }
            let stored = store.load(run_id)?;
            if let Some(sc) = stored.scenarios.iter().find(|x| x.name == src.name) {
                progress.scenario_finished(sc);
            }
        }
        let stopped = stop.load(Ordering::Relaxed);
        let status = match (&failure, stopped) {
            (Some(_), _) => "failed",
            (None, true) => "interrupted",
            (None, false) => "complete",
        };
        store.finish_run(run_id, status, failure.as_deref())?;
        let report = settings
            .report
            .clone()
            .unwrap_or_else(|| self.beside_store(&format!("lab-run-{run_id}.html")));
        self.write_report(&store, run_id, &report)?;
        Ok(Finished {
            run: run_id,
            status,
            failure,
            stopped,
            store: store.path().to_owned(),
            report,
            guests: guest_env,
            findings: findings::judge_run(&store.load(run_id)?),
        })
    }
}
