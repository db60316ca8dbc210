//! Unit tests of [`super`].
use super::*;
use crate::coalesce::Coalesce;
use crate::port::SocketMode;
use crate::vlan::VlanMode;

#[test]
fn parses_a_full_file() {
    let c = Config::parse(
        r#"
        [switch]
        control = "/tmp/sw.sock"
        aging_secs = 60

        [[port]]
        name = "vm1"
        kind = "vhost-user"
        socket = "/tmp/vm1.sock"
        vlan = 10
        mac = "02:00:00:00:00:01"
        spoof_guard = true

        [[port]]
        name = "up"
        kind = "vhost-user"
        socket = "/tmp/up.sock"
        mode = "client"
        trunk = [10, 20]
        native_vlan = 10
        coalesce = "static:16:50"
        lro = false
        tx_poll_budget = 1000

        [[port]]
        name = "fast"
        kind = "vhost-user"
        socket = "/tmp/fast.sock"
        latency = "high"
        core = 1
        "#,
    )
    .unwrap();
    let sw = &c.switch;
    let p0 = c.ports[0].policies(sw);
    assert_eq!(p0.coalesce, Coalesce::default());
    assert!(p0.lro);
    assert_eq!(p0.tx_poll_budget, sw.idle_polls);
    let p1 = c.ports[1].policies(sw);
    assert_eq!(p1.coalesce.to_string(), "static:16:50");
    assert_eq!((p1.lro, p1.tx_poll_budget), (false, 1000));
    let p2 = c.ports[2].policies(sw);
    assert_eq!((p2.latency, p2.core), (Latency::High, Some(1)));
    assert_eq!(p2.effective_coalesce(), Coalesce::Off);
    assert!(!p2.effective_lro());
    assert_eq!(c.switch.control, PathBuf::from("/tmp/sw.sock"));
    assert_eq!(c.switch.aging(), Duration::from_secs(60));
    assert_eq!(c.switch.budget, 64);
    let p = c.ports[0].policy().unwrap();
    assert_eq!(p.vlan, VlanMode::Access { vid: 10 });
    assert_eq!(p.spoof_guard, Some("02:00:00:00:00:01".parse().unwrap()));
    assert_eq!(
        c.ports[1].kind.vhost_user().unwrap().mode,
        SocketMode::Client
    );
    assert!(matches!(
        c.ports[1].policy().unwrap().vlan,
        VlanMode::Trunk {
            native: Some(10),
            ..
        }
    ));
}

#[test]
fn parses_fdb_limits() {
    let c = Config::parse(
        "[switch]\nfdb_port_limit = 16\n[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\nfdb_limit = 4096\n",
    )
    .unwrap();
    assert_eq!(c.switch.fdb_port_limit, 16);
    assert_eq!(c.ports[0].policy().unwrap().fdb_limit, Some(4096));
    assert_eq!(
        SwitchConfig::default().fdb_port_limit,
        crate::fdb::DEFAULT_PORT_LIMIT
    );
}

#[test]
fn vxlan_ports_parse_and_check() {
    let c = Config::parse(
        r#"
        [[port]]
        name = "vx"
        kind = "vxlan"
        vni = 42
        local = "10.0.0.1"
        remotes = ["10.0.0.2", "10.0.0.3"]
        ttl = 16
        "#,
    )
    .unwrap();
    let o = c.ports[0].kind.vxlan().unwrap().options();
    assert_eq!(
        (o.vni, o.dstport, o.ttl, o.underlay_mtu),
        (42, 4789, Some(16), 1500)
    );
    assert_eq!(o.remotes.len(), 2);
    let base = "[[port]]\nname = \"vx\"\nkind = \"vxlan\"\n";
    for bad in [
        "local = \"10.0.0.1\"\n",
        "vni = 16777216\nlocal = \"10.0.0.1\"\n",
        "vni = 1\n",
        "vni = 1\nlocal = \"10.0.0.1\"\nremotes = [\"10.0.0.1\"]\n",
        "vni = 1\nlocal = \"10.0.0.1\"\nsocket = \"/s\"\n",
        "vni = 1\nlocal = \"10.0.0.1\"\ndstport = 0\n",
        "vni = 1\nlocal = \"10.0.0.1\"\nevpn = true\nremotes = [\"10.0.0.2\"]\n",
        "vni = 1\nlocal = \"10.0.0.1\"\nevpn = true\naccept = [\"10.0.0.0/8\"]\n",
    ] {
        assert!(Config::parse(&format!("{base}{bad}")).is_err(), "{bad}");
    }
    assert!(
        Config::parse("[[port]]\nname = \"a\"\nkind = \"tap\"\nvni = 1\n").is_err(),
        "vxlan keys on another kind"
    );
    let evpn = Config::parse(&format!(
        "{base}vni = 7\nlocal = \"10.0.0.1\"\nevpn = true\n"
    ))
    .unwrap();
    let o = evpn.ports[0].kind.vxlan().unwrap().options();
    assert!(o.evpn && o.remotes.is_empty());
}

