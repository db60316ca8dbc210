//! The helper's directory and copy, surveyed by the real script in a real
//! shell (here, as the remote shell would run it): planted directories
//! and binaries are refused or replaced, never run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// A private scratch directory (mkdtemp), removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        Scratch(vnio_topo::ssh::control_dir("vnio-helper-test-").unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sh(script: &str) -> (bool, String, String) {
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn survey(dir: &Path, hash: &str) -> Survey {
    let d = dir.display().to_string();
    let (ok, out, err) = sh(&survey_script(&d, &copy_path(&d, hash)));
    assert!(ok, "{err}");
    parse_survey(&out).unwrap()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// A script standing in for vnio: it leaves a mark when it runs.
fn planted(path: &Path, mark: &Path) {
    std::fs::write(path, format!("#!/bin/sh\ntouch '{}'\n", mark.display())).unwrap();
    chmod(path, 0o700);
}

const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn a_missing_directory_is_made_private() {
    let s = Scratch::new();
    // A name with a space, a quote, `$` and `;`: quoted, it is one word.
    let dir = s.0.join("bin dir 'x' $HOME; true");
    let found = survey(&dir, HASH);
    let m = std::fs::metadata(&dir).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    assert_eq!(found.uid, me());
    assert_eq!(found.file, None);
    assert_eq!(found.chain[0].mode, 0o700);
    assert_eq!(found.chain.len(), dir.components().count());
    assert_eq!(
        judge(&dir.display().to_string(), &found, HASH),
        Ok(Verdict::Install)
    );
}

#[test]
fn a_directory_others_can_write_is_refused() {
    let s = Scratch::new();
    let dir = s.0.join("bin");
    std::fs::create_dir(&dir).unwrap();
    // As /var/tmp/vnio-bin/KEY could be made by anyone: world-writable.
    chmod(&dir, 0o777);
    let d = dir.display().to_string();
    let err = judge(&d, &survey(&dir, HASH), HASH).unwrap_err();
    assert!(err.contains("mode 0777"), "{err}");
    assert!(err.contains("chmod 0700"), "says the fix: {err}");
    chmod(&dir, 0o750);
    assert!(
        judge(&d, &survey(&dir, HASH), HASH).is_err(),
        "group may enter"
    );
}

#[test]
fn a_directory_of_another_owner_is_refused() {
    if me() != 0 {
        eprintln!("skip: chown needs root");
        return;
    }
    let s = Scratch::new();
    let dir = s.0.join("bin");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let err = judge(&dir.display().to_string(), &survey(&dir, HASH), HASH).unwrap_err();
    assert!(err.contains("owned by uid 65534"), "{err}");
}

#[test]
fn a_parent_others_can_write_is_refused_unless_sticky() {
    let s = Scratch::new();
    let parent = s.0.join("shared");
    let dir = parent.join("bin");
    std::fs::create_dir(&parent).unwrap();
    chmod(&parent, 0o777);
    let d = dir.display().to_string();
    let err = judge(&d, &survey(&dir, HASH), HASH).unwrap_err();
    assert!(err.contains("others could replace"), "{err}");
    // Sticky, as /tmp: others cannot rename or remove what is ours.
    chmod(&parent, 0o1777);
    assert_eq!(judge(&d, &survey(&dir, HASH), HASH), Ok(Verdict::Install));
}

#[test]
fn a_symbolic_link_for_the_directory_is_refused() {
    let s = Scratch::new();
    let real = s.0.join("real");
    std::fs::create_dir(&real).unwrap();
    chmod(&real, 0o700);
    let dir = s.0.join("bin");
    std::os::unix::fs::symlink(&real, &dir).unwrap();
    let err = judge(&dir.display().to_string(), &survey(&dir, HASH), HASH).unwrap_err();
    assert!(err.contains("symbolic link"), "{err}");
}

#[test]
fn a_planted_binary_is_replaced_never_run() {
    let s = Scratch::new();
    let dir = s.0.join("bin");
    let mark = s.0.join("planted-ran");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    let d = dir.display().to_string();
    let copy = copy_path(&d, HASH);
    // Executable, same name, other content: replaced.
    planted(Path::new(&copy), &mark);
    let found = survey(&dir, HASH);
    let (st, h) = found.file.clone().expect("the planted file is seen");
    assert_eq!(st.kind, "regular file");
    assert_eq!(h, sha256_file(Path::new(&copy)).unwrap());
    assert_eq!(judge(&d, &found, HASH), Ok(Verdict::Install));
    // And the command that starts the copy refuses it too.
    let (ok, _, err) = sh(&verified_exec(&copy, HASH, "vm incoming"));
    assert!(!ok);
    assert!(err.contains("does not hash"), "{err}");
    assert!(!mark.exists(), "the planted binary ran");
    // The real hash, group-writable: replaced as well.
    let real = sha256_file(Path::new(&copy)).unwrap();
    let copy2 = copy_path(&d, &real);
    std::fs::rename(&copy, &copy2).unwrap();
    chmod(Path::new(&copy2), 0o770);
    assert_eq!(judge(&d, &survey(&dir, &real), &real), Ok(Verdict::Install));
    // Ours, 0700, the right hash: reused, and it runs.
    chmod(Path::new(&copy2), 0o700);
    assert_eq!(judge(&d, &survey(&dir, &real), &real), Ok(Verdict::Reuse));
    let (ok, _, err) = sh(&verified_exec(&copy2, &real, ""));
    assert!(ok, "{err}");
    assert!(mark.exists(), "the verified copy runs");
}

#[test]
fn a_planted_symbolic_link_as_the_copy_is_replaced() {
    let s = Scratch::new();
    let dir = s.0.join("bin");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o700);
    let target = s.0.join("elsewhere");
    std::fs::write(&target, "x").unwrap();
    let d = dir.display().to_string();
    let real = sha256_file(&target).unwrap();
    std::os::unix::fs::symlink(&target, copy_path(&d, &real)).unwrap();
    assert_eq!(judge(&d, &survey(&dir, &real), &real), Ok(Verdict::Install));
}

#[test]
fn the_survey_parses() {
    let out = "0\n0 700 directory\n0 755 directory\n0 755 directory\nnone\n";
    let s = parse_survey(out).unwrap();
    assert_eq!(s.uid, 0);
    assert_eq!(s.chain.len(), 3);
    assert_eq!(s.file, None);
    let out = format!("0\n0 700 directory\n0 755 directory\n0 700 regular file\n{HASH}\n");
    let s = parse_survey(&out).unwrap();
    assert_eq!(s.file.unwrap().1, HASH);
    assert!(parse_survey("garbage").is_err());
}
