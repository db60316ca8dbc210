//! Knobs set for one run (`vnio lab run NAME --knob KEY=VALUE`): reading
//! the flag, layering over the scenario's knobs and the configurations'
//! own, the same checks and messages as knobs in a file, and the run that
//! records them and says so wherever it is shown. No root needed.

use vnio_lab::findings;
use vnio_lab::report;
use vnio_lab::scenario::{
    self, Capabilities, KnobOverride, KnobOverrideError, LabFile, Overrides, Plan, Scenario,
};
use vnio_lab::session::{self, LabError};
use vnio_lab::store::Store;
use vnio_measure::env::Environment;

fn knob(arg: &str) -> KnobOverride {
    KnobOverride::parse(arg).unwrap()
}

fn refused(arg: &str) -> String {
    let e = KnobOverride::parse(arg).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn with(args: &[&str]) -> Overrides {
    Overrides {
        knobs: KnobOverride::parse_all(args).unwrap(),
        ..Default::default()
    }
}

/// Two switches and a bridge; the scenario's busy-poll 16 µs, the first
/// switch's own 8.
const TWO: &str = r#"
title = "t"
maps_to = "m"
[knobs]
busy_poll_us = 16
[[host]]
name = "a"
[[host]]
name = "b"
[[configuration]]
name = "sw"
wire = "switch"
knobs = { busy_poll_us = 8 }
[[configuration]]
name = "sw2"
wire = "switch"
[[configuration]]
name = "br"
wire = "bridge"
[[workload]]
name = "rr"
kind = "rr"
from = "a"
to = "b"
"#;

fn two() -> Scenario {
    let LabFile::Scenario(s) = scenario::parse("two.toml", TWO).unwrap() else {
        panic!("a set")
    };
    *s
}

/// The knobs configuration `name` of `s` runs with.
fn knobs_of(s: &Scenario, name: &str) -> scenario::Knobs {
    let c = s.configurations.iter().find(|c| c.name == name).unwrap();
    s.knobs.layered(&c.knobs)
}

#[test]
fn a_value_is_toml_and_a_bare_word_a_string() {
    let k = knob("endpoints=vnio");
    assert_eq!(k.key, "endpoints");
    assert_eq!(k.value, toml::Value::String("vnio".into()));
    assert_eq!(k.to_string(), "endpoints = \"vnio\"");
    assert_eq!(k.flag(), "--knob endpoints=\"vnio\"");
    assert_eq!(knob("endpoints=\"vnio\""), k, "quoted or not");
    assert_eq!(knob("switch_cpus=[0]").to_string(), "switch_cpus = [0]");
    assert_eq!(
        knob("placement_probe=false").value,
        toml::Value::Boolean(false)
    );
    assert_eq!(knob(" switch_budget = 32 ").value, toml::Value::Integer(32));
    assert_eq!(
        knob("coalesce=static:32:50").value,
        toml::Value::String("static:32:50".into())
    );
    assert_eq!(
        knob("port_offloads={a=false}").to_string(),
        "port_offloads = { a = false }"
    );
    assert_eq!(
        knob("switch_binary=/opt/vnio/bin/vnio").value,
        toml::Value::String("/opt/vnio/bin/vnio".into())
    );
}

#[test]
fn a_flag_that_cannot_be_a_knob_is_refused_in_one_line() {
    assert_eq!(
        refused("endpoints"),
        "--knob endpoints: expected KEY=VALUE, e.g. --knob endpoints=vnio"
    );
    assert_eq!(
        refused("endpoint=dpdk"),
        "--knob endpoint=dpdk: no knob named \"endpoint\" (did you mean `endpoints`?)"
    );
    assert_eq!(
        refused("swtich_cpus=[0]"),
        "--knob swtich_cpus=[0]: no knob named \"swtich_cpus\" (did you mean `switch_cpus`?)"
    );
    // Nothing near: every knob, the list kept in step with the struct.
    let e = refused("colour=3");
    assert!(
        e.starts_with("--knob colour=3: no knob named \"colour\" (knobs: agent_cpus, attach, busy_poll_us, client_cpus,"),
        "{e}"
    );
    let names = scenario::knob_names();
    assert!(names.len() >= 27, "{names:?}");
    for n in &names {
        assert!(e.contains(n.as_str()), "{n} in {e}");
    }
    let e = refused("switch_cpus=[0");
    assert!(
        e.starts_with("--knob switch_cpus=[0: the value is not TOML ("),
        "{e}"
    );
    assert!(e.contains("quote a string"), "{e}");
    assert!(refused("coalesce=static 32").contains("not TOML"));
    // A second knob cannot ride in on a newline.
    assert!(refused("switch_budget=1\nlro = false").contains("not TOML"));
    let e =
        KnobOverride::parse_all(&["endpoints=vnio", "lro=false", "endpoints=dpdk"]).unwrap_err();
    assert_eq!(
        e,
        KnobOverrideError::Twice {
            key: "endpoints".into(),
            first: "\"vnio\"".into(),
            second: "\"dpdk\"".into(),
        }
    );
    assert_eq!(
        e.to_string(),
        "--knob endpoints is given twice (\"vnio\", then \"dpdk\"): give it once"
    );
}

#[test]
fn a_wrong_type_reads_as_it_would_in_a_file() {
    // serde's message, as `[knobs]` in a file gives it (after the file's
    // line and column).
    let in_file = |line: &str| {
        let text = TWO.replace("busy_poll_us = 16", line);
        let e = scenario::parse("two.toml", &text).unwrap_err().to_string();
        e.split_once(": ").unwrap().1.to_owned()
    };
    for (flag, line) in [
        ("endpoints=dppk", "endpoints = \"dppk\""),
        ("switch_cpus=0", "switch_cpus = 0"),
        ("instrument=true", "instrument = true"),
        ("switch_budget=-1", "switch_budget = -1"),
        ("port_offloads={a=1}", "port_offloads = { a = 1 }"),
    ] {
        let e = refused(flag);
        assert_eq!(e, format!("--knob {flag}: {}", in_file(line)), "{flag}");
    }
    assert!(refused("endpoints=dppk").contains("unknown variant `dppk`, expected `vnio` or `dpdk`"));
}

#[test]
fn an_override_wins_in_every_configuration_the_run_measures() {
    let s = two();
    let o = with(&["busy_poll_us=32", "rx_timestamp=true"]);
    let run = scenario::with_knobs("two.toml", &s, &o).unwrap();
    for c in ["sw", "sw2", "br"] {
        assert_eq!(knobs_of(&run, c).busy_poll_us, Some(32), "{c}");
        assert_eq!(knobs_of(&run, c).rx_timestamp, Some(true), "{c}");
    }
    // The scenario's own [knobs] and everything else stay as written.
    assert_eq!(run.knobs, s.knobs);
    assert_eq!(run.workloads, s.workloads);
    // What each override replaced, read from the file.
    let busy = &o.knobs[0];
    assert_eq!(
        busy.replaces(&s, &o),
        ["16 in [knobs]", "8 in configuration `sw`"]
    );
    assert_eq!(
        busy.describe(&s, &o),
        "busy_poll_us = 32 (--knob, over 16 in [knobs], 8 in configuration `sw`)"
    );
    assert_eq!(
        o.knobs[1].describe(&s, &o),
        "rx_timestamp = true (--knob; unset in the file)"
    );
    // No override: the scenario as written.
    assert_eq!(
        scenario::with_knobs("two.toml", &s, &Overrides::default()).unwrap(),
        s
    );
}

#[test]
fn configurations_left_out_keep_the_files_knobs() {
    let s = two();
    // On the bridge, the switch's budget is refused...
    let all = with(&["switch_budget=32"]);
    let e = scenario::with_knobs("two.toml", &s, &all)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "two.toml with --knob switch_budget=32: configuration `br`: knobs.switch_budget: needs wire = \"switch\""
    );
    // ...so a run of the switches alone sets it there, and nowhere else.
    let switches = Overrides {
        configurations: vec!["sw".into(), "sw2".into()],
        ..all
    };
    let run = scenario::with_knobs("two.toml", &s, &switches).unwrap();
    assert_eq!(knobs_of(&run, "sw").switch_budget, Some(32));
    assert_eq!(knobs_of(&run, "sw2").switch_budget, Some(32));
    assert_eq!(knobs_of(&run, "br"), knobs_of(&s, "br"));
    let only_sw2 = Overrides {
        configurations: vec!["sw2".into()],
        ..with(&["busy_poll_us=1"])
    };
    assert_eq!(
        only_sw2.knobs[0].replaces(&s, &only_sw2),
        ["16 in [knobs]"],
        "sw's own 8 is not run"
    );
}

