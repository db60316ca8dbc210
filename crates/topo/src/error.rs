//! The one error type of the lab's topology layer.

use std::io;

/// Everything that can go wrong while building or tearing down a topology.
///
/// The message is one line: what failed, then why, e.g.
/// `creating netns vnio-a-123: Operation not permitted (os error 1) (run as root)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call, a netlink request or a file operation failed.
    #[error("{what}: {cause}{hint}", hint = hint(cause))]
    Os {
        /// What we were doing, e.g. `creating netns vnio-a-123`.
        what: String,
        /// The operating system's reason (part of the message, so it is not
        /// also repeated as a `source()`).
        cause: io::Error,
    },
    /// A name was refused before anything was attempted.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// An object the operation needs does not exist.
    #[error("{what}: not found")]
    NotFound {
        /// What was looked for, e.g. `link vnio1a in netns vnio-a-1`.
        what: String,
    },
    /// A reply from the kernel could not be understood.
    #[error("{what}: malformed netlink reply: {detail}")]
    Protocol {
        /// The request that got the reply.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
}

/// The lab's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn os(what: impl Into<String>, source: io::Error) -> Self {
        Error::Os {
            what: what.into(),
            cause: source,
        }
    }

    /// The operating system error behind this one, if any.
    pub fn os_error(&self) -> Option<&io::Error> {
        match self {
            Error::Os { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// True when the failure is a missing privilege (EPERM or EACCES):
    /// the caller is not root or lacks CAP_NET_ADMIN / CAP_SYS_ADMIN.
    pub fn is_permission_denied(&self) -> bool {
        self.os_error()
            .is_some_and(|e| e.kind() == io::ErrorKind::PermissionDenied)
    }
}

fn hint(source: &io::Error) -> &'static str {
    if source.kind() == io::ErrorKind::PermissionDenied {
        " (run as root)"
    } else {
        ""
    }
}

/// Attach "what" to any fallible result whose error converts to `io::Error`.
pub(crate) trait Context<T> {
    fn what(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, io::Error> {
    fn what(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::os(what(), e))
    }
}

impl<T> Context<T> for std::result::Result<T, nix::Error> {
    fn what(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::os(what(), io::Error::from_raw_os_error(e as i32)))
    }
}
