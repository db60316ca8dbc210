//! The anchor wires (OVS-DPDK, testpmd) and poll-mode pairs in scenario
//! files: what they accept, what they refuse and why, and how a machine
//! without an anchor switch is told. No root needed.

use vnio_lab::scenario::{self, Capabilities, LabFile, Overrides, Plan, Scenario};

fn anchors() -> Scenario {
    match scenario::load("switch-anchors").unwrap().file {
        LabFile::Scenario(s) => *s,
        LabFile::Set(_) => panic!("a set"),
    }
}

fn error(text: &str) -> String {
    scenario::parse("test.toml", text).unwrap_err().to_string()
}

const PAIR: &str = r#"
title = "t"
maps_to = "m"
cannot = "c"

[knobs]
switch_cpus = [1]

[[host]]
name = "a"
kind = "poll-mode"

[[host]]
name = "b"
kind = "poll-mode"

[[configuration]]
name = "tp"
wire = "testpmd"

[[workload]]
name = "w"
kind = "stream"
from = "a"
to = "b"
protocol = "udp"
size = 22
"#;

#[test]
fn switch_anchors_runs_three_switches_times_three_workloads() {
    let s = anchors();
    let all = Capabilities {
        ovs_dpdk: true,
        testpmd: true,
        dpdk_endpoints: true,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &Overrides::default(), &all).unwrap();
    assert_eq!(plan.points.len(), 9);
    assert!(plan.points.iter().all(|p| p.skip.is_none()), "{plan:?}");
    assert!(plan.missing.is_empty());
    // vnio against each anchor: both rates, the round trip's p50 and p99.
    assert_eq!(s.findings.len(), 8);
}

#[test]
fn a_machine_without_an_anchor_switch_skips_it_with_the_package_to_install() {
    let s = anchors();
    let no_ovs = Capabilities {
        ovs_dpdk: false,
        testpmd: true,
        dpdk_endpoints: true,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &Overrides::default(), &no_ovs).unwrap();
    for p in &plan.points {
        match p.configuration.as_str() {
            "ovs-dpdk" => assert!(
                p.skip
                    .as_ref()
                    .is_some_and(|w| w.contains("openvswitch-switch-dpdk")),
                "{p:?}"
            ),
            _ => assert!(p.skip.is_none(), "{p:?}"),
        }
    }
    // The run goes on with the others (nothing is "missing").
    assert!(plan.missing.is_empty());
}

#[test]
fn anchor_wires_and_knobs_are_checked_with_their_reasons() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "name = \"b\"\nkind = \"poll-mode\"",
            "name = \"b\"",
            "configuration `tp`: host `b`: wire = \"testpmd\" joins two poll-mode endpoints",
        ),
        (
            "name = \"tp\"\nwire = \"testpmd\"",
            "name = \"tp\"\nwire = \"testpmd\"\nknobs = { switch_busy_poll = true }",
            "switch_busy_poll: needs wire = \"switch\"",
        ),
        (
            "switch_cpus = [1]",
            "shield = []",
            "knobs.shield: names no CPU",
        ),
        (
            "name = \"tp\"\nwire = \"testpmd\"",
            "name = \"tp\"\nwire = \"veth\"",
            "a poll-mode endpoint needs wire = \"switch\", \"ovs-dpdk\" or \"testpmd\"",
        ),
    ];
    for (from, to, says) in cases {
        assert!(PAIR.contains(from), "{from}");
        let e = error(&PAIR.replacen(from, to, 1));
        assert!(e.contains(says), "{to}: {e}");
    }
    let third = format!("{PAIR}\n[[host]]\nname = \"c\"\nkind = \"poll-mode\"\n");
    assert!(error(&third).contains("needs exactly two hosts, it has 3"));
    // The shield with its CPUs is accepted.
    scenario::parse(
        "t.toml",
        &PAIR.replace("switch_cpus = [1]", "switch_cpus = [1]\nshield = [1]"),
    )
    .unwrap();
}

