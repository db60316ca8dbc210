//! `--knob KEY=VALUE` through the binary (no root): `vnio lab show` with
//! knobs set says what each replaces, a flag the lab refuses fails `show`
//! and `run` in one line before anything is built or stored, and a stored
//! run that set knobs says so in `list`, `findings` (text and JSON),
//! `report` and `compare`. The run is stored through the lab's API, as a
//! real one would be (`lab_anchors.rs` runs one for real, as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vnio_lab::scenario::{self, Capabilities, KnobOverride, LabFile, Overrides, Plan};
use vnio_lab::store::Store;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vnio-lab-knob-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn lab(args: &[&str], journal: &Path) -> Output {
    Command::new(VNIO)
        .arg("lab")
        .args(args)
        .env("VNIO_LAB_JOURNAL", journal)
        .output()
        .unwrap()
}

fn stdout_of(args: &[&str], journal: &Path) -> String {
    let out = lab(args, journal);
    assert!(
        out.status.success(),
        "vnio lab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn show_says_what_each_knob_replaces() {
    let dir = temp("show");
    let journal = dir.join("journal");
    let shown = stdout_of(
        &[
            "show",
            "switch-anchors",
            "--knob",
            "endpoints=vnio",
            "--knob",
            "switch_busy_poll=false",
            "-c",
            "vnio",
        ],
        &journal,
    );
    assert!(
        shown.contains("knob endpoints = \"vnio\" (--knob, over \"dpdk\" in [knobs])"),
        "{shown}"
    );
    assert!(
        shown.contains("knob switch_busy_poll = false (--knob, over true in configuration `vnio`)"),
        "{shown}"
    );
    // The lab's own endpoints need no DPDK: nothing skipped for want of it.
    assert!(shown.contains("(0 skipped in this build)"), "{shown}");
    let plain = stdout_of(&["show", "switch-anchors"], &journal);
    assert!(!plain.contains("knob "), "{plain}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_knob_the_lab_refuses_fails_in_one_line_before_anything_runs() {
    let dir = temp("refused");
    let (journal, db) = (dir.join("journal"), dir.join("never.db"));
    let db_arg = db.to_str().unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "endpoint=vnio",
            "--knob endpoint=vnio: no knob named \"endpoint\" (did you mean `endpoints`?)",
        ),
        (
            "endpoints=dppk",
            "--knob endpoints=dppk: unknown variant `dppk`, expected `vnio` or `dpdk`",
        ),
        ("switch_cpus=0", "--knob switch_cpus=0: invalid type: integer `0`"),
        ("endpoints", "--knob endpoints: expected KEY=VALUE"),
        (
            "switch_busy_poll=false",
            "shipped:switch-anchors with --knob switch_busy_poll=false: configuration `ovs-dpdk`: knobs.switch_busy_poll: needs wire = \"switch\"",
        ),
        (
            "switch_budget=0",
            "configuration `vnio`: knobs.switch_budget: must be 1 to 4096 frames",
        ),
    ];
    for (knob, says) in cases {
        for cmd in ["show", "run"] {
            let mut args = vec![cmd, "switch-anchors", "--knob", knob];
            if cmd == "run" {
                args.extend(["--db", db_arg]);
            }
            let out = lab(&args, &journal);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} succeeded");
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
            assert!(err.contains(says), "{args:?}: want {says:?} in {err}");
        }
    }
    assert!(!db.exists(), "no store created by refused runs");
    assert!(!journal.exists(), "no journal written by refused runs");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stores a run of switch-anchors as `vnio lab run switch-anchors --quick
/// --knob endpoints=vnio` would record it (no point measured), after a
/// run of it as written; the store.
fn store_runs(dir: &Path) -> PathBuf {
    let db = dir.join("lab.db");
    let store = Store::open(&db).unwrap();
    let source = scenario::load("switch-anchors").unwrap();
    let LabFile::Scenario(file) = &source.file else {
        panic!("a set")
    };
    let env = vnio_measure::env::Environment::default();
    for knobs in [&[][..], &["endpoints=vnio"][..]] {
        let o = Overrides {
            quick: true,
            knobs: KnobOverride::parse_all(knobs).unwrap(),
            ..Default::default()
        };
        let s = scenario::with_knobs(&source.origin, file, &o).unwrap();
        let plan = Plan::new(&s, &o, &Capabilities::current()).unwrap();
        let id = store
            .begin_run("switch-anchors", &s.title, "v-test", &env, &o)
            .unwrap();
        store.add_scenario(id, 0, &source, &s, &plan).unwrap();
        store.finish_run(id, "complete", None).unwrap();
    }
    db
}

#[test]
fn a_stored_run_that_set_knobs_says_so_wherever_it_is_shown() {
    let dir = temp("stored");
    let journal = dir.join("journal");
    let db = store_runs(&dir);
    let db = db.to_str().unwrap();
    let set = "knobs set: endpoints = \"vnio\"";

    let list = stdout_of(&["list", "--db", db], &journal);
    let runs: Vec<&str> = list.lines().filter(|l| l.contains("v-test")).collect();
    assert_eq!(runs.len(), 2, "{list}");
    assert!(
        runs[0].trim_start().starts_with('2') && runs[0].ends_with(set),
        "{list}"
    );
    assert!(!runs[1].contains("knobs"), "{list}");

    let findings = stdout_of(&["findings", "--db", db], &journal);
    assert!(
        findings.starts_with(&format!("run 2: switch-anchors  {set}\n")),
        "{findings}"
    );
    let plain = stdout_of(&["findings", "last-1", "--db", db], &journal);
    assert!(plain.starts_with("run 1: switch-anchors\n"), "{plain}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout_of(&["findings", "--json", "--db", db], &journal)).unwrap();
    assert_eq!(
        json["knob_overrides"],
        serde_json::json!([{ "key": "endpoints", "value": "vnio" }])
    );

    let html = dir.join("run.html");
    stdout_of(
        &["report", "--db", db, "-o", html.to_str().unwrap()],
        &journal,
    );
    let html = std::fs::read_to_string(html).unwrap();
    assert!(
        html.contains(
            "Knobs overridden for this run</b> (<code>--knob</code>): endpoints = &quot;vnio&quot;"
        ),
        "{html}"
    );

    let compared = dir.join("compare.html");
    let out = lab(
        &[
            "compare",
            "1",
            "2",
            "--db",
            db,
            "-o",
            compared.to_str().unwrap(),
        ],
        &journal,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with(&format!("run 2:  {set}\n")), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
