//! Scenario files: parsing, validation messages, the shipped library, and
//! sweep expansion into a plan. No root needed.

use std::time::Duration;

use vnio_lab::scenario::{
    self, humantime, Capabilities, LabFile, Overrides, Plan, Scenario, SweepParam, SHIPPED,
};

const MINIMAL: &str = r#"
title = "t"
maps_to = "m"

[[host]]
name = "client"

[[host]]
name = "server"

[[configuration]]
name = "native"
wire = "veth"

[[workload]]
name = "rr"
kind = "rr"
from = "client"
to = "server"
"#;

fn scenario(text: &str) -> Scenario {
    match scenario::parse("test.toml", text).unwrap() {
        LabFile::Scenario(s) => *s,
        LabFile::Set(_) => panic!("a set"),
    }
}

fn error(text: &str) -> String {
    scenario::parse("test.toml", text).unwrap_err().to_string()
}

#[test]
fn every_shipped_scenario_parses_and_plans() {
    assert!(SHIPPED.len() >= 8);
    let caps = Capabilities::current();
    for s in SHIPPED {
        let source = scenario::load(s.name).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        assert_eq!(source.name, s.name);
        match source.file {
            LabFile::Set(set) => {
                assert!(s.is_set());
                for name in &set.scenarios {
                    assert!(scenario::shipped(name).is_some(), "{name}");
                }
            }
            LabFile::Scenario(sc) => {
                assert!(!s.is_set());
                // Every shipped scenario says what it maps to and what this
                // machine cannot do, in its header comment and its fields.
                assert!(s.text.starts_with("# "), "{} has a header comment", s.name);
                assert!(sc.cannot.is_some(), "{}", s.name);
                let plan = Plan::new(&sc, &Overrides::default(), &caps).unwrap();
                assert!(!plan.points.is_empty());
                assert!(plan.estimate() > Duration::ZERO);
            }
        }
    }
}

#[test]
fn the_quick_set_can_run_something_of_every_scenario() {
    let caps = Capabilities::current();
    let LabFile::Set(set) = scenario::load("quick").unwrap().file else {
        panic!("quick is a set");
    };
    for name in &set.scenarios {
        let LabFile::Scenario(s) = scenario::load(name).unwrap().file else {
            panic!("{name} is a scenario");
        };
        let plan = Plan::new(&s, &Overrides::default(), &caps).unwrap();
        assert!(
            plan.missing.len() < plan.configurations.len(),
            "{name}: nothing runnable: {:?}",
            plan.missing
        );
        assert!(plan.points.iter().any(|p| p.skip.is_none()), "{name}");
    }
}

#[test]
fn latency_modes_runs_every_policy_and_builds_without_them_are_told_why() {
    let LabFile::Scenario(s) = scenario::load("latency-modes").unwrap().file else {
        panic!()
    };
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    assert!(plan.missing.is_empty(), "{:?}", plan.missing);
    let names: Vec<&str> = plan
        .configurations
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["default", "coalesce-off", "latency-high", "direct"]);
    // A build without direct or latency-high ports refuses those, saying so.
    let older = Capabilities {
        latency_high: false,
        direct: false,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &Overrides::default(), &older).unwrap();
    let refused: Vec<&str> = plan.missing.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(refused, ["latency-high", "direct"]);
    assert!(plan.missing[0].1[0].contains("latency-high"));
    assert!(plan.missing[1].1[0].contains("direct"));
}

#[test]
fn guest_scenarios_plan_their_boots_and_builds_without_guests_refuse_them() {
    for name in ["vm-vm", "vm-native"] {
        let LabFile::Scenario(s) = scenario::load(name).unwrap().file else {
            panic!()
        };
        let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
        assert!(plan.missing.is_empty(), "{name}: {:?}", plan.missing);
        assert!(plan.has_vm_hosts());
        // Every configuration but the native reference boots guests.
        assert_eq!(plan.guest_configurations, plan.configurations.len() - 1);
        assert!(plan.points.iter().all(|p| p.skip.is_none()), "{name}");
        // A few minutes under TCG, boots included.
        assert!(plan.estimate() < Duration::from_secs(300), "{name}");
        let native = Overrides {
            configurations: vec!["native".into()],
            ..Default::default()
        };
        assert!(!Plan::new(&s, &native, &Capabilities::current())
            .unwrap()
            .has_vm_hosts());
        let no_vm = Capabilities {
            vm: false,
            ..Capabilities::current()
        };
        let plan = Plan::new(&s, &Overrides::default(), &no_vm).unwrap();
        assert_eq!(plan.missing.len(), plan.configurations.len() - 1, "{name}");
        assert!(plan.missing[0].1[0].contains("is a VM"));
    }
}

