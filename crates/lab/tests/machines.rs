//! Scenarios with hosts on other machines: what they may say, and the
//! one-line errors for what they may not. No root, no SSH needed (the
//! end-to-end run is `crates/vnio/tests/lab_machines.rs`).

use vnio_lab::scenario::{self, LabFile, Scenario};

const ACROSS: &str = r#"
title = "t"
maps_to = "m"

[[machine]]
name = "m1"
ssh = "root@192.0.2.7"
ssh_options = ["Port=2222"]

[[host]]
name = "client"

[[host]]
name = "server"
machine = "m1"

[[configuration]]
name = "wire"
wire = "veth"

[[configuration]]
name = "overlay"
wire = "switch"
hosts = { client = "poll-mode", server = "poll-mode" }

[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
protocol = "udp"
"#;

fn error(text: &str) -> String {
    scenario::parse("test.toml", text).unwrap_err().to_string()
}

#[test]
fn a_scenario_across_machines_parses_and_plans() {
    let LabFile::Scenario(s) = scenario::parse("test.toml", ACROSS).unwrap() else {
        panic!("a set")
    };
    let s: Scenario = *s;
    assert_eq!(s.machines[0].ssh_options, ["Port=2222"]);
    assert_eq!(s.hosts[1].machine.as_deref(), Some("m1"));
    let plan =
        scenario::Plan::new(&s, &Default::default(), &scenario::Capabilities::current()).unwrap();
    // A poll-mode client reaches a far poll-mode endpoint over UDP echo.
    assert!(
        plan.points.iter().all(|p| p.skip.is_none()),
        "{:?}",
        plan.points
    );
}

#[test]
fn bad_machines_fail_in_one_line() {
    let cases = [
        (
            ACROSS.replace("machine = \"m1\"", "machine = \"m2\""),
            "host `server`: machine: no machine named \"m2\" (machines: m1)",
        ),
        (
            ACROSS.replace("ssh = \"root@192.0.2.7\"", "ssh = \"-oProxyCommand=x\""),
            "machine `m1`: ssh: \"-oProxyCommand=x\" is not an SSH destination",
        ),
        (
            ACROSS.replace("\"Port=2222\"", "\"Port 2222\""),
            "machine `m1`: ssh_options: \"Port 2222\" is not Key=Value",
        ),
        (
            ACROSS.replace("name = \"m1\"", "name = \"M1\""),
            "machine.name: \"M1\" must be 1 to 12 lower-case letters and digits",
        ),
        (
            ACROSS.replace("wire = \"veth\"", "wire = \"bridge\""),
            "configuration `wire`: wire: hosts on other machines need wire = \"veth\"",
        ),
        (
            ACROSS.replace("from = \"client\"", "from = \"server\"").replace("to = \"server\"", "to = \"client\""),
            "workload `rr`: from: client `server` is on another machine",
        ),
        (
            ACROSS.replace("name = \"client\"\n", "name = \"client\"\nmachine = \"m1\"\n"),
            "every host is on another machine",
        ),
        (
            ACROSS.replace("hosts = { client = \"poll-mode\", server = \"poll-mode\" }", "hosts = { server = \"vm\" }"),
            "configuration `overlay`: host `server`: on another machine a host is a namespace or poll-mode (not vm)",
        ),
        (
            ACROSS.replace("ssh_options", "ssh_opts"),
            "unknown field `ssh_opts`",
        ),
    ];
    for (text, want) in cases {
        let e = error(&text);
        assert!(e.contains(want), "{e}\n  wanted: {want}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn ssh_options_that_run_commands_need_a_trusted_scenario() {
    use vnio_lab::machine::spec::{check_trust, needs_trust};
    let parse = |opts: &str| {
        let text = ACROSS.replace(
            "ssh_options = [\"Port=2222\"]",
            &format!("ssh_options = [{opts}]"),
        );
        let LabFile::Scenario(s) = scenario::parse("test.toml", &text).unwrap() else {
            panic!("a set")
        };
        *s
    };
    assert_eq!(needs_trust(&parse("\"Port=2222\", \"User=root\"")), None);
    for o in [
        "ProxyCommand=nc %h %p",
        "proxycommand=touch /tmp/x",
        "LocalCommand=id",
        "PermitLocalCommand=yes",
        "KnownHostsCommand=/bin/true",
        "ProxyJump=jump",
        "Match=exec true",
        "Include=/tmp/cfg",
        "PKCS11Provider=/tmp/lib.so",
        "RemoteForward=9999 /run/vnio/control.sock",
        "ForwardAgent=yes",
    ] {
        let s = parse(&format!("\"Port=2222\", {o:?}"));
        assert_eq!(needs_trust(&s), Some(("m1".into(), o.into())));
        let e = check_trust("test.toml", &s, false).unwrap_err();
        assert_eq!(e.lines().count(), 1);
        assert!(
            e.starts_with(&format!("test.toml: machine `m1`: ssh_options {o:?}")),
            "{e}"
        );
        assert!(e.contains("--trust-scenario"), "{e}");
        assert_eq!(check_trust("test.toml", &s, true), Ok(()));
    }
}
