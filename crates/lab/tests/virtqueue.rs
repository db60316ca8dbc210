//! The virtqueue layout (knob `virtqueue`): "split" as before, "packed"
//! offered by the DPDK endpoints (`vnio lab run switch-anchors --knob
//! virtqueue=packed`), and refused in one line wherever it would not reach
//! every ring: the lab's own endpoints, VM hosts, poll-mode hosts no
//! workload drives. No root needed.

use vnio_lab::scenario::{
    self, knob_names, Capabilities, Endpoints, KnobOverride, LabFile, Overrides, Plan, Scenario,
    Virtqueue,
};
use vnio_lab::session;

fn with(args: &[&str]) -> Overrides {
    Overrides {
        knobs: KnobOverride::parse_all(args).unwrap(),
        ..Default::default()
    }
}

fn error(text: &str) -> String {
    let e = scenario::parse("test.toml", text).unwrap_err().to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

fn parsed(text: &str) -> Scenario {
    match scenario::parse("test.toml", text).unwrap() {
        LabFile::Scenario(s) => *s,
        LabFile::Set(_) => panic!("a set"),
    }
}

/// Two poll-mode hosts on vnio's switch, driven by the DPDK program on
/// packed rings.
const PACKED: &str = r#"
title = "t"
maps_to = "m"

[knobs]
endpoints = "dpdk"
virtqueue = "packed"

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
fn switch_anchors_runs_every_switch_on_packed_rings_with_one_knob() {
    let o = with(&["virtqueue=packed"]);
    let mut expanded = session::expand("switch-anchors", &o).unwrap();
    let s = expanded.members.remove(0).scenario;
    for c in &s.configurations {
        let knobs = s.knobs.layered(&c.knobs);
        assert_eq!(knobs.virtqueue, Some(Virtqueue::Packed), "{}", c.name);
        assert_eq!(knobs.endpoints, Some(Endpoints::Dpdk), "{}", c.name);
    }
    let all = Capabilities {
        ovs_dpdk: true,
        testpmd: true,
        dpdk_endpoints: true,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &o, &all).unwrap();
    assert_eq!(plan.points.len(), 9);
    assert!(plan.points.iter().all(|p| p.skip.is_none()), "{plan:?}");
    // As shipped: split, the layout left to its default.
    let LabFile::Scenario(shipped) = scenario::load("switch-anchors").unwrap().file else {
        panic!("a set")
    };
    assert_eq!(shipped.knobs.virtqueue, None);
    assert_eq!(Virtqueue::default(), Virtqueue::Split);
}

#[test]
fn the_knob_reads_split_or_packed() {
    assert!(knob_names().iter().any(|n| n == "virtqueue"));
    let k = KnobOverride::parse("virtqueue=packed").unwrap();
    assert_eq!(k.to_string(), "virtqueue = \"packed\"");
    KnobOverride::parse("virtqueue=split").unwrap();
    let e = KnobOverride::parse("virtqueue=pakced")
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected `split` or `packed`"), "{e}");
    // In a file: the line and the choices.
    let e = error(&PACKED.replace("\"packed\"", "\"ring\""));
    assert!(
        e.contains("test.toml:7") && e.contains("expected `split` or `packed`"),
        "{e}"
    );
    assert_eq!(
        parsed(PACKED).knobs.virtqueue,
        Some(Virtqueue::Packed),
        "packed with the DPDK endpoints on vnio's switch"
    );
    for wire in ["ovs-dpdk", "testpmd"] {
        parsed(&PACKED.replace("wire = \"switch\"", &format!("wire = \"{wire}\"")));
    }
    // Split is what every other configuration has anyway.
    let split = PACKED
        .replace("endpoints = \"dpdk\"\n", "")
        .replace("\"packed\"", "\"split\"");
    parsed(&split);
}

#[test]
fn packed_with_the_labs_own_endpoints_is_refused_saying_what_to_use() {
    let says = "configuration `sw`: knobs.virtqueue: \"packed\" needs endpoints = \"dpdk\": the lab's own endpoints (vnio_switch::endpoint) drive split rings only";
    // Unset (their default) or said.
    for own in ["", "endpoints = \"vnio\"\n"] {
        let e = error(&PACKED.replace("endpoints = \"dpdk\"\n", own));
        assert!(e.ends_with(says), "{e}");
    }
    // Per configuration: the configuration's layering decides.
    let per_cfg = PACKED.replace("endpoints = \"dpdk\"\n", "").replace(
        "wire = \"switch\"",
        "wire = \"switch\"\nknobs = { endpoints = \"dpdk\" }",
    );
    parsed(&per_cfg);
    // From the command line: the same line, the origin naming the flags.
    let o = with(&["endpoints=vnio", "virtqueue=packed"]);
    let e = session::expand("switch-anchors", &o)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("with --knob endpoints=\"vnio\" --knob virtqueue=\"packed\"")
            && e.contains("knobs.virtqueue: \"packed\" needs endpoints = \"dpdk\""),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
}

#[test]
fn packed_is_refused_where_it_would_miss_a_ring() {
    // Namespaces on a bridge have no virtqueue: the endpoints' own check
    // says so first.
    let bridge = PACKED
        .replace("kind = \"poll-mode\"\n", "")
        .replace("wire = \"switch\"", "wire = \"bridge\"");
    let e = error(&bridge);
    assert!(
        e.contains("knobs.endpoints: \"dpdk\" drives two vhost-user ports"),
        "{e}"
    );
    let bridge_own = bridge.replace("endpoints = \"dpdk\"\n", "");
    let e = error(&bridge_own);
    assert!(
        e.contains("knobs.virtqueue: \"packed\" needs endpoints = \"dpdk\""),
        "{e}"
    );

    // A third poll-mode host no workload names: the lab's own endpoint
    // answers for it, on split rings.
    let third = PACKED.replace(
        "[[configuration]]",
        "[[host]]\nname = \"c\"\nkind = \"poll-mode\"\n\n[[configuration]]",
    );
    let e = error(&third);
    assert!(
        e.ends_with("configuration `sw`: knobs.virtqueue: \"packed\" sets the DPDK endpoints' rings only: host `c` is in no workload: it answers as the lab's own endpoint, whose rings are split"),
        "{e}"
    );
    // A guest: QEMU's NIC.
    let guest = third.replace(
        "name = \"c\"\nkind = \"poll-mode\"",
        "name = \"c\"\nkind = \"vm\"",
    );
    let e = error(&guest);
    assert!(
        e.ends_with("host `c` is a VM: its NIC is QEMU's, which the knob does not set"),
        "{e}"
    );
    // The same host made a namespace in that configuration: a tap has no
    // virtqueue to miss.
    let ns = third.replace(
        "wire = \"switch\"",
        "wire = \"switch\"\nhosts = { c = \"namespace\" }",
    );
    parsed(&ns);
}