#[test]
fn vm_hosts_and_direct_ports_are_checked_with_their_reasons() {
    let vm = MINIMAL.replace("name = \"server\"", "name = \"server\"\nkind = \"vm\"");
    assert!(error(&vm).contains("a VM host needs wire = \"switch\""));
    let switch = vm.replace("wire = \"veth\"", "wire = \"switch\"");
    scenario(&switch);
    scenario(&vm.replace("wire = \"veth\"", "wire = \"bridge\""));
    let pinned = vm.replace(
        "wire = \"veth\"",
        "wire = \"switch\"\nknobs = { agent_cpus = [1] }",
    );
    assert!(error(&pinned).contains("a guest has its own"));
    // A VM client and a poll-mode target do not speak the same protocol.
    let mixed = MINIMAL
        .replace("name = \"client\"", "name = \"client\"\nkind = \"vm\"")
        .replace(
            "wire = \"veth\"",
            "wire = \"switch\"\nhosts = { server = \"poll-mode\" }",
        );
    let s = scenario(&mixed);
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    assert!(plan.points[0]
        .skip
        .as_deref()
        .unwrap()
        .contains("poll-mode target"));
    // Direct ports: vhost-user clients, and an uplink to bind to.
    let direct = MINIMAL
        .replace(
            "name = \"client\"",
            "name = \"client\"\nkind = \"poll-mode\"",
        )
        .replace(
            "wire = \"veth\"",
            "wire = \"switch\"\nknobs = { port_policy = \"direct\" }",
        )
        .replace("kind = \"rr\"", "kind = \"rr\"\nprotocol = \"udp\"");
    assert!(error(&direct).contains("the scenario needs a remote host"));
    let remote = direct.replace("name = \"server\"", "name = \"server\"\nremote = true");
    scenario(&remote);
    let tap = remote.replace(
        "name = \"client\"\nkind = \"poll-mode\"",
        "name = \"client\"",
    );
    assert!(error(&tap).contains("\"direct\" applies to vhost-user ports"));
}

#[test]
fn poll_mode_points_run_udp_and_icmp_only_and_say_why_not_the_rest() {
    let LabFile::Scenario(s) = scenario::load("native-bridge-switch").unwrap().file else {
        panic!()
    };
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let runs = |cfg: &str| -> Vec<(String, bool)> {
        plan.points
            .iter()
            .filter(|p| p.configuration == cfg)
            .map(|p| (p.workload.name.clone(), p.skip.is_none()))
            .collect()
    };
    let named = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
        v.iter().map(|(n, b)| (n.to_string(), *b)).collect()
    };
    // As the server: ping and UDP echo.
    assert_eq!(
        runs("switch-poll-server"),
        named(&[("ping", true), ("rr-tcp", false), ("rr-udp", true)])
    );
    // As the client: UDP request-response through `vnio rr --via`.
    assert_eq!(
        runs("switch-poll-client"),
        named(&[("ping", false), ("rr-tcp", false), ("rr-udp", true)])
    );
    for p in plan.points.iter().filter(|p| p.skip.is_some()) {
        assert!(p.skip.as_ref().unwrap().contains("poll-mode"), "{p:?}");
    }
    assert!(plan
        .points
        .iter()
        .filter(|p| !p.configuration.starts_with("switch-poll"))
        .all(|p| p.skip.is_none()));
    // Without the --via client in a build, the client points say so.
    let old = Capabilities {
        poll_mode_client: false,
        ..Capabilities::current()
    };
    let plan = Plan::new(&s, &Overrides::default(), &old).unwrap();
    let p = plan
        .points
        .iter()
        .find(|p| p.configuration == "switch-poll-client" && p.workload.name == "rr-udp")
        .unwrap();
    assert!(p.skip.as_ref().unwrap().contains("--via"));
}

