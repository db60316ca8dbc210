//! Where a control-socket client may put a port's socket, and what the
//! switch may remove there. A port's socket path is where the switch binds
//! as itself (often root): unchecked, `port_add` would let a client
//! replace any file, or listen anywhere.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Why a port's socket path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Not absolute.
    #[error("socket path {0} is not absolute")]
    Relative(PathBuf),
    /// Not a file name under a directory.
    #[error("socket path {0} does not name a file")]
    NoName(PathBuf),
    /// Its directory cannot be resolved.
    #[error("socket path {0}")]
    Parent(PathBuf, #[source] io::Error),
    /// The allowed directory cannot be resolved.
    #[error("socket directory {0}")]
    Dir(PathBuf, #[source] io::Error),
    /// Resolved, it is outside the allowed directory.
    #[error("socket path {0} is outside the socket directory {1}")]
    Outside(PathBuf, PathBuf),
}

/// `path` resolved (no `.`, `..` or symlinks in its directories), when it
/// is inside `dir` (itself resolved); the file name is kept as given (what
/// is at it, if anything, is for [`remove_stale`] to judge).
pub fn confine(dir: &Path, path: &Path) -> Result<PathBuf, PathError> {
    if !path.is_absolute() {
        return Err(PathError::Relative(path.to_owned()));
    }
    // A path ending in `..` has no file name.
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(PathError::NoName(path.to_owned()));
    };
    let parent = parent
        .canonicalize()
        .map_err(|e| PathError::Parent(path.to_owned(), e))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| PathError::Dir(dir.to_owned(), e))?;
    let resolved = parent.join(name);
    if !parent.starts_with(&dir) {
        return Err(PathError::Outside(path.to_owned(), dir));
    }
    Ok(resolved)
}

/// Removes a stale socket at `path` before binding there; anything else
/// (a file, a directory, a symlink) is left in place and refused.
pub fn remove_stale(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_socket() => match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "something that is not a socket is there (left in place)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_or_are_refused() {
        let base = std::env::temp_dir().join(format!("vnio-sockpath-{}", std::process::id()));
        let dir = base.join("socks");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let _ = std::os::unix::fs::symlink("/", dir.join("root"));
        let ok = |p: &str| confine(&dir, &dir.join(p));
        assert_eq!(
            ok("a.sock").unwrap(),
            dir.canonicalize().unwrap().join("a.sock")
        );
        assert!(ok("sub/./b.sock").is_ok());
        assert!(ok("sub/../c.sock").is_ok());
        for bad in [
            "../x.sock",
            "sub/../../x.sock",
            "root/x.sock",
            "root/tmp/x.sock",
        ] {
            assert!(matches!(ok(bad), Err(PathError::Outside(..))), "{bad}");
        }
        assert!(matches!(ok(".."), Err(PathError::NoName(_))));
        assert!(matches!(
            confine(&dir, Path::new("x.sock")),
            Err(PathError::Relative(_))
        ));
        assert!(matches!(ok("missing/x.sock"), Err(PathError::Parent(..))));
        let _ = std::fs::remove_dir_all(&base);
    }
}