#[test]
fn an_override_is_checked_as_the_files_knobs_are() {
    let s = two();
    let e = |args: &[&str], only: &[&str]| {
        let o = Overrides {
            configurations: only.iter().map(|c| c.to_string()).collect(),
            ..with(args)
        };
        let e = scenario::with_knobs("two.toml", &s, &o)
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    };
    // A range.
    assert_eq!(
        e(&["switch_budget=0"], &["sw"]),
        "two.toml with --knob switch_budget=0: configuration `sw`: knobs.switch_budget: must be 1 to 4096 frames"
    );
    // A combination with the scenario's hosts and wires.
    assert!(e(&["endpoints=dpdk"], &["br"])
        .contains("configuration `br`: knobs.endpoints: \"dpdk\" drives two vhost-user ports: needs wire = \"switch\", \"ovs-dpdk\" or \"testpmd\", not \"bridge\""));
    // A combination with the other knobs, the flags named together.
    assert_eq!(
        e(&["placement_probe=true", "client_cpus=[1]"], &["sw"]),
        "two.toml with --knob placement_probe=true --knob client_cpus=[1]: configuration `sw`: knobs.placement_probe: needs switch_cpus and client_cpus: the probe runs between the switch's CPU and the client's"
    );
    // The shipped anchors refuse busy-polling knobs on the DPDK switches.
    let anchors = Overrides {
        knobs: KnobOverride::parse_all(&["switch_busy_poll=false"]).unwrap(),
        ..Default::default()
    };
    let e = session::expand("switch-anchors", &anchors).unwrap_err();
    assert!(matches!(e, LabError::Scenario(_)), "{e:?}");
    assert!(e.to_string().starts_with(
        "shipped:switch-anchors with --knob switch_busy_poll=false: configuration `ovs-dpdk`: knobs.switch_busy_poll: needs wire = \"switch\""
    ), "{e}");
    let vnio_only = Overrides {
        configurations: vec!["vnio".into()],
        ..anchors
    };
    session::expand("switch-anchors", &vnio_only).unwrap();
}

