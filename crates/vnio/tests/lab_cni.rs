//! `vnio lab run cni --quick` end to end (root, Debian's
//! containernetworking-plugins): pods attached by `vnio cni` (tap, and
//! vhost-user with poll-mode endpoints) and by the reference `bridge`
//! plugin, each with host-local IPAM giving the lab's addresses; every
//! point measured but the one a poll-mode pair cannot run, among them 5
//! pods added and deleted through each plugin with every ADD and DEL
//! timed (the runner fails a point whose DEL leaves the pod's namespace,
//! port, interface, lease, record or socket behind); its findings judged,
//! and nothing left: the journal empty, no namespace, process or scratch
//! directory of the run. About 20 s.

use std::path::{Path, PathBuf};
use std::process::Command;

use vnio_lab::runner::Status;
use vnio_lab::store::Store;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-cni-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Root and the reference plugins, or a skip line.
fn ready() -> bool {
    if !vnio_lab::is_root() {
        println!("skip: the cni scenario needs root (namespaces)");
        return false;
    }
    let plugins = ["/usr/lib/cni", "/opt/cni/bin"].iter().any(|d| {
        Path::new(d).join("bridge").is_file() && Path::new(d).join("host-local").is_file()
    });
    if !plugins {
        println!("skip: no reference CNI plugins (apt install containernetworking-plugins)");
    }
    plugins
}

#[test]
fn the_cni_scenario_measures_every_attachment_and_leaves_nothing() {
    if !ready() {
        return;
    }
    let dir = temp("quick");
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    let out = Command::new(VNIO)
        .args(["lab", "run", "cni", "--quick", "--db"])
        .arg(&db)
        .arg("--report")
        .arg(dir.join("cni.html"))
        .env("VNIO_LAB_JOURNAL", &journal)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vnio lab run cni --quick:\n{said}");
    let left = std::fs::read_to_string(&journal).unwrap_or_default();
    assert!(left.trim().is_empty(), "journal not empty: {left}");

    let store = Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let s = &run.scenarios[0];
    assert_eq!(s.points.len(), 15, "3 attachments x 5 workloads");
    for p in &s.points {
        let at = format!("{} {}", p.point.configuration, p.point.workload.name);
        if p.point.configuration == "vnio-vhost-user" && p.point.workload.name == "rr-tcp" {
            assert_eq!(p.status, Status::Skipped, "{at}");
            continue;
        }
        assert_eq!(p.status, Status::Ok, "{at}: {:?}\n{said}", p.error);
        let doc = p.document.as_ref().unwrap();
        let m = &doc.iterations[doc.chosen].merged;
        assert!(m.ops > 0, "{at}: {m:?}");
        if p.point.workload.name.starts_with("pod-") {
            // Every pod's operation timed, nothing left after any DEL.
            assert_eq!(m.ops, 5, "{at}: the --quick pods");
            assert!(doc.errors.is_empty(), "{at}: {:?}", doc.errors);
            let lat = m.latency.as_ref().unwrap();
            assert!(lat.p50_ns > 0 && lat.p99_ns >= lat.p50_ns, "{at}: {lat:?}");
        }
    }
    let pods_left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("vnio-") && n.contains("-pod"))
                .collect()
        })
        .unwrap_or_default();
    assert!(pods_left.is_empty(), "pod namespaces left: {pods_left:?}");
    // Each testbed says how its hosts were attached.
    for bed in &s.testbeds {
        let notes = bed.notes.join("; ");
        let by = if bed.configuration == "bridge" {
            "reference bridge plugin"
        } else {
            "attached by `vnio cni`"
        };
        assert!(notes.contains(by), "{}: {notes}", bed.configuration);
    }
    // The findings are judged from this run.
    let f = Command::new(VNIO)
        .args(["lab", "findings", "--json", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(f.status.success());
    let text = String::from_utf8_lossy(&f.stdout);
    for id in [
        "cni-vhost-user-rtt-vs-bridge",
        "cni-tap-rtt-vs-bridge",
        "cni-tap-stream-vs-bridge",
        "cni-tap-add-vs-bridge",
        "cni-tap-del-vs-bridge",
    ] {
        assert!(text.contains(id), "finding {id} judged: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
