//! Who may use the control socket: root, the switch's own user, and the
//! members of a configured group. The socket file's mode says so to the
//! file system (0600, or 0660 owned by the group); every connection's
//! kernel-recorded credentials say so again, so a loosened mode or a
//! connection made in the instant between bind and chmod still gets nothing.

use crate::sys::peer::{self, PeerCred};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Why the access rule could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// `control_group` names no group.
    #[error("control_group {0}: no such group")]
    NoGroup(String),
    /// The group database could not be read.
    #[error("control_group {0}")]
    Lookup(String, #[source] std::io::Error),
    /// The socket's mode or group could not be set.
    #[error("cannot restrict {0}")]
    Restrict(std::path::PathBuf, #[source] std::io::Error),
}

/// A refused connection.
#[derive(Debug, thiserror::Error)]
#[error("uid {} (gid {}, pid {}) is not allowed on this control socket: only root, uid {owner}{}", .peer.uid, .peer.gid, .peer.pid, .group.map(|g| format!(" and group {g}")).unwrap_or_default())]
pub struct Refused {
    /// Who asked.
    pub peer: PeerCred,
    /// The switch's uid.
    pub owner: u32,
    /// The admitted group.
    pub group: Option<u32>,
}

/// The rule.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    owner: u32,
    group: Option<u32>,
}

impl Access {
    /// Root and this process's user, and `group` (a name or a number) when given.
    pub fn new(group: Option<&str>) -> Result<Self, AccessError> {
        let group = match group {
            None => None,
            Some(g) => Some(match g.parse::<u32>() {
                Ok(id) => id,
                Err(_) => peer::group_id(g)
                    .map_err(|e| AccessError::Lookup(g.into(), e))?
                    .ok_or_else(|| AccessError::NoGroup(g.into()))?,
            }),
        };
        Ok(Self {
            owner: peer::euid(),
            group,
        })
    }

    /// Gives the socket at `path` its mode, and its group when there is one.
    pub fn restrict(&self, path: &Path) -> Result<(), AccessError> {
        let e = |x| AccessError::Restrict(path.to_owned(), x);
        let mode = if self.group.is_some() { 0o660 } else { 0o600 };
        std::os::unix::fs::chown(path, None, self.group).map_err(e)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(e)
    }

    /// Whether the process connected on `sock` may use the control socket.
    pub fn check(&self, sock: &impl std::os::fd::AsRawFd) -> Result<(), Refused> {
        let peer = peer::peer_cred(sock).unwrap_or(PeerCred {
            // Unknown credentials are nobody's: refused below.
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
            groups: vec![],
        });
        let member = self
            .group
            .is_some_and(|g| peer.gid == g || peer.groups.contains(&g));
        if peer.uid == 0 || peer.uid == self.owner || member {
            return Ok(());
        }
        Err(Refused {
            peer,
            owner: self.owner,
            group: self.group,
        })
    }
}