#[test]
fn a_prepared_run_says_what_each_knob_replaces() {
    let o = with(&["endpoints=vnio"]);
    let prepared = session::prepare("switch-anchors", &o).unwrap();
    assert_eq!(prepared.overrides, o, "stored with the run");
    assert!(
        prepared.notes.contains(
            &"vnio lab: switch-anchors: knob endpoints = \"vnio\" (--knob, over \"dpdk\" in [knobs])"
                .to_string()
        ),
        "{:?}",
        prepared.notes
    );
    // A set: every scenario of it runs with the knob.
    let e = session::expand("quick", &with(&["busy_poll_us=50"])).unwrap();
    assert!(e.members.len() > 3);
    for m in &e.members {
        for c in &m.scenario.configurations {
            let k = m.scenario.knobs.layered(&c.knobs);
            assert_eq!(k.busy_poll_us, Some(50), "{} {}", m.source.name, c.name);
        }
    }
}

#[test]
fn a_run_with_knobs_set_records_them_and_says_so_wherever_it_is_shown() {
    let dir = std::env::temp_dir().join(format!("vnio-lab-knob-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir.join("lab.db")).unwrap();
    let source = scenario::load("switch-anchors").unwrap();
    let LabFile::Scenario(file) = &source.file else {
        panic!("a set")
    };
    let o = Overrides {
        quick: true,
        ..with(&["endpoints=vnio", "switch_cpus=[0]"])
    };
    let s = scenario::with_knobs(&source.origin, file, &o).unwrap();
    let plan = Plan::new(&s, &o, &Capabilities::current()).unwrap();
    let plain = store
        .begin_run(
            "switch-anchors",
            &s.title,
            "v-test",
            &Environment::default(),
            &Overrides::default(),
        )
        .unwrap();
    store.finish_run(plain, "complete", None).unwrap();
    let id = store
        .begin_run(
            "switch-anchors",
            &s.title,
            "v-test",
            &Environment::default(),
            &o,
        )
        .unwrap();
    store.add_scenario(id, 0, &source, &s, &plan).unwrap();
    store.finish_run(id, "complete", None).unwrap();

    // The listing, the run, its findings.
    let rows = store.runs().unwrap();
    assert_eq!(rows[0].knob_overrides, o.knobs);
    assert!(rows[1].knob_overrides.is_empty());
    let run = store.load(id).unwrap();
    assert_eq!(run.overrides, o);
    assert_eq!(run.scenarios[0].text, source.text, "the file as written");
    let f = findings::judge_run(&run);
    assert_eq!(f.knob_overrides, o.knobs);
    let json = serde_json::to_value(&f).unwrap();
    assert_eq!(
        json["knob_overrides"],
        serde_json::json!([
            { "key": "endpoints", "value": "vnio" },
            { "key": "switch_cpus", "value": [0] }
        ])
    );
    let plain_findings = serde_json::to_value(findings::judge_run(&store.load(plain).unwrap()));
    assert!(plain_findings.unwrap().get("knob_overrides").is_none());

    // The report: under the heading, in the scenario's section with what
    // the file said, and with the other overrides.
    let html = report::render(&run);
    let banner = html.find("Knobs overridden for this run").unwrap();
    assert!(banner < html.find("verdicts of this run").unwrap_or(html.len()));
    assert!(html.contains(
        "endpoints = &quot;vnio&quot; (--knob, over &quot;dpdk&quot; in [knobs]); switch_cpus = [0] (--knob, over [0] in [knobs])"
    ), "{html}");
    assert!(html.contains("--quick, knobs endpoints = &quot;vnio&quot;, switch_cpus = [0]"));
    let plain_html = report::render(&store.load(plain).unwrap());
    assert!(!plain_html.contains("Knobs overridden"));
    assert!(plain_html.contains("none (the scenario as written)"));

    // Runs stored before knobs could be overridden read back with none.
    let old: Overrides = serde_json::from_str(
        r#"{"duration":null,"warmup":null,"iterations":null,"quick":false,"configurations":[]}"#,
    )
    .unwrap();
    assert!(old.knobs.is_empty());
    assert!(!serde_json::to_string(&old).unwrap().contains("knobs"));
    let _ = std::fs::remove_dir_all(&dir);
}
