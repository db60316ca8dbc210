//! The `instrument` knob end to end (root: a real run, about 15 s): the
//! raw echo loop, sockperf and iperf3 measure in place of vnio's
//! instrument between two namespaces, their points are stored as result
//! documents with the client's CPU, and no tool process is left. Without
//! sockperf or iperf3 their points must say what to install.

use std::path::Path;
use std::process::Command;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn vnio(journal: &Path, args: &[&str]) -> String {
    let out = Command::new(VNIO)
        .env("VNIO_LAB_JOURNAL", journal)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vnio {args:?}:\n{text}");
    text
}

fn installed(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() || !o.stdout.is_empty())
}

/// Processes whose command line names the tools' port.
fn tool_processes() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if (cmd.starts_with("sockperf") || cmd.starts_with("iperf3")) && cmd.contains("7711") {
            out.push(cmd);
        }
    }
    out
}

#[test]
fn other_instruments_measure_in_vnios_place_and_leave_nothing() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the run needs root (network namespaces)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vnio-lab-instrument-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    let db_arg = db.to_str().unwrap();
    vnio(
        &journal,
        &[
            "lab",
            "run",
            "instrument",
            "-c",
            "raw-echo",
            "-c",
            "sockperf",
            "-c",
            "iperf3",
            "--duration",
            "400ms",
            "--warmup",
            "100ms",
            "--iterations",
            "1",
            "--db",
            db_arg,
        ],
    );
    let store = vnio_lab::store::Store::open(&db).unwrap();
    let run = store.load(store.resolve("last").unwrap()).unwrap();
    let points = &run.scenarios[0].points;
    let point = |cfg: &str, w: &str| {
        points
            .iter()
            .find(|o| o.point.configuration == cfg && o.point.workload.name == w)
            .unwrap_or_else(|| panic!("no point {cfg}/{w}"))
    };
    let mut measured = vec![("raw-echo", "rr-udp"), ("raw-echo", "rr-tcp")];
    for (tool, cfg, w) in [
        ("sockperf", "sockperf", "rr-udp"),
        ("sockperf", "sockperf", "rr-tcp"),
        ("iperf3", "iperf3", "stream-tcp"),
    ] {
        if installed(tool) {
            measured.push((cfg, w));
        } else {
            let o = point(cfg, w);
            assert_eq!(o.status.as_str(), "skipped");
            let why = o.error.as_deref().unwrap_or_default();
            assert!(why.contains(&format!("apt-get install {tool}")), "{why}");
            eprintln!("{tool} is not installed: its points say so ({why})");
        }
    }
    for (cfg, w) in measured {
        let o = point(cfg, w);
        assert_eq!(o.status.as_str(), "ok", "{cfg}/{w}: {:?}", o.error);
        let doc = o.document.as_ref().unwrap();
        let it = doc.chosen().unwrap();
        assert!(it.merged.ops > 10, "{cfg}/{w}: {} ops", it.merged.ops);
        assert!(it.client_cost.cpu.total_ns() > 0, "{cfg}/{w}: client CPU");
        if w.starts_with("rr") {
            let l = it.merged.latency.as_ref().unwrap();
            assert!(l.p50_ns > 0 && l.p50_ns <= l.p99_ns, "{cfg}/{w}: {l:?}");
        } else {
            assert!(it.merged.gbps > 0.0, "{cfg}/{w}: gbps");
        }
    }
    // A tool measures what it can; the rest is skipped with the reason.
    let o = point("raw-echo", "stream-tcp");
    assert_eq!(o.status.as_str(), "skipped");
    assert!(o
        .error
        .as_deref()
        .unwrap_or_default()
        .contains("request-response only"));
    assert!(tool_processes().is_empty(), "{:?}", tool_processes());
    let clean = vnio(&journal, &["lab", "clean"]);
    assert!(clean.contains("clean: 0 removed, 0 failed"), "{clean}");
    let _ = std::fs::remove_dir_all(&dir);
}