#[test]
fn rejects_bad_ports() {
    assert!(
        Config::parse("[[port]]\nname = \"a\"\nkind = \"vhost-user\"\n").is_err(),
        "no socket"
    );
    assert!(Config::parse(
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\nspoof_guard = true\n"
    )
    .is_err());
    assert!(Config::parse(
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\nvlan = 5000\n"
    )
    .is_err());
    assert!(
        Config::parse("[switch]\nbogus = 1\n").is_err(),
        "unknown keys are refused"
    );
    let err = Config::parse(
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\ncoalesce = \"sometimes\"\n",
    )
    .unwrap_err();
    assert!(
        crate::error_chain(&err).contains("expected off, static"),
        "{}",
        crate::error_chain(&err)
    );
    assert!(Config::parse(
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\ncore = 1\n"
    )
    .is_err());
    assert!(Config::parse("[[port]]\nname = \"t\"\nkind = \"tap\"\nlatency = \"high\"\n").is_err());
}

#[test]
fn cross_connects_parse_and_check() {
    let base = "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/a\"\n\
                [[port]]\nname = \"b\"\nkind = \"vhost-user\"\nsocket = \"/b\"\ncross_connect = \"a\"\n";
    let c = Config::parse(base).unwrap();
    assert_eq!(
        c.ports[1].policy().unwrap().cross_connect.as_deref(),
        Some("a")
    );
    for (extra, why) in [
        ("vlan = 5\n", "not switched"),
        ("share = 10\n", "not switched"),
        ("latency = \"high\"\n", "ordinary latency"),
        ("queues = 2\n", "one queue pair"),
    ] {
        let e = Config::parse(&format!("{base}{extra}")).unwrap_err();
        assert!(
            crate::error_chain(&e).contains(why),
            "{extra}: {}",
            crate::error_chain(&e)
        );
    }
    let own =
        "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/a\"\ncross_connect = \"a\"\n";
    assert!(Config::parse(own).is_err(), "itself");
    let tap = "[[port]]\nname = \"t\"\nkind = \"tap\"\ncross_connect = \"a\"\n";
    assert!(Config::parse(tap).is_err(), "a tap port");
}

#[test]
fn workers_are_one_to_eight() {
    assert_eq!(Config::parse("").unwrap().switch.workers, 1);
    assert_eq!(
        Config::parse("[switch]\nworkers = 2")
            .unwrap()
            .switch
            .workers,
        2
    );
    for bad in [0, 9] {
        let e = Config::parse(&format!("[switch]\nworkers = {bad}")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("workers = {bad}: the switch runs 1 to 8 shared workers")
        );
    }
}

#[test]
fn settings_added_later_are_written_only_when_set() {
    // An older build rejects keys it does not know: a configuration this
    // build writes with those settings at their defaults must not name them.
    let text = toml::to_string(&SwitchConfig::default()).unwrap();
    for key in [
        "mac_move_quiet_ms",
        "mac_flap_hold_secs",
        "drop_event_rate",
        "workers",
        "read_ahead",
        "state",
        "time_in_switch",
    ] {
        assert!(!text.contains(key), "{key} written at its default:\n{text}");
    }
    let set = SwitchConfig {
        mac_move_quiet_ms: 0,
        ..SwitchConfig::default()
    };
    let back: SwitchConfig = toml::from_str(&toml::to_string(&set).unwrap()).unwrap();
    assert_eq!(back, set);
}

