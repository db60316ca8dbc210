//! The switch knobs the shell benches had and the lab took over (port
//! policy hosts, LRO, egress shares and limits, uplink capacity, budget,
//! testbed CPU): layering, validation messages, and the findings that need
//! `testbed_cpu`. No root needed.

use vnio_lab::scenario::{self, Knobs, LabFile, Scenario};

/// A switch with an uplink: two vNICs on the wire, one host outside.
const UPLINK: &str = r#"
title = "t"
maps_to = "m"

[[host]]
name = "client"
kind = "poll-mode"

[[host]]
name = "neighbour"

[[host]]
name = "server"
remote = true

[[configuration]]
name = "sw"
wire = "switch"
knobs = { KNOBS }

[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
protocol = "udp"
"#;

fn with(knobs: &str) -> String {
    UPLINK.replace("KNOBS", knobs)
}

fn parse(text: &str) -> Result<Scenario, String> {
    match scenario::parse("k.toml", text).map_err(|e| e.to_string())? {
        LabFile::Scenario(s) => Ok(*s),
        LabFile::Set(_) => panic!("a set"),
    }
}

fn error(knobs: &str) -> String {
    parse(&with(knobs)).unwrap_err()
}

#[test]
fn new_knobs_parse_and_a_configuration_wins_over_the_scenario() {
    let s = parse(&with(
        "lro = false, egress_share = { client = 300, neighbour = 100 }, \
         egress_limit_mbit = { client = 20 }, uplink_capacity_mbit = 100, \
         switch_budget = 8, testbed_cpu = true, port_offloads = { client = false }, port_policy = \"latency-high\", \
         port_policy_hosts = [\"neighbour\"]",
    ))
    .unwrap();
    let k = &s.configurations[0].knobs;
    assert_eq!(k.lro, Some(false));
    assert_eq!(k.egress_share.as_ref().unwrap()["client"], 300);
    assert_eq!(k.egress_limit_mbit.as_ref().unwrap()["client"], 20);
    assert_eq!(k.uplink_capacity_mbit, Some(100));
    assert_eq!(k.switch_budget, Some(8));
    assert!(!k.port_offloads.as_ref().unwrap()["client"]);
    assert_eq!(k.testbed_cpu, Some(true));
    assert_eq!(k.policy_hosts(&["client"]), vec!["neighbour"]);
    // Without port_policy_hosts the policy goes to the clients.
    assert_eq!(Knobs::default().policy_hosts(&["client"]), vec!["client"]);
    let base = Knobs {
        lro: Some(true),
        switch_budget: Some(64),
        ..Default::default()
    };
    let over = Knobs {
        lro: Some(false),
        ..Default::default()
    };
    let l = base.layered(&over);
    assert_eq!((l.lro, l.switch_budget), (Some(false), Some(64)));
}

#[test]
fn bad_knobs_are_one_line_naming_the_field() {
    let cases = [
        (
            "egress_share = { client = 0 }",
            "configuration `sw`: knobs.egress_share: client: a share is 1 to 10000, not 0",
        ),
        (
            "egress_share = { clint = 5 }",
            "knobs.egress_share: no host named \"clint\" (hosts: client, neighbour, server)",
        ),
        (
            "egress_limit_mbit = { server = 5 }",
            "knobs.egress_limit_mbit: host `server` has no port on this switch",
        ),
        (
            "egress_limit_mbit = { client = 0 }",
            "knobs.egress_limit_mbit: client: a limit is more than 0 Mbit/s",
        ),
        (
            "port_offloads = { nobody = false }",
            "knobs.port_offloads: no host named \"nobody\"",
        ),
        (
            "uplink_capacity_mbit = 0",
            "knobs.uplink_capacity_mbit: must be more than 0",
        ),
        (
            "switch_budget = 0",
            "knobs.switch_budget: must be 1 to 4096 frames",
        ),
        (
            "port_policy_hosts = [\"client\"]",
            "knobs.port_policy_hosts: names hosts for port_policy, which is not set",
        ),
        (
            "port_policy = \"direct\", port_policy_hosts = [\"neighbour\"]",
            "knobs.port_policy: \"direct\" applies to vhost-user ports: `neighbour` is a namespace on a tap port",
        ),
    ];
    for (knobs, want) in cases {
        let e = error(knobs);
        assert!(e.starts_with("k.toml: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    // Egress settings act on the uplink: no remote host, no uplink.
    let local = with("egress_share = { client = 200 }").replace("remote = true", "");
    let e = parse(&local).unwrap_err();
    assert!(e.contains("the scenario needs a remote host"), "{e}");
    // vnio's switch settings need vnio's switch.
    let bridge = with("lro = true")
        .replace("wire = \"switch\"", "wire = \"bridge\"")
        .replace("kind = \"poll-mode\"", "");
    let e = parse(&bridge).unwrap_err();
    assert!(e.contains("knobs.lro: needs wire = \"switch\""), "{e}");
}

#[test]
fn testbed_statistics_need_testbed_cpu() {
    let finding = r#"
[[finding]]
id = "f"
study = "s"
claim = "c"
workload = "rr"
statistic = "switch-busy"
subject = { configuration = "sw" }
expect = "above"
than = 50
"#;
    let without = format!("{}{finding}", with("uplink_queues = 2"));
    let e = parse(&without).unwrap_err();
    assert!(
        e.contains("finding `f`: subject: switch-busy needs knobs.testbed_cpu = true in configuration `sw`"),
        "{e}"
    );
    let on = format!("{}{finding}", with("testbed_cpu = true"));
    parse(&on).unwrap();
}
