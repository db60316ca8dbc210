//! podman with its CNI network backend runs two containers attached
//! through `vnio cni` (tap ports on a live switch): an image imported from
//! a local root file system holding the static vnio (nothing pulled), `vnio
//! agent` in one container, `vnio rr` from the other; removing the
//! containers leaves no port, record or lease. Skips without root, podman,
//! the reference plugins or the static vnio (scripts/setup --e2e makes them).

mod cni;

use cni::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The static (musl) vnio that `scripts/setup --e2e` builds for guests,
/// beside this test's own target directory, or $VNIO_STATIC.
fn static_vnio() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VNIO_STATIC") {
        return Some(PathBuf::from(p));
    }
    let target = Path::new(VNIO).parent()?.parent()?;
    let p = target.join("x86_64-unknown-linux-musl/guest/vnio");
    p.is_file().then_some(p)
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn run(&self, args: &[&str]) -> Output {
        let d = &self.dir;
        Command::new("podman")
            .arg("--root")
            .arg(d.join("root"))
            .arg("--runroot")
            .arg(d.join("runroot"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .env("CONTAINERS_CONF", d.join("containers.conf"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "podman {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.run(&["rm", "-fa"]);
        let _ = self.run(&["rmi", "-fa"]);
    }
}

#[test]
fn two_podman_containers_talk_through_vnio() {
    if !on_path("podman") {
        println!("skip: no podman (scripts/setup --e2e installs it)");
        return;
    }
    let Some(vnio_static) = static_vnio() else {
        println!("skip: no static vnio (scripts/setup --e2e builds it for guests)");
        return;
    };
    let Some(w) = World::new("pm", 71) else {
        return;
    };
    let pm = podman_config(&w, &vnio_static);
    let p = Podman { dir: pm.clone() };
    let tar = pm.join("rootfs.tar").display().to_string();
    p.ok(&["import", &tar, "localhost/vnio-cni-test"]);
    p.ok(&[
        "run",
        "-d",
        "--network",
        "vnio-pm",
        "--name",
        "agent",
        "localhost/vnio-cni-test",
        "/vnio",
        "agent",
    ]);
    let ip = p.ok(&[
        "inspect",
        "agent",
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    ]);
    assert!(
        ip.starts_with("10.71."),
        "the container's address is IPAM's: {ip}"
    );
    assert_eq!(w.ports().len(), 1, "one port for the agent's container");
    let rr = p.ok(&[
        "run",
        "--rm",
        "--network",
        "vnio-pm",
        "localhost/vnio-cni-test",
        "/vnio",
        "rr",
        "-t",
        &ip,
        "-d",
        "1s",
        "--warmup",
        "200ms",
    ]);
    println!("{rr}");
    let row = rr
        .lines()
        .find(|l| l.starts_with("all "))
        .unwrap_or_else(|| panic!("no rr result: {rr}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let trans: u64 = cols[1].parse().unwrap();
    assert!(trans > 100, "round trips through vnio: {row}");
    assert_eq!(w.ports().len(), 1, "the rr container's port went with it");
    p.ok(&["rm", "-f", "agent"]);
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
}

/// Podman's own files under the test's directory: an image holding the
/// static vnio alone, a CNI configuration for vnio-cni and a
/// containers.conf pointing at both. Returns that directory.
fn podman_config(w: &World, vnio_static: &Path) -> PathBuf {
    let d = w.dir.clone();
    let pm = d.join("podman");
    for sub in ["net.d", "rootfs"] {
        std::fs::create_dir_all(pm.join(sub)).unwrap();
    }
    // The image: the static vnio alone.
    std::fs::copy(vnio_static, pm.join("rootfs/vnio")).unwrap();
    let ok = Command::new("tar")
        .arg("-C")
        .arg(pm.join("rootfs"))
        .arg("-cf")
        .arg(pm.join("rootfs.tar"))
        .arg(".")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // podman 4.3's libcni reads configurations up to 1.0.0. Its own
    // files only: the host's containers.conf and networks are left alone.
    std::fs::write(
        pm.join("net.d/vnio-pm.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"vnio-pm","plugins":[{{"type":"vnio-cni","control":"{0}/ctl.sock","kind":"tap","dataDir":"{0}/data","ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.71.0.0/16"}}]],"dataDir":"{0}/ipam"}}}}]}}"#,
            d.display()
        ),
    )
    .unwrap();
    let plugins = w
        .cni_path
        .split(':')
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>();
    // runc when there is one: crun refuses this machine's hybrid cgroup
    // layout. Explicit limits: the runtime may not raise them past ours.
    let runtime = if on_path("runc") {
        "runtime = \"runc\"\n"
    } else {
        ""
    };
    std::fs::write(
        pm.join("containers.conf"),
        format!(
            "[engine]\n{runtime}cgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             [containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n\
             [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [{}]\nnetwork_config_dir = \"{}\"\n",
            plugins.join(", "),
            pm.join("net.d").display()
        ),
    )
    .unwrap();
    pm
}
