//! `apply` makes a profile's runtime changes, journaling each before it is
//! made; `revert` restores every journaled file to its exact former content,
//! then audits again and reports anything that is not as it was.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::audit::{audit_skipping, diff, Audit, Finding, Status};
use crate::error::{Result, TuneError};
use crate::host::Host;
use crate::journal::{reverted_path, Entry, EntryState, Journal, JOURNAL_SCHEMA};
use crate::knob::{ApplyKind, Change, Profile};

/// A knob that differs from the profile but that `apply` does not change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotApplied {
    /// Knob id.
    pub knob: String,
    /// Why not (reboot, manual, process, read-only).
    pub kind: ApplyKind,
    /// How to change it.
    pub how: String,
}

/// What `apply` did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    /// Profile.
    pub profile: Profile,
    /// Nothing was written.
    pub dry_run: bool,
    /// The journal written (none when dry or nothing to do).
    pub journal: Option<PathBuf>,
    /// Changes planned (dry run) or made, in order.
    pub entries: Vec<Entry>,
    /// Differing knobs left to the operator.
    pub not_applied: Vec<NotApplied>,
}

impl ApplyReport {
    /// Number of failed writes.
    pub fn failures(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.state, EntryState::Failed { .. }))
            .count()
    }
}

fn not_applied(findings: &[Finding]) -> Vec<NotApplied> {
    findings
        .iter()
        .filter(|f| {
            f.status == Status::Differs
                && (f.apply.kind != ApplyKind::Runtime || f.changes.is_empty())
        })
        .map(|f| NotApplied {
            knob: f.id.clone(),
            kind: f.apply.kind,
            how: f.apply.how.clone(),
        })
        .collect()
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Applies the runtime changes of `profile`. Refuses if a journal is
/// already at `journal_path` (its originals would be lost).
pub fn apply(
    host: &Host,
    profile: Profile,
    journal_path: &Path,
    dry_run: bool,
) -> Result<ApplyReport> {
    apply_skipping(host, profile, journal_path, dry_run, &[])
}

/// [`apply`], leaving the knobs whose ids are in `skip` untouched (and
/// unread); revert re-audits with the same selection.
pub fn apply_skipping(
    host: &Host,
    profile: Profile,
    journal_path: &Path,
    dry_run: bool,
    skip: &[String],
) -> Result<ApplyReport> {
    let baseline = audit_skipping(host, profile, skip);
    let planned: Vec<(String, Change)> = baseline.planned_changes();
    let mut report = ApplyReport {
        profile,
        dry_run,
        journal: None,
        entries: Vec::new(),
        not_applied: not_applied(&baseline.findings),
    };
    let mut entries = Vec::new();
    for (knob, c) in planned {
        let before = host.read_raw(&c.path).map_err(|u| TuneError::Read {
            path: c.path.clone(),
            source: std::io::Error::other(u.to_string()),
        })?;
        // Where the knob reads back as it is written (not a `[choice]`
        // file), restore the exact bytes that were there.
        let restore = if before.trim() == c.restore {
            before.clone()
        } else {
            c.restore
        };
        entries.push(Entry {
            knob,
            path: c.path,
            before,
            to: c.to,
            restore,
            state: EntryState::Pending,
        });
    }
    if !dry_run && !entries.is_empty() && host.is_live() && host.probe().euid() != 0 {
        return Err(TuneError::NeedsRoot(host.probe().euid()));
    }
    if !dry_run && journal_path.exists() {
        return Err(TuneError::JournalExists(journal_path.to_path_buf()));
    }
    if dry_run || entries.is_empty() {
        report.entries = entries;
        return Ok(report);
    }
    let mut journal = Journal {
        schema: JOURNAL_SCHEMA.to_string(),
        profile,
        root: host.root().display().to_string(),
        created_unix: now_unix(),
        baseline,
        skipped: skip.to_vec(),
        entries: Vec::new(),
    };
    for entry in entries {
        journal.entries.push(entry);
        journal.save(journal_path)?;
        let i = journal.entries.len() - 1;
        let e = &journal.entries[i];
        let state = match host.write(&e.path, &e.to) {
            Ok(()) => EntryState::Applied {
                read_back: host
                    .read(&e.path)
                    .unwrap_or_else(|u| format!("unreadable: {u}")),
            },
            Err(err) => EntryState::Failed {
                error: error_chain(&err),
            },
        };
        journal.entries[i].state = state;
        journal.save(journal_path)?;
    }
    report.journal = Some(journal_path.to_path_buf());
    report.entries = journal.entries;
    Ok(report)
}

/// An error and its causes on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// What happened to one journaled change on revert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RevertAction {
    /// Written back and read back equal to the original.
    Restored,
    /// Already equal to the original (never changed, or a failed write).
    Unchanged,
    /// Could not be brought back; the error or what was read.
    Failed(String),
}

