//! The copy of `vnio` that runs the destination's side of `--to HOST`
//! (`vnio vm incoming`, as root there): where it lives, when an existing
//! copy may be reused, and how it is checked before it runs.
//!
//! A copy lives in a directory that only its owner can write ([`BIN_DIR`]
//! by default, made mode 0700), named by the SHA-256 of this `vnio`. The
//! directory is refused when it exists with another owner, with group or
//! others allowed in, or as a symbolic link; each directory above it must
//! belong to root or that owner and not be writable by others unless it is
//! sticky (as `/tmp` is), so no one else can swap the directory itself.
//! A copy in it is reused only if it is a regular file of that owner that
//! hashes (`sha256sum` there) to this `vnio`'s SHA-256; any other file of
//! that name is replaced. The command that starts the copy hashes it once
//! more and runs it only if it still matches.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};
use vnio_topo::ssh::quote;

use crate::error::{Context, Result};

/// Where copies of `vnio` go on a host by default (root's, mode 0700).
pub const BIN_DIR: &str = "/var/lib/vnio/bin";

/// The SHA-256 of the file at `path`, in lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).ctx(|| format!("reading {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .ctx(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The copy's path in `dir` for a `vnio` hashing to `hash`.
pub fn copy_path(dir: &str, hash: &str) -> String {
    format!("{}/vnio-{}", dir.trim_end_matches('/'), &hash[..16])
}

/// The shell script that makes `dir` if missing (mode 0700) and reports,
/// one line each: the login's uid, then `UID MODE KIND` of `dir` and of
/// every directory above it up to `/` (physical paths: symbolic links
/// resolved by `cd -P`), then for the copy `file` either `none` or
/// `UID MODE KIND` followed by its SHA-256.
pub fn survey_script(dir: &str, file: &str) -> String {
    let d = quote(dir);
    let f = quote(file);
    format!(
        "umask 077; id -u; mkdir -p -m 0700 {d} 2>/dev/null; \
         if [ -L {d} ]; then echo \"$(stat -c '%u %a' {d}) symbolic link\"; exit 0; fi; \
         p=$(cd -P {d} 2>/dev/null && pwd) || {{ echo missing; exit 0; }}; \
         while :; do stat -c '%u %a %F' \"$p\"; [ \"$p\" = / ] && break; p=$(dirname \"$p\"); done; \
         if [ -e {f} ] || [ -L {f} ]; then stat -c '%u %a %F' {f}; sha256sum < {f} | cut -c1-64; else echo none; fi"
    )
}

/// One `UID MODE KIND` line of the survey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Owner.
    pub uid: u32,
    /// Permission bits, with setuid/setgid/sticky (`stat %a`).
    pub mode: u32,
    /// `stat %F`: `directory`, `regular file`, `symbolic link`...
    pub kind: String,
}

impl Stat {
    fn parse(line: &str) -> Option<Stat> {
        let mut w = line.trim().splitn(3, ' ');
        let uid = w.next()?.parse().ok()?;
        let mode = u32::from_str_radix(w.next()?, 8).ok()?;
        let kind = w.next()?.to_string();
        Some(Stat { uid, mode, kind })
    }
}

/// What the survey found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    /// The login's uid there.
    pub uid: u32,
    /// The directory, then each one above it up to `/`.
    pub chain: Vec<Stat>,
    /// The copy, and its SHA-256, if a file of that name exists.
    pub file: Option<(Stat, String)>,
}

/// Reads the survey script's output.
pub fn parse_survey(out: &str) -> std::result::Result<Survey, String> {
    let bad = || format!("unexpected answer to the survey of the helper's directory: {out:?}");
    let mut lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() < 2 {
        return Err(bad());
    }
    let uid = lines.remove(0).parse().map_err(|_| bad())?;
    if lines[0] == "missing" {
        return Ok(Survey {
            uid,
            chain: Vec::new(),
            file: None,
        });
    }
    let file = match lines.last() {
        Some(&"none") => {
            lines.pop();
            None
        }
        Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            let hash = lines.pop().unwrap_or_default().to_string();
            let st = lines.pop().and_then(Stat::parse).ok_or_else(bad)?;
            Some((st, hash))
        }
        // The directory was a symbolic link: nothing after it.
        _ => None,
    };
    let chain = lines
        .iter()
        .map(|l| Stat::parse(l))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    Ok(Survey { uid, chain, file })
}

/// What to do with the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The copy there is this `vnio`: run it.
    Reuse,
    /// Copy this `vnio` there (replacing whatever has the name).
    Install,
}

/// Decides from `s` whether the directory `dir` can hold the copy, and
/// whether the copy there is this `vnio` (SHA-256 `hash`); an error says
/// what is wrong and how to fix it, in one line.
pub fn judge(dir: &str, s: &Survey, hash: &str) -> std::result::Result<Verdict, String> {
    let uid = s.uid;
    let fix = format!(
        "vnio's copy must live in a directory of uid {uid} that no one else can enter \
         (fix: remove it, or chown {uid} and chmod 0700 it; or pass --remote-bin-dir DIR)"
    );
    let Some(top) = s.chain.first() else {
        return Err(format!("cannot create {dir}: {fix}"));
    };
    if top.kind != "directory" {
        return Err(format!("{dir} is a {}: {fix}", top.kind));
    }
    if top.uid != uid || top.mode & 0o077 != 0 {
        return Err(format!(
            "{dir} is owned by uid {} with mode {:04o}: {fix}",
            top.uid, top.mode
        ));
    }
    for (i, a) in s.chain.iter().enumerate().skip(1) {
        let sticky = a.mode & 0o1000 != 0;
        if a.kind != "directory" || (a.uid != 0 && a.uid != uid) || (a.mode & 0o022 != 0 && !sticky)
        {
            return Err(format!(
                "the directory {i} level(s) above {dir} is owned by uid {} with mode {:04o}, so others could replace {dir}: {fix}",
                a.uid, a.mode
            ));
        }
    }
    Ok(match &s.file {
        Some((f, h))
            if f.kind == "regular file"
                && f.uid == uid
                && f.mode & 0o022 == 0
                && f.mode & 0o100 != 0
                && h.eq_ignore_ascii_case(hash) =>
        {
            Verdict::Reuse
        }
        _ => Verdict::Install,
    })
}

/// The shell words that run the copy `file` with `args` only if it still
/// hashes to `hash` (checked just before `exec`, in the same shell).
pub fn verified_exec(file: &str, hash: &str, args: &str) -> String {
    let f = quote(file);
    format!(
        "h=$(sha256sum < {f} | cut -c1-64) && [ \"$h\" = {hash} ] || \
         {{ echo \"vnio: error: {} does not hash to this vnio's SHA-256 (got $h): not run\" >&2; exit 1; }}; \
         exec {f} {args}",
        file.replace(['"', '\\', '$', '`'], "_")
    )
}

#[cfg(test)]
mod tests;
