//! Unit tests of [`super`] (spec.rs).
use super::*;

#[test]
fn nic_kinds_parse() {
    let n: Nic = "vhost-user:/run/p1.sock,control=/run/sw.sock,ip=10.0.0.2/24"
        .parse()
        .unwrap();
    assert_eq!(
        n.backend,
        Backend::VhostUser {
            socket: "/run/p1.sock".into(),
            server: false,
            control: Some("/run/sw.sock".into())
        }
    );
    assert_eq!(n.ip.unwrap().to_string(), "10.0.0.2/24");
    let n: Nic = "vhost-user:/x.sock,server".parse().unwrap();
    assert!(matches!(n.backend, Backend::VhostUser { server: true, .. }));
    let n: Nic = "tap:vt0,bridge=br0,mac=52:54:00:00:00:09".parse().unwrap();
    assert_eq!(
        n.backend,
        Backend::Tap {
            ifname: Some("vt0".into()),
            bridge: Some("br0".into()),
            host_ip: None,
        }
    );
    assert_eq!(n.model, Model::Virtio);
    let n: Nic = "tap,host-ip=10.0.0.1/24,ip=10.0.0.2/24".parse().unwrap();
    assert!(
        matches!(n.backend, Backend::Tap { host_ip: Some(c), .. } if c.to_string() == "10.0.0.1/24")
    );
    let n: Nic = "e1000".parse().unwrap();
    assert_eq!(n.model, Model::E1000);
    assert!(matches!(
        n.backend,
        Backend::Tap {
            ifname: None,
            bridge: None,
            host_ip: None
        }
    ));
    let n: Nic = "macvtap:eth0,mode=vepa,model=e1000".parse().unwrap();
    assert_eq!(
        n.backend,
        Backend::Macvtap {
            parent: "eth0".into(),
            mode: MacvtapMode::Vepa
        }
    );
    assert_eq!(n.model, Model::E1000);
    assert!(n.guest_offloads);
    let n: Nic = "vhost-user:/x.sock,guest-offloads=off".parse().unwrap();
    assert!(!n.guest_offloads);
    assert!(!n.packed);
    let n: Nic = "vhost-user:/x.sock,packed=on".parse().unwrap();
    assert!(n.packed);
    assert_eq!(n.queues, 1);
    let n: Nic = "vhost-user:/x.sock,queues=4".parse().unwrap();
    assert_eq!(n.queues, 4);
}

#[test]
fn bad_nics_say_what_is_wrong() {
    for (s, needle) in [
        ("vhost-user", "needs a socket"),
        ("vhost-user:/x,model=e1000", "virtio-net"),
        ("tap,colour=red", "unknown option \"colour\""),
        ("macvtap", "host interface"),
        ("wifi:x", "unknown kind"),
        ("tap:this-name-is-far-too-long", "--nic tap"),
        ("tap,ip=10.0.0.1", "prefix"),
        ("tap,mac=", "needs a value"),
        ("e1000,model=virtio", "e1000 model"),
        ("e1000,guest-offloads=off", "virtio-net setting"),
        ("e1000,packed=on", "virtio-net setting"),
        ("vhost-user:/x,packed=yes", "packed=on|off"),
        ("vhost-user:/x,queues=0", "1 to 8 queue pairs"),
        ("vhost-user:/x,queues=9", "1 to 8 queue pairs"),
        ("vhost-user:/x,queues=two", "1 to 8 queue pairs"),
        ("tap,queues=2", "unknown option \"queues\""),
        ("tap,guest-offloads=maybe", "on|off"),
        ("tap,bridge=br0,host-ip=10.0.0.1/24", "plain tap"),
    ] {
        let err = s.parse::<Nic>().unwrap_err();
        assert!(err.contains(needle), "{s}: {err}");
    }
}

#[test]
fn memory_sizes() {
    assert_eq!(parse_mem("256M"), Ok(256));
    assert_eq!(parse_mem("2G"), Ok(2048));
    assert_eq!(parse_mem("512"), Ok(512));
    assert!(parse_mem("lots").is_err());
}

#[test]
fn specs_are_checked_whole() {
    let mut s = VmSpec::new("g1");
    s.validate().unwrap();
    s.vcpus = 0;
    assert!(s.validate().is_err());
    let mut s = VmSpec::new("g 1");
    assert!(s.validate().is_err());
    s.name = "g1".into();
    s.mem_mib = 64;
    assert!(s.validate().unwrap_err().to_string().contains("at least"));
    s.mem_mib = 256;
    s.nics = vec!["tap:x0".parse().unwrap(), "tap:x0".parse().unwrap()];
    assert!(s.validate().unwrap_err().to_string().contains("x0"));
    s.nics = vec![
        "tap,mac=52:54:00:00:00:01".parse().unwrap(),
        "e1000,mac=52:54:00:00:00:01".parse().unwrap(),
    ];
    assert!(s.validate().unwrap_err().to_string().contains("same MAC"));
}

#[test]
fn host_interface_names_fit_the_kernel_limit() {
    let mut s = VmSpec::new("a-rather-long-vm-name");
    s.nics = vec!["tap".parse().unwrap(), "macvtap:eth0".parse().unwrap()];
    for i in 0..2 {
        let n = s.host_ifname(i).unwrap();
        assert!(n.len() <= 15, "{n}");
    }
    let mut s = VmSpec::new("g1");
    s.nics = vec!["tap".parse().unwrap()];
    assert_eq!(s.host_ifname(0).as_deref(), Some("vt-g1-0"));
}
