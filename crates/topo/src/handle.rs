//! A netlink handle bound to one network namespace: the receiver of every
//! link, address, route and qdisc operation.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::netns::{self, Netns};
use crate::rtnl::Rtnl;

/// Which namespace a handle (or a link guard) works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// The namespace of this process's main thread (normally the host's).
    Root,
    /// A namespace under `/run/netns`.
    Named(String),
    /// A namespace by its file (e.g. a CNI runtime's `CNI_NETNS`, or
    /// /proc/PID/ns/net).
    File(std::path::PathBuf),
    /// The namespace of the thread that opened the handle.
    Here,
}

impl Place {
    pub(crate) fn open_fd(&self) -> io::Result<OwnedFd> {
        match self {
            Place::Root => File::open("/proc/self/ns/net").map(OwnedFd::from),
            Place::Named(name) => netns::open_named(name),
            Place::File(path) => File::open(path).map(OwnedFd::from),
            Place::Here => File::open("/proc/thread-self/ns/net").map(OwnedFd::from),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Root => f.write_str("root netns"),
            Place::Named(name) => write!(f, "netns {name}"),
            Place::File(path) => write!(f, "netns {}", path.display()),
            Place::Here => f.write_str("this thread's netns"),
        }
    }
}

/// Netlink (rtnetlink) operations in one network namespace.
///
/// Links created through a root-namespace handle are recorded in its
/// journal before they are created, so [`crate::clean`] can remove them
/// after a crash; links created inside a [`Netns`] die with it and are not
/// journaled.
pub struct Handle {
    pub(crate) rtnl: Rtnl,
    pub(crate) place: Place,
    pub(crate) journal: Option<Journal>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("place", &self.place)
            .finish()
    }
}

impl Handle {
    /// A handle in the process's own (root) namespace, journaling created
    /// links in the default journal.
    pub fn root() -> Result<Handle> {
        Handle::root_with_journal(&Journal::default())
    }

    /// A handle in the root namespace journaling in `journal`.
    pub fn root_with_journal(journal: &Journal) -> Result<Handle> {
        let mut handle = Handle::open(Place::Root)?;
        handle.journal = Some(journal.clone());
        Ok(handle)
    }

    /// A handle in the calling thread's namespace (which may not be the
    /// process's: see `Netns::run`), for looking, not journaling.
    pub fn here() -> Result<Handle> {
        let place = Place::Here;
        let rtnl = Rtnl::open(None)
            .map_err(|e| Error::os(format!("opening netlink socket in {place}"), e))?;
        Ok(Handle {
            rtnl,
            place,
            journal: None,
        })
    }

    /// A handle inside `netns`.
    pub fn in_netns(netns: &Netns) -> Result<Handle> {
        let place = Place::Named(netns.name().to_owned());
        let rtnl = Rtnl::open(Some(netns.fd()))
            .map_err(|e| Error::os(format!("opening netlink socket in {place}"), e))?;
        Ok(Handle {
            rtnl,
            place,
            journal: None,
        })
    }

    /// A handle inside the namespace whose file is `path` (a namespace
    /// this process does not own, e.g. a container runtime's).
    pub fn in_netns_file(path: &std::path::Path) -> Result<Handle> {
        Handle::open(Place::File(path.to_owned()))
    }

    pub(crate) fn open(place: Place) -> Result<Handle> {
        let what = || format!("opening netlink socket in {place}");
        let fd = place.open_fd().map_err(|e| Error::os(what(), e))?;
        let rtnl = Rtnl::open(Some(fd.as_fd())).map_err(|e| Error::os(what(), e))?;
        Ok(Handle {
            rtnl,
            place,
            journal: None,
        })
    }

    /// "root netns" or "netns NAME", for messages.
    pub fn place(&self) -> String {
        self.place.to_string()
    }
}
