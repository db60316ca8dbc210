//! The one error type of the lab's API: what failed, the cause chain
//! behind it, one line each.

use std::path::PathBuf;

use crate::scenario::ScenarioError;
use crate::store::StoreError;

/// Why a lab command failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A scenario or set does not load.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The results store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The crash journal failed.
    #[error(transparent)]
    Journal(#[from] vnio_topo::Error),
    /// A scenario cannot be planned or run in this build, or a set names
    /// something that is not a scenario.
    #[error("{0}")]
    Plan(String),
    /// The lab's machines (hosts on other machines) could not be cleaned.
    #[error("{0}")]
    Machines(String),
    /// Reading a store that does not exist.
    #[error("no results store at {} (run `vnio lab run quick` first, or give --db)", .0.display())]
    NoStore(PathBuf),
    /// Running needs root.
    #[error("vnio lab run builds network namespaces and needs root: run it as root (sudo)")]
    NotRoot,
    /// The guests of VM hosts could not be prepared.
    #[error("VM hosts: {0}")]
    Guests(String),
    /// A file could not be written or read.
    #[error("{what}")]
    Io {
        /// What was being done, e.g. "writing the report x.html".
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A stored run cannot be exported.
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
}

impl LabError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> LabError {
        LabError::Io {
            what: what.into(),
            source,
        }
    }
}