#[test]
fn contention_generators_need_namespace_hosts() {
    let LabFile::Scenario(_) = scenario::load("cpu-contention").unwrap().file else {
        panic!()
    };
    let text = scenario::shipped("cpu-contention").unwrap().text.replace(
        "name = \"switch\"\nwire = \"switch\"",
        "name = \"switch\"\nwire = \"switch\"\nhosts = { neighbour = \"poll-mode\" }",
    );
    let e = error(&text);
    assert!(
        e.contains(
            "contention.loads.on: host `neighbour` is a poll-mode in configuration `switch`"
        ),
        "{e}"
    );
}

#[test]
fn minimal_scenario_gets_the_studies_defaults() {
    let s = scenario(MINIMAL);
    assert_eq!(s.run.iterations, 3);
    assert_eq!(s.run.duration, Duration::from_secs(10));
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    assert_eq!(plan.points.len(), 1);
    let w = &plan.points[0].workload;
    assert_eq!(
        (w.size, w.response_size, w.burst, w.sessions),
        (256, 256, 1, 1)
    );
    assert!(w.nodelay && w.dirty);
    assert!(plan.points[0].contention.is_idle());
    assert_eq!(w.ci_goal(), None);
}

#[test]
fn a_workload_may_measure_until_its_percentile_is_known() {
    let text = MINIMAL.replace(
        "kind = \"rr\"",
        "kind = \"rr\"\nci = \"99.9:5%\"\nmax_duration = \"2m\"",
    );
    let s = scenario(&text);
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let goal = plan.points[0].workload.ci_goal().unwrap();
    assert_eq!((goal.percentile, goal.width), (99.9, 0.05));
    assert_eq!(goal.max_duration, Duration::from_secs(120));
    assert!(plan.points[0]
        .workload
        .describe()
        .ends_with(" until ci 99.9:5%"));
    // Without max_duration: a minute.
    let s = scenario(&MINIMAL.replace("kind = \"rr\"", "kind = \"rr\"\nci = \"99:2%\""));
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let goal = plan.points[0].workload.ci_goal().unwrap();
    assert_eq!(goal.max_duration, Duration::from_secs(60));
}

