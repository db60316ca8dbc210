//! One error type for the vm part: the message says what failed, the
//! source chain says why.

use std::io;

/// What went wrong building, launching or driving a guest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input from the user (arguments, names, sizes).
    #[error("{0}")]
    Invalid(String),
    /// Something this host lacks (root, QEMU, an image, KVM, a package).
    #[error("{0}")]
    Missing(String),
    /// A system call or file operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// An external tool (apt-get, dpkg-deb, depmod, QEMU) failed.
    #[error("{what}: {detail}")]
    Tool {
        /// The step.
        what: String,
        /// Its exit status and the end of its error output.
        detail: String,
    },
    /// Creating or changing a host interface through netlink failed.
    #[error("{what}")]
    Net {
        /// The step.
        what: String,
        /// The netlink error.
        #[source]
        source: vnio_topo::Error,
    },
    /// The switch's control socket refused or failed.
    #[error("{what}")]
    Switch {
        /// The step.
        what: String,
        /// The control-socket error.
        #[source]
        source: vnio_switch::control::ClientError,
    },
    /// QEMU's monitor (QMP) answered with an error or not at all.
    #[error("QMP: {0}")]
    Qmp(String),
    /// The guest did not do what was expected in time.
    #[error("{0}")]
    Guest(String),
    /// SIGINT or SIGTERM arrived while launching; everything was undone.
    #[error("interrupted; the half-started guest was removed")]
    Interrupted,
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Attaches "what was being done" to an I/O error.
pub(crate) trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            what: what(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, vnio_topo::Error> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Net {
            what: what(),
            source,
        })
    }
}

impl<T> Context<T> for std::result::Result<T, vnio_switch::control::ClientError> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Switch {
            what: what(),
            source,
        })
    }
}

impl<T> Context<T> for nix::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Io {
            what: what(),
            source: io::Error::from(e),
        })
    }
}
