//! The pod sandbox ("pause") image, made here so that nothing is pulled:
//! a static C program that sleeps until SIGTERM or SIGINT, alone in one
//! layer, written as an OCI image layout archive for `ctr images import`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The image's name, as the CRI plugin's `sandbox_image` names it.
pub const PAUSE_IMAGE: &str = "localhost/vnio-pause:1";

const PAUSE_C: &str = r#"#include <signal.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

int main(void) {
    signal(SIGTERM, quit);
    signal(SIGINT, quit);
    for (;;)
        pause();
}
"#;

/// The OCI architecture name of this machine.
fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn run(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Stores `path`'s bytes as a blob of the layout `oci`: its digest and size.
fn blob(oci: &Path, path: &Path) -> serde_json::Value {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(o.status.success(), "sha256sum {}", path.display());
    let text = String::from_utf8_lossy(&o.stdout);
    let hex = text.split_whitespace().next().unwrap().to_string();
    let size = std::fs::metadata(path).unwrap().len();
    std::fs::copy(path, oci.join("blobs/sha256").join(&hex)).unwrap();
    serde_json::json!({ "digest": format!("sha256:{hex}"), "size": size })
}

/// Writes `v` to `dir/name` and stores it as a blob, with `media_type`.
fn json_blob(
    oci: &Path,
    dir: &Path,
    name: &str,
    v: &serde_json::Value,
    media_type: &str,
) -> serde_json::Value {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    let mut d = blob(oci, &p);
    d["mediaType"] = media_type.into();
    d
}

/// Builds the pause image's archive under `dir` (compiling the program
/// with `cc -static`); its path.
pub fn pause_archive(dir: &Path) -> PathBuf {
    let work = dir.join("pause");
    let rootfs = work.join("rootfs");
    let oci = work.join("oci");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::create_dir_all(oci.join("blobs/sha256")).unwrap();
    std::fs::write(work.join("pause.c"), PAUSE_C).unwrap();
    run(Command::new("cc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(rootfs.join("pause"))
        .arg(work.join("pause.c")));
    let layer = work.join("layer.tar");
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."));
    let mut layer_desc = blob(&oci, &layer);
    layer_desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar".into();
    // An uncompressed layer: its diff ID is its digest.
    let config = serde_json::json!({
        "architecture": arch(),
        "os": "linux",
        "config": { "Entrypoint": ["/pause"] },
        "rootfs": { "type": "layers", "diff_ids": [layer_desc["digest"]] },
    });
    let config_desc = json_blob(
        &oci,
        &work,
        "config.json",
        &config,
        "application/vnd.oci.image.config.v1+json",
    );
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    });
    let mut manifest_desc = json_blob(
        &oci,
        &work,
        "manifest.json",
        &manifest,
        "application/vnd.oci.image.manifest.v1+json",
    );
    manifest_desc["annotations"] = serde_json::json!({
        "io.containerd.image.name": PAUSE_IMAGE,
        "org.opencontainers.image.ref.name": PAUSE_IMAGE.rsplit(':').next(),
    });
    let index = serde_json::json!({ "schemaVersion": 2, "manifests": [manifest_desc] });
    std::fs::write(oci.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(oci.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let archive = work.join("pause-oci.tar");
    run(Command::new("tar")
        .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
        .arg(&oci)
        .arg("-cf")
        .arg(&archive)
        .arg("."));
    archive
}
