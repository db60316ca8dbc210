//! `vnio lab findings --json` of a real run (root) validates against
//! `docs/findings.schema.json` with a JSON Schema validator that is not
//! ours (Python's `jsonschema`, Debian's python3-jsonschema; `scripts/setup
//! --e2e`). The run covers every shape a verdict takes: a difference, a
//! ratio, a value without an against point, and a finding whose subject
//! was not measured (left out with -c: nulls where numbers would be). A
//! document the schema must refuse is refused, so the check checks. A
//! second run, a poll-mode pair's rate through two vnio switches with the
//! line probe beside it (knob `placement_probe`), gives ratios per
//! placement with the switches' busy shares, which validate too.

use std::path::Path;
use std::process::{Command, Stdio};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");
const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/findings.schema.json"
);

const SCENARIO: &str = r#"
title = "findings schema"
maps_to = "a test"
cannot = "anything"
[run]
duration = "300ms"
warmup = "100ms"
iterations = 2
[[host]]
name = "client"
[[host]]
name = "server"
[[configuration]]
name = "native"
wire = "veth"
[[configuration]]
name = "bridge"
wire = "bridge"
[[configuration]]
name = "switch"
wire = "switch"
[[workload]]
name = "ping"
kind = "ping"
from = "client"
to = "server"
[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
protocol = "udp"
[[finding]]
id = "bridge-adds-latency"
study = "a study"
claim = "a virtual path adds 15-20 us per round trip over native"
workload = "rr"
statistic = "p50"
subject = { configuration = "bridge" }
against = { configuration = "native" }
expect = "above"
reference = [15, 20]
[[finding]]
id = "bridge-rate-ratio"
study = "a study"
claim = "the bridge carries fewer transactions than native"
workload = "rr"
statistic = "rate"
subject = { configuration = "bridge" }
against = { configuration = "native" }
quantity = "ratio"
expect = "below"
[[finding]]
id = "idle-tail-within-2x-mean"
study = "a study"
claim = "the 99th percentile within two times the mean when idle"
workload = "ping"
statistic = "tail-ratio"
subject = { configuration = "native" }
expect = "below"
than = 2
reference = 2
[[finding]]
id = "switch-not-run"
study = "a study"
claim = "the switch adds latency over native"
workload = "rr"
statistic = "p99"
subject = { configuration = "switch" }
against = { configuration = "native" }
expect = "above"
"#;

/// Two vnio switches forwarding a poll-mode pair's 64 B rate, the probe
/// between the switch's CPU and the endpoints'.
const PLACEMENT: &str = r#"
title = "findings schema, placement"
maps_to = "a test"
cannot = "anything"
[run]
duration = "2s"
warmup = "200ms"
iterations = 2
interleave = true
[knobs]
switch_cpus = [0]
client_cpus = [1]
placement_probe = true
[[host]]
name = "a"
kind = "poll-mode"
[[host]]
name = "b"
kind = "poll-mode"
[[configuration]]
name = "one"
wire = "switch"
knobs = { switch_busy_poll = true }
[[configuration]]
name = "two"
wire = "switch"
knobs = { switch_busy_poll = true }
[[workload]]
name = "rate-64"
kind = "stream"
from = "a"
to = "b"
protocol = "udp"
size = 22
[[finding]]
id = "one-rate-vs-two"
study = "a study"
claim = "one switch forwards as fast as the other"
workload = "rate-64"
statistic = "rate"
quantity = "ratio"
subject = { configuration = "one" }
against = { configuration = "two" }
expect = "above"
than = 0.5
"#;

/// Validates the JSON document in `doc` against the schema: Ok, or the
/// validator's message.
fn validate(doc: &Path) -> Result<(), String> {
    let script = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(schema)\n\
        jsonschema.Draft202012Validator(schema).validate(json.load(open(sys.argv[2])))\n";
    let out = Command::new("python3")
        .args(["-c", script, SCHEMA])
        .arg(doc)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// One real run at a time: the pair's busy-polling switch and endpoints
/// take both CPUs, which would starve the other run's measurement.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why the real runs cannot go here, if they cannot.
fn cannot_run() -> Option<&'static str> {
    if !vnio_lab::is_root() {
        return Some("the run needs root (network namespaces)");
    }
    let has_validator = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_validator {
        return Some("Python's jsonschema is missing (scripts/setup --e2e installs it)");
    }
    None
}

/// Runs `scenario` (with `args` after its path) in a store of its own
/// under `dir`, and returns `vnio lab findings last --json`, validated.
fn findings_of(dir: &Path, scenario: &str, args: &[&str]) -> String {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (journal, db, file) = (dir.join("journal"), dir.join("lab.db"), dir.join("f.toml"));
    std::fs::write(&file, scenario).unwrap();
    let vnio = |args: &[&str]| {
        let out = Command::new(VNIO)
            .env("VNIO_LAB_JOURNAL", &journal)
            .args(args)
            .arg("--db")
            .arg(&db)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "vnio {args:?}:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let mut run = vec!["lab", "run", file.to_str().unwrap()];
    run.extend(args);
    vnio(&run);
    let json = vnio(&["lab", "findings", "last", "--json"]);
    let found = dir.join("findings.json");
    std::fs::write(&found, &json).unwrap();
    validate(&found).unwrap_or_else(|e| panic!("{e}\n{json}"));
    json
}

#[test]
fn findings_json_of_a_real_run_validates_against_the_schema() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vnio-lab-schema-{}", std::process::id()));
    let json = findings_of(&dir, SCENARIO, &["-c", "native", "-c", "bridge"]);

    // Every shape is in the document validated.
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let verdicts = doc["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 4, "{json}");
    let by_id = |id: &str| verdicts.iter().find(|v| v["id"] == id).unwrap();
    assert_eq!(by_id("bridge-rate-ratio")["quantity"], "ratio");
    assert!(by_id("idle-tail-within-2x-mean")["against"].is_null());
    let not_run = by_id("switch-not-run");
    assert!(
        not_run["value"].is_null() && not_run["band"].is_null(),
        "{not_run}"
    );
    assert!(not_run["subject"]["missing"].is_string(), "{not_run}");
    // No point of this run carries the probe: no ratio per placement.
    assert!(verdicts
        .iter()
        .all(|v| v["by_placement"] == serde_json::json!([])));

    // The schema refuses what it must: an unknown outcome, a missing field.
    let mut bad = doc.clone();
    bad["verdicts"][0]["outcome"] = "probably".into();
    let wrong = dir.join("wrong.json");
    std::fs::write(&wrong, bad.to_string()).unwrap();
    assert!(validate(&wrong).unwrap_err().contains("probably"));
    let mut bad = doc.clone();
    bad["verdicts"][0].as_object_mut().unwrap().remove("why");
    std::fs::write(&wrong, bad.to_string()).unwrap();
    assert!(validate(&wrong).unwrap_err().contains("why"));

    // A run that set knobs (`--knob`) lists them; the schema takes them,
    // and refuses one without its value.
    let mut knobs = doc;
    knobs["knob_overrides"] = serde_json::json!([
        { "key": "endpoints", "value": "vnio" },
        { "key": "switch_cpus", "value": [0] }
    ]);
    std::fs::write(&wrong, knobs.to_string()).unwrap();
    validate(&wrong).unwrap();
    knobs["knob_overrides"][0]
        .as_object_mut()
        .unwrap()
        .remove("value");
    std::fs::write(&wrong, knobs.to_string()).unwrap();
    assert!(validate(&wrong).unwrap_err().contains("value"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ratios_per_placement_of_a_real_run_validate_against_the_schema() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !two_cpus {
        eprintln!("skipped: the probe runs between CPUs 0 and 1, this machine has one");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vnio-lab-schema-p-{}", std::process::id()));
    let json = findings_of(&dir, PLACEMENT, &[]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let v = &doc["verdicts"][0];
    let at = v["by_placement"].as_array().unwrap();
    assert_eq!(at.len(), 2, "{v}");
    assert_eq!(
        (at[0]["placement"].as_str(), at[1]["placement"].as_str()),
        (Some("near"), Some("far"))
    );
    // Two iterations of two whole seconds a side: every second the probe
    // placed is near or far (the host decides which). Two seconds, not
    // one: on a loaded machine the probe's threads may find no moment
    // with both CPUs for a whole second.
    let seconds = |side: &str| -> u64 { at.iter().map(|p| p[side].as_u64().unwrap()).sum() };
    assert!(
        seconds("subject_seconds") <= 4 && seconds("against_seconds") <= 4,
        "{v}"
    );
    assert!(
        seconds("subject_seconds") + seconds("against_seconds") > 0,
        "the probe placed no second: {v}"
    );

    println!("by placement: {}", serde_json::Value::from(at.clone()));
    // Both sides are vnio's switch: each placement says its busy share,
    // null where no second there was read.
    for p in at {
        for side in ["subject_busy", "against_busy"] {
            let b = &p[side];
            assert!(
                b.is_null() || b.as_f64().is_some_and(|b| b > 0.0 && b <= 1.0),
                "{p}"
            );
        }
    }

    // The schema refuses a placement it does not know, and a busy share
    // above 1.
    let mut bad = doc.clone();
    bad["verdicts"][0]["by_placement"][0]["placement"] = "middle".into();
    let wrong = dir.join("wrong.json");
    std::fs::write(&wrong, bad.to_string()).unwrap();
    assert!(validate(&wrong).unwrap_err().contains("middle"));
    let mut bad = doc.clone();
    bad["verdicts"][0]["by_placement"][0]["subject_busy"] = 1.5.into();
    std::fs::write(&wrong, bad.to_string()).unwrap();
    assert!(validate(&wrong).unwrap_err().contains("1.5"));
    let _ = std::fs::remove_dir_all(&dir);
}
