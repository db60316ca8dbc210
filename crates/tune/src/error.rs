//! The one error type of `vnio-tune`: the message says what failed, the
//! source chain says why.

use std::path::PathBuf;

/// What can fail in `vnio-tune` (a knob that cannot be read is a finding,
/// not an error: only operations that cannot go on are errors).
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Writing a knob failed.
    #[error("cannot write {value:?} to {path}")]
    Write {
        /// Logical path (as on the host, without the root override).
        path: String,
        /// The value that was being written.
        value: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading a knob that had to be read (for a change) failed.
    #[error("cannot read {path}")]
    Read {
        /// Logical path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The journal file could not be read, written or parsed.
    #[error("journal {path}: {what}")]
    Journal {
        /// Journal file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A journal is already there: its changes must be reverted before
    /// another apply, or the original values would be lost.
    #[error("a journal already exists at {0}: run `vnio tune revert` first (or move it away if it is not a vnio tune journal)")]
    JournalExists(PathBuf),
    /// Changing the live machine needs root.
    #[error("apply changes kernel settings and needs root (effective uid {0}); try --dry-run")]
    NeedsRoot(u32),
    /// The journal was made under another root directory.
    #[error("journal {path} was made under root {journal_root}, not {root}")]
    JournalRoot {
        /// Journal file.
        path: PathBuf,
        /// Root recorded in the journal.
        journal_root: String,
        /// Root asked for.
        root: String,
    },
    /// Nothing to revert.
    #[error("no journal at {0}: nothing to revert")]
    NoJournal(PathBuf),
    /// A probe of `vnio tune measure` failed.
    #[error("probe {probe} failed")]
    Probe {
        /// Probe name.
        probe: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Holding a PM QoS request failed.
    #[error("cannot hold a PM QoS CPU latency request through {path}")]
    PmQos {
        /// The device path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result with [`TuneError`].
pub type Result<T> = std::result::Result<T, TuneError>;
