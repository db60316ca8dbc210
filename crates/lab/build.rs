//! Records `git describe` of the source tree at build time, so every stored
//! lab run names the revision of vnio that produced it (the binary may run
//! anywhere, far from its source tree).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let describe = git(&["describe", "--always", "--dirty", "--tags"]).unwrap_or_default();
    println!("cargo:rustc-env=VNIO_GIT_DESCRIBE={describe}");
    // Rebuild when the checked-out commit or the index moves (a commit, a
    // checkout, `git add`), which is what changes the description.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index"] {
            let p = Path::new(&dir).join(f);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
