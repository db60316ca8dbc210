//! `vnio lab clean` as a user meets it (root, real namespaces): while a run
//! goes on, clean keeps the run's objects and says whose they are and what
//! to do; the moment the run is SIGKILLed, before anyone reaps it (a
//! zombie), clean removes everything it left: namespaces, processes,
//! scratch directory, journal entries.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn lab(journal: &Path) -> Command {
    let mut c = Command::new(VNIO);
    c.arg("lab").env("VNIO_LAB_JOURNAL", journal);
    c
}

/// `vnio lab clean`, which must succeed; what it printed.
fn clean(journal: &Path) -> String {
    let out = lab(journal).arg("clean").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "clean failed:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// True while process `pid` started at `start` (ticks since boot) runs:
/// neither gone nor a zombie.
fn runs(pid: &str, start: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    fields[0] != "Z" && fields[19] == start
}

/// What of the journal lines `lines` still exists, one line each.
fn existing(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w[0] {
                "netns" => Path::new("/run/netns").join(w[1]).exists(),
                "dir" => Path::new(w[1]).exists(),
                "link" => Path::new("/sys/class/net").join(w[1]).exists(),
                "process" => {
                    let (pid, start) = w[1].split_once(':').unwrap();
                    runs(pid, start)
                }
                _ => true,
            }
        })
        .cloned()
        .collect()
}

#[test]
fn clean_right_after_sigkill_leaves_nothing_and_says_what_it_keeps() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vnio-lab-clean-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (journal, db) = (dir.join("journal"), dir.join("lab.db"));
    let mut run = lab(&journal)
        .args([
            "run",
            "rr-burst",
            "-c",
            "native",
            "--duration",
            "30s",
            "--db",
        ])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = run.id();
    // Both namespaces and both agents exist.
    let deadline = Instant::now() + Duration::from_secs(60);
    let lines = loop {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        let count = |kind: &str| text.lines().filter(|l| l.starts_with(kind)).count();
        if count("netns ") >= 2 && count("process ") >= 2 {
            break text.lines().map(str::to_owned).collect::<Vec<_>>();
        }
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        assert!(Instant::now() < deadline, "the run built nothing: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(existing(&lines), lines, "the run's objects exist");

    // The run goes on: clean keeps it all and says whose and what to do.
    let said = clean(&journal);
    assert!(!said.lines().any(|l| l.starts_with("removed")), "{said}");
    let kept = said.lines().find(|l| l.starts_with("kept ")).unwrap_or("");
    assert!(
        kept.contains(&format!("pid {pid} (")) && kept.contains("lab run rr-burst"),
        "{said}"
    );
    assert!(said.contains("vnio lab clean --all"), "{said}");
    assert!(said.contains(&format!("0 removed, 0 failed, {} kept", lines.len())));
    assert_eq!(existing(&lines), lines, "nothing of a live run removed");

    // SIGKILL, and clean at once: the runner is dying or a zombie (nobody
    // has reaped it), which owns nothing any more.
    run.kill().unwrap();
    let said = clean(&journal);
    assert!(said.contains("removed netns vnio-"), "{said}");
    assert!(said.contains(", 0 kept"), "{said}");
    // Killed agents are reaped by init: give them a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !existing(&lines).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(existing(&lines).is_empty(), "left: {:?}", existing(&lines));
    let text = std::fs::read_to_string(&journal).unwrap_or_default();
    assert!(text.trim().is_empty(), "journal: {text}");
    assert!(
        std::fs::metadata(format!("/proc/{pid}")).is_ok(),
        "the runner was still unreaped when clean ran"
    );
    run.wait().unwrap();

    // The store says the run was killed.
    let out = lab(&journal)
        .args(["list", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("rr-burst") && l.contains("killed")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
