//! Who may connect to a server-mode vhost-user socket: its owner, group and
//! mode, given right after the switch binds it (a port's `socket_access`).
//! A VMM that runs as another user (QEMU as `libvirt-qemu`, KubeVirt's
//! non-root launcher) needs write permission on the socket to connect.
//!
//! Until they are given the socket has the switch's user and umask, which
//! lets no other user connect: no instant is more open than asked. The
//! same holds after a restart, when the port is restored and bound again.

use crate::sys::peer;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A user or a group: its number, or its name looked up on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Principal {
    /// A uid or gid.
    Id(u32),
    /// A name (a string of digits is a number).
    Name(String),
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Id(n) => write!(f, "{n}"),
            Principal::Name(s) => f.write_str(s),
        }
    }
}

/// The socket's owner, group and mode, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketAccess {
    /// The owning user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Principal>,
    /// The owning group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Principal>,
    /// The permission bits, in octal ("0660"): a string, since JSON has no
    /// octal numbers and a decimal 660 would mean something else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// [`SocketAccess`] with names turned into ids and the mode parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The uid to give, if any.
    pub uid: Option<u32>,
    /// The gid to give, if any.
    pub gid: Option<u32>,
    /// The permission bits to give, if any.
    pub mode: Option<u32>,
}

impl SocketAccess {
    /// Looks the names up and parses the mode; the error is one line
    /// naming the value (`owner`, `group`, `mode`).
    pub fn resolve(&self) -> Result<Resolved, String> {
        let uid = match &self.owner {
            None => None,
            Some(p) => Some(lookup(p, peer::user_id).map_err(|e| format!("owner {e}"))?),
        };
        let gid = match &self.group {
            None => None,
            Some(p) => Some(lookup(p, peer::group_id).map_err(|e| format!("group {e}"))?),
        };
        let mode = match &self.mode {
            None => None,
            Some(m) => Some(parse_mode(m).ok_or_else(|| {
                format!("mode {m:?}: not an octal permission mode up to 0777 (e.g. \"0660\")")
            })?),
        };
        Ok(Resolved { uid, gid, mode })
    }

    /// The same with the names replaced by the ids they have here, so that
    /// another reader (a switch in a container with its own user database)
    /// gives the same ids.
    pub fn numeric(&self) -> Result<SocketAccess, String> {
        let r = self.resolve()?;
        Ok(SocketAccess {
            owner: r.uid.map(Principal::Id),
            group: r.gid.map(Principal::Id),
            mode: r.mode.map(|m| format!("{m:04o}")),
        })
    }
}

fn lookup(p: &Principal, by_name: fn(&str) -> std::io::Result<Option<u32>>) -> Result<u32, String> {
    match p {
        Principal::Id(n) => Ok(*n),
        Principal::Name(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().map_err(|_| format!("{s}: out of range"))
        }
        Principal::Name(s) => match by_name(s) {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(format!("{s}: no such name on this machine")),
            Err(e) => Err(format!("{s}: {e}")),
        },
    }
}

/// "0660", "660" or "0o660"; at most 0777 (no set-id or sticky bits).
pub fn parse_mode(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    if digits.is_empty() || digits.len() > 4 {
        return None;
    }
    u32::from_str_radix(digits, 8).ok().filter(|m| *m <= 0o777)
}

impl Resolved {
    /// Whether there is anything to give.
    pub fn is_empty(&self) -> bool {
        self.uid.is_none() && self.gid.is_none() && self.mode.is_none()
    }

    /// Gives `path` its owner and group (not following a symbolic link),
    /// then its mode.
    pub fn apply(&self, path: &Path) -> std::io::Result<()> {
        if self.uid.is_some() || self.gid.is_some() {
            std::os::unix::fs::lchown(path, self.uid, self.gid)?;
        }
        if let Some(m) = self.mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(m))?;
        }
        Ok(())
    }

    /// The mode of a directory holding the socket: each class that may
    /// read or write the socket may enter the directory, and with
    /// `writable` (a front-end that creates the socket itself) create in
    /// it. Without a mode, 0755.
    pub fn dir_mode(&self, writable: bool) -> u32 {
        let Some(m) = self.mode else {
            return 0o755;
        };
        let class = if writable { 0o7 } else { 0o5 };
        (0..3).fold(0, |acc, i| {
            let shift = i * 3;
            if (m >> shift) & 0o6 != 0 {
                acc | (class << shift)
            } else {
                acc
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_in_octal_and_bad_values_are_named() {
        assert_eq!(parse_mode("0660"), Some(0o660));
        assert_eq!(parse_mode("600"), Some(0o600));
        assert_eq!(parse_mode("0o770"), Some(0o770));
        assert_eq!(parse_mode("0999"), None);
        assert_eq!(parse_mode("4755"), None);
        assert_eq!(parse_mode(""), None);
        let a = SocketAccess {
            owner: Some(Principal::Name("root".into())),
            group: Some(Principal::Name("0".into())),
            mode: Some("0660".into()),
        };
        let r = a.resolve().unwrap();
        assert_eq!((r.uid, r.gid, r.mode), (Some(0), Some(0), Some(0o660)));
        assert_eq!(r.dir_mode(false), 0o550);
        assert_eq!(r.dir_mode(true), 0o770);
        assert_eq!(Resolved::default().dir_mode(true), 0o755);
        let bad = SocketAccess {
            owner: Some(Principal::Name("no-such-user-vnio".into())),
            ..Default::default()
        };
        assert_eq!(
            bad.resolve().unwrap_err(),
            "owner no-such-user-vnio: no such name on this machine"
        );
        let bad = SocketAccess {
            mode: Some("rw".into()),
            ..Default::default()
        };
        assert!(bad.resolve().unwrap_err().starts_with("mode \"rw\""));
        let n = a.numeric().unwrap();
        assert_eq!(n.owner, Some(Principal::Id(0)));
        assert_eq!(n.mode.as_deref(), Some("0660"));
    }
}