#[test]
fn pods_are_timed_through_cni_attachments_only() {
    let attach = MINIMAL.replace(
        "[[workload]]",
        "[knobs]\nattach = \"cni\"\n\n[[workload]]\nname = \"add\"\nkind = \"attach\"\nfrom = \"client\"\n\n[[workload]]",
    )
    .replace("wire = \"veth\"", "wire = \"bridge\"");
    let s = scenario(&attach);
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let add = &plan.points[0];
    assert_eq!((add.workload.pods, add.skip.as_deref()), (100, None));
    assert!(
        add.workload.describe().contains("100 pods"),
        "{}",
        add.workload.describe()
    );
    assert_eq!(plan.points[1].workload.pods, 0, "rr has no pods");
    let quick = Overrides {
        quick: true,
        ..Default::default()
    };
    let plan = Plan::new(&s, &quick, &Capabilities::current()).unwrap();
    assert_eq!(plan.points[0].workload.pods, 5);
    // Hosts the lab attaches itself: nothing to time, said so.
    let s = scenario(&attach.replace("attach = \"cni\"", ""));
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let why = plan.points[0].skip.as_deref().unwrap();
    assert!(why.contains("attach = \"cni\""), "{why}");
    // Fields of the other kinds, and `to`, are refused; pods range.
    for (from, to, want) in [
        (
            "from = \"client\"\n\n",
            "from = \"client\"\nto = \"server\"\n\n",
            "workload `add`: to: does not apply to attach workloads",
        ),
        (
            "kind = \"attach\"",
            "kind = \"detach\"\nsize = 64",
            "workload `add`: size: does not apply to detach workloads",
        ),
        (
            "kind = \"attach\"",
            "kind = \"attach\"\npods = 0",
            "workload `add`: pods: must be 1 to 1000",
        ),
        (
            "kind = \"rr\"",
            "kind = \"rr\"\npods = 5",
            "workload `rr`: pods: does not apply to rr workloads",
        ),
    ] {
        let e = error(&attach.replacen(from, to, 1));
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
}

#[test]
fn syntax_errors_name_file_line_and_field() {
    let text = MINIMAL.replace("to = \"server\"", "to = \"server\"\nsesions = 2");
    let e = error(&text);
    assert!(e.starts_with("test.toml:"), "{e}");
    assert!(e.contains("unknown field `sesions`"), "{e}");
    let line = text.lines().position(|l| l.starts_with("sesions")).unwrap() + 1;
    assert!(e.starts_with(&format!("test.toml:{line}:")), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");

    let e = error(&MINIMAL.replace("wire = \"veth\"", "wire = \"ethernet\""));
    assert!(e.contains("unknown variant `ethernet`"), "{e}");
    let e = error("title = ");
    assert!(e.starts_with("test.toml:1:"), "{e}");
    let e = error(&MINIMAL.replace("[run]", "").replace(
        "title = \"t\"",
        "title = \"t\"\n[run]\nduration = \"10 fortnights\"",
    ));
    assert!(e.contains("unknown unit"), "{e}");
}

#[test]
fn validation_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "from = \"client\"",
            "from = \"clint\"",
            "workload `rr`: from: no host named \"clint\" (hosts: client, server)",
        ),
        (
            "to = \"server\"",
            "to = \"client\"",
            "workload `rr`: to: \"client\" is also the client",
        ),
        (
            "name = \"client\"",
            "name = \"Client\"",
            "host.name: \"Client\" must be 1 to 12 lower-case letters and digits",
        ),
        (
            "kind = \"rr\"",
            "kind = \"ping\"\nburst = 2",
            "workload `rr`: burst: does not apply to ping workloads",
        ),
        (
            "kind = \"rr\"",
            "kind = \"rr\"\nprotocol = \"udp\"\nsize = 8",
            "workload `rr`: size: 8 bytes is out of range",
        ),
        (
            "kind = \"rr\"",
            "kind = \"rr\"\nsessions = 0",
            "workload `rr`: sessions: must be 1 to 64",
        ),
        (
            "kind = \"rr\"",
            "kind = \"stream\"\nrate = 1000",
            "workload `rr`: rate: paces UDP streams only",
        ),
        (
            "kind = \"rr\"",
            "kind = \"stream\"\nci = \"99:5%\"",
            "workload `rr`: ci: does not apply to stream workloads",
        ),
        (
            "kind = \"rr\"",
            "kind = \"rr\"\nci = \"99\"",
            "workload `rr`: ci: \"99\": expected PERCENTILE:WIDTH",
        ),
        (
            "kind = \"rr\"",
            "kind = \"rr\"\nmax_duration = \"30s\"",
            "workload `rr`: max_duration: applies with ci only",
        ),
    ];
    for (from, to, want) in cases {
        let e = error(&MINIMAL.replacen(from, to, 1));
        assert!(e.starts_with("test.toml: "), "{e}");
        assert!(e.contains(want), "want {want:?} in {e:?}");
    }
    // Switch knobs are checked by the switch's own parser, and need the switch.
    let bad = MINIMAL.replace(
        "wire = \"veth\"",
        "wire = \"switch\"\nknobs = { coalesce = \"sometimes\" }",
    );
    let e = error(&bad);
    assert!(e.contains("configuration `native`: knobs.coalesce:"), "{e}");
    let veth = MINIMAL.replace(
        "wire = \"veth\"",
        "wire = \"veth\"\nknobs = { coalesce = \"off\" }",
    );
    assert!(error(&veth).contains("needs wire = \"switch\""));
    // Remote hosts sit behind an uplink: not on a veth, not poll-mode.
    let remote = MINIMAL.replace("name = \"server\"", "name = \"server\"\nremote = true");
    assert!(error(&remote).contains("a veth wire has no uplink"));
    let both = remote.replace("name = \"client\"", "name = \"client\"\nremote = true");
    assert!(error(&both).contains("at least one must be on the wire"));
    let bridged = remote.replace("wire = \"veth\"", "wire = \"bridge\"");
    scenario(&bridged);
    let polled = remote.replace(
        "wire = \"veth\"",
        "wire = \"switch\"\nhosts = { server = \"poll-mode\" }",
    );
    assert!(error(&polled).contains("a remote host (behind the uplink) is a namespace"));
    let queues = MINIMAL.replace(
        "wire = \"veth\"",
        "wire = \"switch\"\nknobs = { uplink_queues = 0 }",
    );
    assert!(error(&queues).contains("uplink_queues: must be 1 to 64"));
    // A veth joins two hosts only.
    let three = MINIMAL.replace(
        "[[configuration]]",
        "[[host]]\nname = \"third\"\n\n[[configuration]]",
    );
    assert!(error(&three).contains("a veth joins exactly two hosts"));
    // A poll-mode host needs the switch.
    let poll = MINIMAL.replace(
        "wire = \"veth\"",
        "wire = \"bridge\"\nhosts = { server = \"poll-mode\" }",
    );
    assert!(error(&poll).contains("needs wire = \"switch\""));
    // Sweeping contention that is not declared.
    let sweep = format!("{MINIMAL}\n[sweep]\nparameter = \"loads\"\nvalues = [0, 1]\n");
    assert!(error(&sweep).contains("needs a [contention.loads]"));
    // A swept value out of range names the value.
    let sweep = format!("{MINIMAL}\n[sweep]\nparameter = \"burst\"\nvalues = [1, 0]\n");
    let e = error(&sweep);
    assert!(
        e.contains("value 0") && e.contains("burst: must be at least 1"),
        "{e}"
    );
}

