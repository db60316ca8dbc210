//! The DPDK endpoints (knob `endpoints = "dpdk"`) in scenario files: the
//! shipped switch-anchors drives its switches with them and `--knob
//! endpoints=vnio` with the lab's own, what the knob refuses when the
//! scenario is loaded and why, and how a machine without DPDK is told. No
//! root needed.

use vnio_lab::scenario::{
    self, Capabilities, Endpoints, KnobOverride, LabFile, Overrides, Plan, Scenario,
};
use vnio_lab::session;

fn shipped(name: &str) -> Scenario {
    match scenario::load(name).unwrap().file {
        LabFile::Scenario(s) => *s,
        LabFile::Set(_) => panic!("a set"),
    }
}

/// switch-anchors as `vnio lab run switch-anchors --knob endpoints=vnio`
/// runs it, and those overrides.
fn with_own_endpoints() -> (Scenario, Overrides) {
    let o = Overrides {
        knobs: KnobOverride::parse_all(&["endpoints=vnio"]).unwrap(),
        ..Default::default()
    };
    let mut expanded = session::expand("switch-anchors", &o).unwrap();
    (expanded.members.remove(0).scenario, o)
}

fn error(text: &str) -> String {
    scenario::parse("test.toml", text).unwrap_err().to_string()
}

const PAIR: &str = r#"
title = "t"
maps_to = "m"
cannot = "c"

[knobs]
endpoints = "dpdk"

[[host]]
name = "a"
kind = "poll-mode"

[[host]]
name = "b"
kind = "poll-mode"

[[configuration]]
name = "sw"
wire = "switch"

[[workload]]
name = "w"
kind = "stream"
from = "a"
to = "b"
protocol = "udp"
size = 22
"#;

#[test]
fn switch_anchors_uses_the_dpdk_endpoints_and_a_knob_the_labs_own() {
    let (dpdk, (own, _)) = (shipped("switch-anchors"), with_own_endpoints());
    assert_eq!(dpdk.knobs.endpoints, Some(Endpoints::Dpdk));
    for c in &own.configurations {
        let knobs = own.knobs.layered(&c.knobs);
        assert_eq!(knobs.endpoints, Some(Endpoints::Vnio), "{}", c.name);
    }
    // Everything else as shipped: the two kinds of endpoint answer the
    // same questions.
    let mut same = own.clone();
    for c in &mut same.configurations {
        c.knobs.endpoints = None;
    }
    assert_eq!(same, dpdk);
    let all = Capabilities {
        ovs_dpdk: true,
        testpmd: true,
        dpdk_endpoints: true,
        ..Capabilities::current()
    };
    for s in [&dpdk, &own] {
        let plan = Plan::new(s, &Overrides::default(), &all).unwrap();
        assert_eq!(plan.points.len(), 9);
        assert!(plan.points.iter().all(|p| p.skip.is_none()), "{plan:?}");
    }
}

#[test]
fn a_machine_without_dpdk_skips_every_point_saying_what_to_install() {
    let s = shipped("switch-anchors");
    let none = Capabilities {
        ovs_dpdk: true,
        testpmd: true,
        dpdk_endpoints: false,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &Overrides::default(), &none).unwrap();
    for p in &plan.points {
        let why = p.skip.as_deref().unwrap_or_default();
        assert!(why.contains("DPDK endpoints"), "{p:?}");
        assert!(!why.contains('\n'), "one line: {why}");
    }
    // The run goes on (nothing is "missing": the points say why).
    assert!(plan.missing.is_empty());
    // The lab's own endpoints need no DPDK.
    let (own, o) = with_own_endpoints();
    let plan = Plan::new(&own, &o, &none).unwrap();
    assert!(plan.points.iter().all(|p| p.skip.is_none()), "{plan:?}");
}

#[test]
fn the_dpdk_endpoints_drive_udp_stream_and_rr_only() {
    scenario::parse("t.toml", PAIR).unwrap();
    let rr = PAIR.replace("kind = \"stream\"", "kind = \"rr\"");
    scenario::parse("t.toml", &rr).unwrap();
    for wire in ["ovs-dpdk", "testpmd"] {
        scenario::parse(
            "t.toml",
            &PAIR.replace("wire = \"switch\"", &format!("wire = \"{wire}\"")),
        )
        .unwrap();
    }
    let cases: &[(&str, &str, &str)] = &[
        (
            "protocol = \"udp\"\nsize = 22",
            "protocol = \"tcp\"",
            "drives UDP streams and UDP rr only (protocol = \"udp\"): workload `w` is stream over TCP",
        ),
        (
            "kind = \"stream\"\nfrom = \"a\"\nto = \"b\"\nprotocol = \"udp\"",
            "kind = \"ping\"\nfrom = \"a\"\nto = \"b\"",
            "workload `w` is ping",
        ),
        (
            "name = \"b\"\nkind = \"poll-mode\"",
            "name = \"b\"",
            "drives a pair of poll-mode hosts: workload `w` involves `b`, a namespace",
        ),
        (
            "size = 22",
            "size = 1500",
            "frames up to 1518 B: workload `w` has size 1500 (at most 1476 B of UDP payload)",
        ),
        (
            "endpoints = \"dpdk\"",
            "endpoints = \"dpdk\"\ninstrument = \"sockperf\"",
            "\"dpdk\" is itself the instrument: leave `instrument` out",
        ),
    ];
    for (from, to, says) in cases {
        assert!(PAIR.contains(from), "{from}");
        let e = error(&PAIR.replacen(from, to, 1));
        assert!(e.contains(says), "{to}: {e}");
        assert!(e.contains("endpoints"), "names the knob: {e}");
    }
    // A misspelt value: the line and the choices.
    let e = error(&PAIR.replace("endpoints = \"dpdk\"", "endpoints = \"dppk\""));
    assert!(
        e.contains("test.toml:7") && e.contains("expected `vnio` or `dpdk`"),
        "{e}"
    );
    // Namespaces on a bridge: no vhost-user port for the program.
    let bridge = PAIR
        .replace("kind = \"poll-mode\"\n", "")
        .replace("wire = \"switch\"", "wire = \"bridge\"");
    let e = error(&bridge);
    assert!(
        e.contains("\"dpdk\" drives two vhost-user ports: needs wire = \"switch\", \"ovs-dpdk\" or \"testpmd\", not \"bridge\""),
        "{e}"
    );
    // A configuration's own knob: checked against that configuration's wire.
    let per_cfg = PAIR.replace("[knobs]\nendpoints = \"dpdk\"\n", "").replace(
        "wire = \"switch\"",
        "wire = \"switch\"\nknobs = { endpoints = \"dpdk\" }",
    );
    scenario::parse("t.toml", &per_cfg).unwrap();
    let e = error(&per_cfg.replace("protocol = \"udp\"\nsize = 22", "protocol = \"tcp\""));
    assert!(e.contains("configuration `sw`: knobs.endpoints"), "{e}");
}
