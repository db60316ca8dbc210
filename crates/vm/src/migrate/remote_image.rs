//! The guest's image on the destination host of `--to HOST`, when HOST
//! does not share this host's paths: with `--remote-cache DIR` the image
//! directory the source QEMU boots from (`CACHE/images/KEY/`, as `vnio vm
//! image build` lays it out: `vmlinuz`, `initrd.img`, `manifest.json`) is
//! copied with `scp` into `DIR/images/KEY/` on HOST unless it is there
//! already, and the destination's command line names the copies. The
//! copy is a cache entry, kept for the next migration (not removed on
//! failure: it is not the run's).

use std::path::{Path, PathBuf};

use vnio_topo::ssh::{quote, Ssh};

use super::incoming::needed_files;
use crate::error::{Error, Result};

/// The manifest beside an image's kernel and initrd.
const MANIFEST: &str = "manifest.json";

/// The image directory of `argv` (the one directory holding every file
/// the command line needs, kernel and initrd), or why there is none.
pub fn image_dir(argv: &[String]) -> std::result::Result<PathBuf, String> {
    let files = needed_files(argv);
    let mut dirs = files.iter().filter_map(|(_, f)| f.parent());
    let dir = dirs
        .next()
        .ok_or("the command line names no kernel or initrd")?;
    if files.iter().any(|(_, f)| f.parent() != Some(dir)) {
        return Err(format!(
            "the guest's files are not all in one image directory ({}): --remote-cache copies an image directory only",
            files
                .iter()
                .map(|(_, f)| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(dir.to_path_buf())
}

/// `argv` with every file under `from` named under `to` instead.
pub fn rebased(argv: &[String], from: &Path, to: &Path) -> Vec<String> {
    argv.iter()
        .map(|a| match Path::new(a).strip_prefix(from) {
            Ok(rest) if a.starts_with('/') && !rest.as_os_str().is_empty() => {
                to.join(rest).display().to_string()
            }
            _ => a.clone(),
        })
        .collect()
}

/// What was done with the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    /// The image directory on HOST.
    pub dir: PathBuf,
    /// The files copied (empty: HOST had them).
    pub copied: Vec<String>,
}

/// Makes sure HOST has the image of `argv` under `cache` (copying what is
/// missing) and returns `argv` rebased onto it.
pub fn carry(ssh: &Ssh, argv: &[String], cache: &Path) -> Result<(Vec<String>, Carried)> {
    let here = image_dir(argv).map_err(Error::Invalid)?;
    let key = here
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not an image directory", here.display())))?;
    let there = cache.join("images").join(key);
    let mut names: Vec<String> = needed_files(argv)
        .iter()
        .filter_map(|(_, f)| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if here.join(MANIFEST).exists() {
        names.push(MANIFEST.into());
    }
    let d = quote(&there.display().to_string());
    let check = names
        .iter()
        .map(|n| format!("test -e {d}/{q} || echo {q}", q = quote(n)))
        .collect::<Vec<_>>()
        .join("; ");
    let missing = ssh
        .run(
            &format!("mkdir -p {d} && {{ {check}; }}"),
            "looking for the image",
        )
        .map_err(Error::Guest)?;
    let mut copied = Vec::new();
    for name in missing.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let to = there.join(name).display().to_string();
        ssh.install(&here.join(name), &to, "installing the image")
            .map_err(Error::Guest)?;
        copied.push(name.to_string());
    }
    Ok((rebased(argv, &here, &there), Carried { dir: there, copied }))
}
