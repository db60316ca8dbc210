//! The journal of `vnio tune apply`: every change is written here, with the
//! value it replaces, before it is made; `vnio tune revert` reads it back.
//! The file is replaced atomically (write, fsync, rename) at each step, so a
//! crash leaves either the previous or the next state, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::Audit;
use crate::error::{Result, TuneError};
use crate::knob::Profile;

/// Schema id of journal files.
pub const JOURNAL_SCHEMA: &str = "vnio.tune.journal/1";

/// Environment variable that overrides the journal path.
pub const JOURNAL_ENV: &str = "VNIO_TUNE_JOURNAL";

/// Where a change stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum EntryState {
    /// Journaled, about to be written (a crash here may or may not have
    /// written it: revert restores it either way).
    Pending,
    /// Written; `read_back` is what the file said afterwards.
    Applied {
        /// Trimmed content after the write.
        read_back: String,
    },
    /// The write failed; the file should be unchanged.
    Failed {
        /// The error with its causes.
        error: String,
    },
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Knob id.
    pub knob: String,
    /// Logical path of the file.
    pub path: String,
    /// Exact content before the change (what revert must read again).
    pub before: String,
    /// What was written.
    pub to: String,
    /// What revert writes to get `before` back.
    pub restore: String,
    /// Where it stands.
    #[serde(flatten)]
    pub state: EntryState,
}

/// A journal file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// [`JOURNAL_SCHEMA`].
    pub schema: String,
    /// Profile applied.
    pub profile: Profile,
    /// Root directory the changes were made under.
    pub root: String,
    /// Seconds since the epoch at apply.
    pub created_unix: u64,
    /// The audit before any change: revert must get back to it.
    pub baseline: Audit,
    /// Knobs left out of apply (and of revert's re-audit).
    #[serde(default)]
    pub skipped: Vec<String>,
    /// Changes in the order made.
    pub entries: Vec<Entry>,
}

/// The journal path: `$VNIO_TUNE_JOURNAL`, else
/// `/var/lib/vnio/tune-journal.json`.
pub fn default_path() -> PathBuf {
    match std::env::var_os(JOURNAL_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/var/lib/vnio/tune-journal.json"),
    }
}

/// Where a reverted journal is kept.
pub fn reverted_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".reverted");
    PathBuf::from(s)
}

impl Journal {
    /// Reads a journal.
    pub fn load(path: &Path) -> Result<Journal> {
        let err = |what, source| TuneError::Journal {
            path: path.to_path_buf(),
            what,
            source,
        };
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TuneError::NoJournal(path.to_path_buf()))
            }
            Err(e) => return Err(err("cannot read", e)),
        };
        serde_json::from_str(&text).map_err(|e| {
            err(
                "cannot parse",
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })
    }

    /// Writes the journal atomically and durably.
    pub fn save(&self, path: &Path) -> Result<()> {
        let err = |what, source| TuneError::Journal {
            path: path.to_path_buf(),
            what,
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err("cannot create its directory", e))?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| {
            err(
                "cannot encode",
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp).map_err(|e| err("cannot create", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| err("cannot write", e))?;
        f.sync_all().map_err(|e| err("cannot sync", e))?;
        std::fs::rename(&tmp, path).map_err(|e| err("cannot rename into place", e))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(dir) {
                // Best effort: the rename is durable once the directory is.
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}