#[test]
fn socket_access_is_for_server_sockets_and_checked() {
    let port = |extra: &str| {
        Config::parse(&format!(
            "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/s\"\n{extra}"
        ))
    };
    let c = port("socket_access = { owner = 0, group = \"root\", mode = \"0660\" }\n").unwrap();
    let a = c.ports[0].kind.vhost_user().unwrap().socket_access.as_ref();
    let a = a.unwrap().resolve().unwrap();
    assert_eq!((a.uid, a.gid, a.mode), (Some(0), Some(0), Some(0o660)));
    let e = port("mode = \"client\"\nsocket_access = { mode = \"0660\" }\n").unwrap_err();
    assert!(e.to_string().contains("server-mode"), "{e}");
    let e = port("socket_access = { owner = \"no-such-user-vnio\" }\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("socket_access: owner no-such-user-vnio"),
        "{e}"
    );
    assert!(port("socket_access = { mode = \"0660\", other = 1 }\n").is_err());
}

#[test]
fn zero_queues_fail_at_parse_naming_the_key() {
    for kind in [
        "kind = \"vhost-user\"\nsocket = \"/a\"",
        "kind = \"uplink\"\nifname = \"e\"",
    ] {
        let e =
            Config::parse(&format!("[[port]]\nname = \"a\"\n{kind}\nqueues = 0\n")).unwrap_err();
        let chain = crate::error_chain(&e);
        assert!(chain.contains("`queues` = 0"), "{chain}");
    }
    let json = r#"{"name":"a","kind":"vhost-user","socket":"/a","queues":0}"#;
    let e = serde_json::from_str::<PortSpec>(json)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`queues` = 0"), "{e}");
    let one = r#"{"name":"a","kind":"vhost-user","socket":"/a","queues":3}"#;
    let spec: PortSpec = serde_json::from_str(one).unwrap();
    assert_eq!(spec.queue_count().get(), 3);
    let back = serde_json::to_string(&spec).unwrap();
    assert!(back.contains(r#""queues":3"#), "{back}");
}

#[test]
fn egress_settings_keep_their_top_level_keys() {
    let toml = "[[port]]\nname = \"a\"\nkind = \"vhost-user\"\nsocket = \"/a\"\n\
                share = 5\nlimit_mbps = 10\nreserve_mbps = 2\n";
    let spec = Config::parse(toml).unwrap().ports.remove(0);
    let want = EgressSettings {
        share: Some(5),
        limit_mbps: Some(10),
        reserve_mbps: Some(2),
    };
    assert_eq!(spec.egress, want);
    assert_eq!(spec.egress.policy().unwrap().limit_bps, Some(10_000_000));
    let json = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"name": "a", "kind": "vhost-user", "socket": "/a",
            "mode": "server", "spoof_guard": false,
            "share": 5, "limit_mbps": 10, "reserve_mbps": 2})
    );
    assert_eq!(serde_json::from_value::<PortSpec>(json).unwrap(), spec);
    let back = toml::to_string(&Config {
        switch: SwitchConfig::default(),
        ports: vec![spec.clone()],
    })
    .unwrap();
    assert!(
        back.contains("\nshare = 5\nlimit_mbps = 10\nreserve_mbps = 2\n"),
        "{back}"
    );
    assert_eq!(Config::parse(&back).unwrap().ports, vec![spec]);

    let e = Config::parse(&toml.replace("share = 5", "share = \"x\"")).unwrap_err();
    let chain = crate::error_chain(&e);
    assert!(
        chain.contains("`share`: invalid type: string \"x\""),
        "{chain}"
    );
    let e = serde_json::from_str::<PolicyUpdate>(r#"{"limit_mbps":-1}"#).unwrap_err();
    assert!(e.to_string().contains("`limit_mbps`: invalid value"), "{e}");
    let e = Config::parse(&format!("{toml}bogus = 1\n")).unwrap_err();
    assert!(
        crate::error_chain(&e).contains("unknown field `bogus`"),
        "{}",
        crate::error_chain(&e)
    );
    let e = serde_json::from_str::<PortSpec>(r#"{"name":"a","kind":"tap","sharee":1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `sharee`"), "{e}");
}

#[test]
fn a_policy_update_and_port_info_keep_their_egress_keys() {
    let u: PolicyUpdate = serde_json::from_str(r#"{"lro":false,"limit_mbps":20}"#).unwrap();
    assert_eq!(
        (u.lro, u.egress.limit_mbps, u.egress.share),
        (Some(false), Some(20), None)
    );
    assert_eq!(
        serde_json::to_value(&u).unwrap(),
        serde_json::json!({"lro": false, "limit_mbps": 20})
    );
    let e = serde_json::from_str::<PolicyUpdate>(r#"{"limit":20}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `limit`"), "{e}");
    let info = crate::port_info::EgressInfo {
        settings: EgressSettings {
            share: Some(100),
            limit_mbps: Some(20),
            reserve_mbps: None,
        },
        ..Default::default()
    };
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json, serde_json::json!({"share": 100, "limit_mbps": 20}));
    assert_eq!(
        serde_json::from_value::<crate::port_info::EgressInfo>(json).unwrap(),
        info
    );
}

#[test]
fn an_update_keeps_what_it_does_not_give() {
    let cur = EgressSettings::from(crate::egress::EgressPolicy {
        share: 300,
        limit_bps: Some(50_000_000),
        reserve_bps: None,
    });
    let u = EgressSettings {
        reserve_mbps: Some(10),
        ..Default::default()
    };
    let p = cur.updated(&u).policy().unwrap();
    assert_eq!(
        (p.share, p.limit_bps, p.reserve_bps),
        (300, Some(50_000_000), Some(10_000_000))
    );
    let over = EgressSettings {
        reserve_mbps: Some(60),
        ..Default::default()
    };
    assert!(
        cur.updated(&over).policy().is_err(),
        "a reservation above the limit"
    );
}

#[test]
fn a_key_of_another_kind_is_refused_at_parse_named() {
    for (kind, key) in [
        ("kind = \"tap\"", "socket = \"/s\""),
        ("kind = \"tap\"", "vni = 1"),
        ("kind = \"uplink\"\nifname = \"e\"", "offloads = false"),
        (
            "kind = \"vhost-user\"\nsocket = \"/s\"",
            "qdisc_bypass = true",
        ),
        (
            "kind = \"vxlan\"\nvni = 1\nlocal = \"10.0.0.1\"",
            "netns = \"/run/netns/x\"",
        ),
    ] {
        let e = Config::parse(&format!("[[port]]\nname = \"a\"\n{kind}\n{key}\n")).unwrap_err();
        let chain = crate::error_chain(&e);
        let name = key.split(' ').next().unwrap();
        assert!(
            chain.contains(&format!("unknown field `{name}`")),
            "{kind} {key}: {chain}"
        );
    }
    let e = Config::parse("[[port]]\nname = \"a\"\nkind = \"uplink\"\nshare = 5\nifname = \"e\"\n")
        .unwrap_err();
    assert!(
        crate::error_chain(&e).contains("apply to vhost-user and tap ports"),
        "{}",
        crate::error_chain(&e)
    );
    let e = Config::parse("[[port]]\nname = \"a\"\nkind = \"uplink\"\n").unwrap_err();
    assert!(
        crate::error_chain(&e).contains("missing field `ifname`"),
        "{}",
        crate::error_chain(&e)
    );
}

#[test]
fn each_kind_writes_its_own_keys_only() {
    let ports = vec![
        PortSpec::tap("t", "tt"),
        PortSpec::uplink("u", "eth9"),
        PortSpec::vxlan("x", 7, "10.0.0.1".parse().unwrap(), &[]),
        PortSpec::vhost_user("v", "/v", SocketMode::Server),
    ];
    let json: Vec<_> = ports
        .iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect();
    assert_eq!(
        json,
        [
            serde_json::json!({"name": "t", "kind": "tap", "ifname": "tt", "spoof_guard": false}),
            serde_json::json!({"name": "u", "kind": "uplink", "ifname": "eth9", "spoof_guard": false}),
            serde_json::json!({"name": "x", "kind": "vxlan", "vni": 7, "local": "10.0.0.1", "spoof_guard": false}),
            serde_json::json!({"name": "v", "kind": "vhost-user", "socket": "/v", "mode": "server", "spoof_guard": false}),
        ]
    );
    let text = toml::to_string(&Config {
        switch: SwitchConfig::default(),
        ports: ports.clone(),
    })
    .unwrap();
    assert_eq!(Config::parse(&text).unwrap().ports, ports, "{text}");
}