/// What `revert` did and what is left changed.
#[derive(Debug, Clone, Serialize)]
pub struct RevertReport {
    /// The journal read.
    pub journal: PathBuf,
    /// Each entry, in the order reverted (reverse of apply).
    pub entries: Vec<(Entry, RevertAction)>,
    /// The audit after revert.
    pub after: Audit,
    /// Knobs whose audit differs from the baseline, plus failed restores:
    /// empty when the machine is back as it was.
    pub remaining: Vec<String>,
    /// Where the journal was moved once everything was restored.
    pub archived: Option<PathBuf>,
}

impl RevertReport {
    /// Nothing left changed.
    pub fn clean(&self) -> bool {
        self.remaining.is_empty()
    }
}

/// Whether a file reads as it did (ignoring surrounding whitespace, which
/// the kernel adds or strips).
fn same(now: &str, before: &str) -> bool {
    now == before || now.trim() == before.trim()
}

/// Restores every file of the journal, audits again and compares with the
/// baseline; the journal is kept (for another try) unless all is back.
pub fn revert(host: &Host, journal_path: &Path) -> Result<RevertReport> {
    let journal = Journal::load(journal_path)?;
    let root = host.root().display().to_string();
    if journal.root != root {
        return Err(TuneError::JournalRoot {
            path: journal_path.to_path_buf(),
            journal_root: journal.root,
            root,
        });
    }
    let mut entries = Vec::new();
    let mut remaining = Vec::new();
    for e in journal.entries.iter().rev() {
        let action = match host.read_raw(&e.path) {
            Ok(now) if same(&now, &e.before) => RevertAction::Unchanged,
            _ => match host.write(&e.path, &e.restore) {
                Err(err) => RevertAction::Failed(error_chain(&err)),
                Ok(()) => match host.read_raw(&e.path) {
                    Ok(now) if same(&now, &e.before) => RevertAction::Restored,
                    Ok(now) => RevertAction::Failed(format!(
                        "reads {:?}, expected {:?}",
                        now.trim(),
                        e.before.trim()
                    )),
                    Err(u) => RevertAction::Failed(format!("unreadable after restore: {u}")),
                },
            },
        };
        if let RevertAction::Failed(why) = &action {
            remaining.push(format!("{} {}: {}", e.knob, e.path, why));
        }
        entries.push((e.clone(), action));
    }
    let after = audit_skipping(host, journal.profile, &journal.skipped);
    remaining.extend(diff(&journal.baseline, &after));
    let mut report = RevertReport {
        journal: journal_path.to_path_buf(),
        entries,
        after,
        remaining,
        archived: None,
    };
    if report.clean() {
        let to = reverted_path(journal_path);
        std::fs::rename(journal_path, &to).map_err(|source| TuneError::Journal {
            path: journal_path.to_path_buf(),
            what: "cannot archive after revert",
            source,
        })?;
        report.archived = Some(to);
    }
    Ok(report)
}