#[test]
fn a_poll_mode_pair_runs_udp_rate_round_trips_and_tcp_streams_only() {
    let caps = Capabilities {
        testpmd: true,
        ..Capabilities::current()
    };
    let skip = |text: &str| -> Option<String> {
        let LabFile::Scenario(s) = scenario::parse("t.toml", text).unwrap() else {
            panic!()
        };
        let plan = Plan::new(&s, &Overrides::default(), &caps).unwrap();
        plan.points[0].skip.clone()
    };
    assert_eq!(skip(PAIR), None);
    let rr = PAIR.replace("kind = \"stream\"", "kind = \"rr\"");
    assert_eq!(skip(&rr), None);
    // A TCP stream is the lab's own (1448-byte segments, no size).
    let tcp = PAIR
        .replacen("protocol = \"udp\"", "protocol = \"tcp\"", 1)
        .replacen("size = 22\n", "", 1);
    assert_eq!(skip(&tcp), None);
    let tcp_rr = rr.replacen("protocol = \"udp\"", "protocol = \"tcp\"", 1);
    assert!(skip(&tcp_rr)
        .unwrap()
        .contains("UDP rr, UDP stream and TCP stream only"));
    for (from, to, says) in [
        (
            "protocol = \"udp\"",
            "protocol = \"tcp\"",
            "TCP streams of 1448-byte segments (no size)",
        ),
        ("size = 22", "size = 22\nrate = 1000", "no rate"),
        ("size = 22", "size = 1500", "frames up to 1518 B"),
        ("size = 22", "size = 22\nsessions = 2", "one session"),
    ] {
        let why = skip(&PAIR.replacen(from, to, 1)).unwrap_or_default();
        assert!(why.contains(says), "{to}: {why:?}");
    }
    let burst = rr.replacen("size = 22", "size = 22\nburst = 4", 1);
    assert!(skip(&burst).unwrap().contains("one request in flight"));
}

#[test]
fn another_build_of_the_switch_is_a_knob_of_the_vnio_switch_only() {
    let vnio = PAIR.replace("wire = \"testpmd\"", "wire = \"switch\"");
    let with = |v: &str| {
        vnio.replace(
            "switch_cpus = [1]",
            &format!("switch_cpus = [1]\nswitch_binary = {v:?}"),
        )
    };
    scenario::parse("t.toml", &with("/tmp/before/vnio")).unwrap();
    assert!(error(&with("before/vnio")).contains("must be an absolute path"));
    let rt = |v: u8| {
        vnio.replace(
            "switch_cpus = [1]",
            &format!("switch_cpus = [1]\nswitch_rt_priority = {v}"),
        )
    };
    scenario::parse("t.toml", &rt(50)).unwrap();
    assert!(error(&rt(0)).contains("switch_rt_priority: must be 1 to 99"));
    let tp = PAIR.replace(
        "switch_cpus = [1]",
        "switch_cpus = [1]\nswitch_binary = \"/x/vnio\"",
    );
    assert!(error(&tp).contains("switch_binary: needs wire = \"switch\""));
}

#[test]
fn interleaved_repetitions_merge_into_one_document_per_point() {
    use vnio_lab::runner::{PointOutcome, Status};
    use vnio_measure::result::{Document, Iteration, Measured};
    let s = anchors();
    assert!(s.run.interleave);
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let rep = |rate: f64| {
        let mut d = Document::new("stream", serde_json::json!({}), vec![], Default::default());
        d.iterations.push(Iteration {
            merged: Measured {
                ops_per_s: rate,
                ..Default::default()
            },
            ..Default::default()
        });
        d.conclude();
        PointOutcome {
            point: plan.points[0].clone(),
            status: Status::Ok,
            error: None,
            document: Some(d),
            contention: None,
        }
    };
    let merged = vnio_lab::runner::interleave::merge(vec![rep(3.0), rep(1.0), rep(2.0)]);
    assert_eq!(merged.status, Status::Ok);
    let doc = merged.document.unwrap();
    let idx: Vec<usize> = doc.iterations.iter().map(|i| i.index).collect();
    assert_eq!(idx, [0, 1, 2]);
    // The median repetition is reported.
    assert_eq!(doc.iterations[doc.chosen].merged.ops_per_s, 2.0);
    // A repetition that failed keeps its reason next to the others' data.
    let mut bad = rep(0.0);
    bad.status = Status::Failed;
    bad.document = None;
    bad.error = Some("switch died".into());
    let merged = vnio_lab::runner::interleave::merge(vec![rep(5.0), bad]);
    assert_eq!(merged.status, Status::Ok);
    assert_eq!(merged.error.as_deref(), Some("switch died"));
    assert_eq!(merged.document.unwrap().iterations.len(), 1);
}