#[test]
fn unknown_names_and_missing_files_are_one_line() {
    let e = scenario::load("no-such-scenario").unwrap_err().to_string();
    assert!(
        e.contains("no scenario named \"no-such-scenario\"") && e.contains("quick"),
        "{e}"
    );
    let e = scenario::load("/nonexistent/x.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cannot read scenario /nonexistent/x.toml"),
        "{e}"
    );
    let e = scenario::parse("s.toml", "[set]\ntitle = \"x\"\nscenarios = [\"nope\"]\n")
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "s.toml: set.scenarios: \"nope\" is not a shipped scenario"
    );
}

#[test]
fn sweep_expands_configurations_then_values_then_workloads() {
    let text = MINIMAL.replace(
        "[[configuration]]\nname = \"native\"\nwire = \"veth\"",
        "[[configuration]]\nname = \"native\"\nwire = \"veth\"\n\n[[configuration]]\nname = \"bridge\"\nwire = \"bridge\"",
    ) + "\n[[workload]]\nname = \"p\"\nkind = \"ping\"\nfrom = \"client\"\nto = [\"server\"]\n\n[sweep]\nparameter = \"size\"\nvalues = [64, 512, 1024]\n";
    let s = scenario(&text);
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    assert_eq!(plan.points.len(), 2 * 3 * 2);
    let order: Vec<(String, u64, String)> = plan
        .points
        .iter()
        .map(|p| {
            (
                p.configuration.clone(),
                p.sweep.unwrap().1,
                p.workload.name.clone(),
            )
        })
        .collect();
    assert_eq!(order[0], ("native".into(), 64, "rr".into()));
    assert_eq!(order[1], ("native".into(), 64, "p".into()));
    assert_eq!(order[2], ("native".into(), 512, "rr".into()));
    assert_eq!(order[6], ("bridge".into(), 64, "rr".into()));
    assert!(plan.points.iter().enumerate().all(|(i, p)| p.seq == i));
    // The swept size lands in both directions of rr and in ping's payload.
    let p = &plan.points[3];
    assert_eq!(p.sweep, Some((SweepParam::Size, 512)));
    assert_eq!(p.workload.size, 512);
    let rr = &plan.points[2].workload;
    assert_eq!((rr.size, rr.response_size), (512, 512));

    // --quick: short, one iteration, first and last values only.
    let quick = Overrides {
        quick: true,
        ..Default::default()
    };
    let plan = Plan::new(&s, &quick, &Capabilities::current()).unwrap();
    assert_eq!(plan.points.len(), 2 * 2 * 2);
    assert_eq!(plan.run.iterations, 1);
    assert_eq!(plan.run.duration, Duration::from_secs(1));
    // Explicit values win over --quick; a configuration filter applies.
    let o = Overrides {
        quick: true,
        duration: Some(Duration::from_millis(300)),
        configurations: vec!["bridge".into()],
        ..Default::default()
    };
    let plan = Plan::new(&s, &o, &Capabilities::current()).unwrap();
    assert_eq!(plan.run.duration, Duration::from_millis(300));
    assert!(plan.points.iter().all(|p| p.configuration == "bridge"));
    let bad = Overrides {
        configurations: vec!["nope".into()],
        ..Default::default()
    };
    let e = Plan::new(&s, &bad, &Capabilities::current()).unwrap_err();
    assert_eq!(
        e,
        "no configuration \"nope\" in this scenario (it has native, bridge)"
    );
}

