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
    // Rebuild when the checked-out commit moves: HEAD (a checkout) and the
    // branch it names (a commit). Not the index: `git status` rewrites it,
    // and every status would relink vnio. So "-dirty" is as of the last
    // commit or checkout, which is what a stored run needs to be traced.
    let mut watch = vec!["HEAD".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    watch.push("packed-refs".to_owned());
    for name in watch {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
