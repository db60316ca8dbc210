//! The lab behind one small API, as `vnio lab` uses it: expand a name into
//! scenarios and plans ([`prepare`], [`catalogue`]), run them into the
//! store with progress callbacks ([`Lab::run`]), read the store back (runs,
//! reports, findings, comparisons, [`crate::export`]s) and clean up what crashed runs
//! left ([`clean`]). Nothing here prints: the CLI renders what these
//! return.

mod error;
mod members;
mod run;

use std::path::{Path, PathBuf};

pub use error::LabError;
pub use members::{catalogue, expand, prepare, title_of, Expanded, Listed, Member, Prepared};
pub use run::{Finished, Progress, RunSettings};

use crate::findings::{self, Change, RunFindings};
use crate::report::{self, Pair};
use crate::store::{RunRow, Store, StoredRun};

/// A results store and what the lab does with it.
#[derive(Debug, Clone)]
pub struct Lab {
    db: PathBuf,
}

/// Two stored runs side by side.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The first run's id.
    pub a: i64,
    /// The second run's id.
    pub b: i64,
    /// Verdicts judged in both runs that changed.
    pub changed: Vec<Change>,
    /// Points measured in both, paired.
    pub pairs: Vec<Pair>,
    /// The knobs each run set (`--knob`), the first run's then the second's.
    pub knob_overrides: [Vec<crate::scenario::KnobOverride>; 2],
    /// The HTML comparison written.
    pub html: PathBuf,
}

impl Lab {
    /// The lab with its store at `db` (created by the first run).
    pub fn new(db: impl Into<PathBuf>) -> Lab {
        Lab { db: db.into() }
    }

    /// The store's file.
    pub fn db(&self) -> &Path {
        &self.db
    }

    /// `file` in the store's directory (reports go there by default).
    pub fn beside_store(&self, file: &str) -> PathBuf {
        self.db
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join(file)
    }

    /// The store, which must exist (reading never creates one).
    pub fn existing_store(&self) -> Result<Store, LabError> {
        if !self.db.exists() {
            return Err(LabError::NoStore(self.db.clone()));
        }
        Ok(Store::open(&self.db)?)
    }

    /// The runs in the store; `None` when there is no store yet.
    pub fn runs(&self) -> Result<Option<Vec<RunRow>>, LabError> {
        if !self.db.exists() {
            return Ok(None);
        }
        Ok(Some(Store::open(&self.db)?.runs()?))
    }

    /// Stored run `which` (an id, `last`, `last-1`, ...).
    pub fn load(&self, which: &str) -> Result<StoredRun, LabError> {
        let store = self.existing_store()?;
        Ok(store.load(store.resolve(which)?)?)
    }

    /// Renders run `which`'s report to `out` [default: next to the store,
    /// `lab-run-ID.html`]; the path written.
    pub fn report(&self, which: &str, out: Option<PathBuf>) -> Result<PathBuf, LabError> {
        let store = self.existing_store()?;
        let id = store.resolve(which)?;
        let path = out.unwrap_or_else(|| self.beside_store(&format!("lab-run-{id}.html")));
        self.write_report(&store, id, &path)?;
        Ok(path)
    }

    fn write_report(&self, store: &Store, run: i64, path: &Path) -> Result<(), LabError> {
        let html = report::render(&store.load(run)?);
        std::fs::write(path, html)
            .map_err(|e| LabError::io(format!("writing the report {}", path.display()), e))
    }

    /// The verdicts on the findings run `which`'s scenarios declare.
    pub fn findings(&self, which: &str) -> Result<RunFindings, LabError> {
        Ok(findings::judge_run(&self.load(which)?))
    }

    /// Runs `a` and `b` compared: changed verdicts, paired points, and the
    /// HTML comparison written to `out` [default: next to the store,
    /// `lab-compare-A-B.html`].
    pub fn compare(&self, a: &str, b: &str, out: Option<PathBuf>) -> Result<Comparison, LabError> {
        let store = self.existing_store()?;
        let (ia, ib) = (store.resolve(a)?, store.resolve(b)?);
        let (ra, rb) = (store.load(ia)?, store.load(ib)?);
        let changed = findings::changes(&findings::judge_run(&ra), &findings::judge_run(&rb));
        let html = out.unwrap_or_else(|| self.beside_store(&format!("lab-compare-{ia}-{ib}.html")));
        std::fs::write(&html, report::compare(&ra, &rb))
            .map_err(|e| LabError::io(format!("writing {}", html.display()), e))?;
        Ok(Comparison {
            a: ia,
            b: ib,
            changed,
            pairs: report::pairs(&ra, &rb),
            knob_overrides: [ra.overrides.knobs.clone(), rb.overrides.knobs.clone()],
            html,
        })
    }
}

impl Lab {
    /// Writes run `which`'s histograms as interval logs into `dir`, one
    /// `.hlog` per measured point ([`crate::export`]); the files written.
    pub fn export_hlogs(&self, which: &str, dir: &Path) -> Result<Vec<PathBuf>, LabError> {
        Ok(crate::export::hlogs(&self.load(which)?, dir)?)
    }

    /// Writes run `which`'s points as CSV to `out` (`-`: standard output);
    /// the rows written.
    pub fn export_csv(&self, which: &str, out: &Path) -> Result<usize, LabError> {
        let run = self.load(which)?;
        if out == Path::new("-") {
            return Ok(crate::export::csv(&run, std::io::stdout().lock())?);
        }
        let file = std::fs::File::create(out)
            .map_err(|e| LabError::io(format!("creating {}", out.display()), e))?;
        Ok(crate::export::csv(&run, std::io::BufWriter::new(file))?)
    }
}

/// What [`clean`] did, and in which journal.
#[derive(Debug)]
pub struct Cleaned {
    /// The journal file.
    pub journal: PathBuf,
    /// Removed, failed and kept entries.
    pub report: vnio_topo::CleanReport,
    /// What was cleaned on other machines, and what could not be.
    pub machines: crate::machine::journal::MachineCleanReport,
}

impl Cleaned {
    /// True when something could not be removed, here or on a machine.
    pub fn failed(&self) -> bool {
        !self.report.failed.is_empty() || !self.machines.failed.is_empty()
    }

    /// The kept entries grouped by owner (a run still going on), in
    /// journal order.
    pub fn kept_by_owner(&self) -> Vec<(Option<vnio_topo::Owner>, Vec<vnio_topo::Entry>)> {
        let mut groups: Vec<(Option<vnio_topo::Owner>, Vec<vnio_topo::Entry>)> = Vec::new();
        for (entry, owner) in &self.report.kept {
            match groups.iter_mut().find(|(o, _)| o == owner) {
                Some((_, entries)) => entries.push(entry.clone()),
                None => groups.push((owner.clone(), vec![entry.clone()])),
            }
        }
        groups
    }
}

/// Removes what runs whose process is gone (killed, crashed, a zombie,
/// exiting) left in the default journal: processes, namespaces, links,
/// scratch directories, and their parts on other machines. With `all`, also what live runs own (only safe
/// when no other lab run is going on).
pub fn clean(all: bool) -> Result<Cleaned, LabError> {
    let journal = vnio_topo::Journal::default();
    // Other machines first: cleaning them may use SSH connection sockets in
    // local scratch directories.
    let machines = crate::machine::MachineJournal::beside(&journal)
        .clean(all)
        .map_err(LabError::Machines)?;
    let report = if all {
        journal.clean()?
    } else {
        journal.clean_orphans()?
    };
    Ok(Cleaned {
        journal: journal.path().to_owned(),
        report,
        machines,
    })
}