#[test]
fn placement_seconds_need_interleaving_and_a_cap_from_the_iterations() {
    let with_run = |run: &str| MINIMAL.replacen("[[host]]", &format!("[run]\n{run}\n[[host]]"), 1);
    let s = scenario(&with_run(
        "iterations = 4\ninterleave = true\nplacement_seconds = 10",
    ));
    assert_eq!(s.run.placement_seconds, 10);
    assert_eq!(s.run.repetition_cap(), 12, "three times the iterations");
    let s = scenario(&with_run(
        "iterations = 4\ninterleave = true\nplacement_seconds = 10\nmax_iterations = 6",
    ));
    assert_eq!(s.run.repetition_cap(), 6);
    // Off: the iterations are all there is.
    let plain = scenario(&with_run("iterations = 4\nmax_iterations = 9"));
    assert_eq!(plain.run.repetition_cap(), 4);

    assert_eq!(
        error(&with_run("placement_seconds = 10")),
        "test.toml: run.placement_seconds: needs interleave = true: the repetitions added must reach every configuration alike"
    );
    assert_eq!(
        error(&with_run(
            "iterations = 4\ninterleave = true\nplacement_seconds = 1\nmax_iterations = 3"
        )),
        "test.toml: run.max_iterations: must be from run.iterations to 100"
    );

    // For one run: set, turned off by --quick, and explicit over --quick.
    let caps = Capabilities::current();
    let o = Overrides {
        placement_seconds: Some(5),
        max_iterations: Some(7),
        ..Default::default()
    };
    let plan = Plan::new(&s, &o, &caps).unwrap();
    assert_eq!(
        (plan.run.placement_seconds, plan.run.repetition_cap()),
        (5, 7)
    );
    let quick = Overrides {
        quick: true,
        ..Default::default()
    };
    let plan = Plan::new(&s, &quick, &caps).unwrap();
    assert_eq!(
        (plan.run.placement_seconds, plan.run.repetition_cap()),
        (0, 1)
    );
    let plan = Plan::new(
        &s,
        &Overrides {
            quick: true,
            ..o.clone()
        },
        &caps,
    )
    .unwrap();
    assert_eq!(
        (plan.run.placement_seconds, plan.run.repetition_cap()),
        (5, 7)
    );
    let e = Plan::new(&plain, &o, &caps).unwrap_err();
    assert!(
        e.starts_with("placement seconds need interleaved iterations"),
        "{e}"
    );
}

#[test]
fn contention_sweeps_set_the_count_and_rate() {
    let LabFile::Scenario(s) = scenario::load("cpu-contention").unwrap().file else {
        panic!()
    };
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let counts: Vec<u32> = plan
        .points
        .iter()
        .filter(|p| p.configuration == "bridge" && p.workload.name == "ping")
        .map(|p| p.contention.loads.as_ref().unwrap().count)
        .collect();
    assert_eq!(counts, [0, 2, 4, 8]);
    assert!(plan.points[0].contention.is_idle());
    assert!(!plan.points.last().unwrap().contention.is_idle());

    let LabFile::Scenario(s) = scenario::load("bandwidth-contention").unwrap().file else {
        panic!()
    };
    let plan = Plan::new(&s, &Overrides::default(), &Capabilities::current()).unwrap();
    let rates: Vec<u64> = plan
        .points
        .iter()
        .filter(|p| p.configuration == "switch-separate")
        .map(|p| p.contention.flood.as_ref().unwrap().rate)
        .collect();
    assert_eq!(rates, [0, 50_000, 100_000, 200_000, 400_000]);
}

#[test]
fn durations_parse_and_format() {
    assert_eq!(humantime::parse("10s").unwrap(), Duration::from_secs(10));
    assert_eq!(
        humantime::parse("250ms").unwrap(),
        Duration::from_millis(250)
    );
    assert_eq!(humantime::parse("5m").unwrap(), Duration::from_secs(300));
    assert_eq!(
        humantime::parse("100us").unwrap(),
        Duration::from_micros(100)
    );
    assert!(humantime::parse("soon").is_err());
    assert!(humantime::parse("2d").is_err());
    for d in ["10s", "250ms", "100us"] {
        assert_eq!(humantime::format(humantime::parse(d).unwrap()), d);
    }
}
