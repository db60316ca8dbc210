//! A Linux bridge in its own namespace joins two hosts; links move between
//! namespaces; errors say what failed.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use vnio_topo::{Error, Netns};

#[test]
fn bridge_joins_two_namespaces() {
    if common::skip_unless_root("bridge_joins_two_namespaces") {
        return;
    }
    let journal = common::journal("bridge");
    let (id, n) = vnio_topo::unique_id();
    let octet = (n % 256) as u8;
    let sw = Netns::create_with_journal(&format!("vnio-{id}-sw"), &journal).expect("switch ns");
    let h1 = Netns::create_with_journal(&format!("vnio-{id}-h1"), &journal).expect("h1");
    let h2 = Netns::create_with_journal(&format!("vnio-{id}-h2"), &journal).expect("h2");

    let mut swh = sw.handle().expect("switch handle");
    let br = swh.add_bridge("br0").expect("bridge");
    swh.set_up(br.name()).expect("bridge up");
    let hosts = [(&h1, "p1", 1u8), (&h2, "p2", 2u8)];
    for (host, port, last) in hosts {
        // Create both ends in the switch namespace, then move one: exercises
        // move_to as well as creating across namespaces.
        let _ = swh.add_veth(port, "eth0", None).expect("veth").keep();
        swh.move_to("eth0", host).expect("move eth0");
        swh.set_controller(port, "br0").expect("enslave");
        swh.set_up(port).expect("port up");
        let mut hh = host.handle().expect("host handle");
        hh.add_address("eth0", IpAddr::V4(Ipv4Addr::new(10, 77, octet, last)), 24)
            .expect("address");
        hh.set_up("eth0").expect("eth0 up");
    }
    let br_index = swh.index("br0").expect("br0 index");
    let ports: Vec<_> = swh
        .links()
        .expect("links")
        .into_iter()
        .filter(|l| l.controller == Some(br_index))
        .map(|l| l.name)
        .collect();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert!(
        swh.link("eth0").expect("lookup").is_none(),
        "eth0 should have moved"
    );

    let dst = SocketAddr::from((Ipv4Addr::new(10, 77, octet, 2), 7003));
    let server = h2
        .run(move || UdpSocket::bind(dst))
        .expect("enter h2")
        .expect("bind");
    server
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let client = h1
        .run(|| UdpSocket::bind("0.0.0.0:0"))
        .expect("enter h1")
        .expect("bind");
    client.send_to(b"via bridge", dst).expect("send");
    let mut buf = [0u8; 32];
    let (len, from) = server.recv_from(&mut buf).expect("recv through bridge");
    assert_eq!(&buf[..len], b"via bridge");
    assert_eq!(from.ip(), IpAddr::V4(Ipv4Addr::new(10, 77, octet, 1)));

    drop((client, server, swh, br));
    for ns in [sw, h1, h2] {
        ns.delete().expect("delete");
    }
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

#[test]
fn errors_say_what_failed() {
    if common::skip_unless_root("errors_say_what_failed") {
        return;
    }
    let journal = common::journal("errors");
    let (id, _) = vnio_topo::unique_id();
    let name = format!("vnio-{id}-e");
    let ns = Netns::create_with_journal(&name, &journal).expect("netns");

    let dup = Netns::create_with_journal(&name, &journal).expect_err("duplicate netns");
    let text = dup.to_string();
    assert!(
        text.starts_with(&format!("creating netns {name}: ")),
        "{text}"
    );
    assert!(text.contains("exists"), "{text}");
    assert!(
        vnio_topo::netns_exists(&name),
        "a failed duplicate must not delete the original"
    );

    let mut h = ns.handle().expect("handle");
    let long = h.add_bridge("vnio0123456789ab").expect_err("16-byte name");
    assert!(matches!(long, Error::InvalidName { .. }), "{long}");
    let missing = h.set_up("nosuchlink").expect_err("missing link");
    assert!(matches!(missing, Error::NotFound { .. }), "{missing}");
    assert_eq!(
        missing.to_string(),
        format!("link nosuchlink in netns {name}: not found")
    );
    let _ = h.add_bridge("br0").expect("bridge").keep();
    let exists = h.add_bridge("br0").expect_err("duplicate bridge");
    assert!(exists
        .to_string()
        .starts_with(&format!("creating bridge br0 in netns {name}: ")));
    assert!(!exists.is_permission_denied());

    drop(h);
    ns.delete().expect("delete");
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

#[test]
fn not_root_is_a_clear_error() {
    if common::skip_unless_root("not_root_is_a_clear_error") {
        return;
    }
    // Drop to an unprivileged user in a child: creating a namespace must
    // fail with an error that says so, not panic.
    let journal = common::journal("nonroot");
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "nonroot_child_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VNIO_LAB_TEST_NONROOT", journal.path())
        .output()
        .expect("spawn child");
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{errors}");
    assert!(text.contains("CHILD-ERROR creating netns "), "{text}");
    assert!(text.contains("(run as root)"), "{text}");
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

/// Not a test on its own: the body of `not_root_is_a_clear_error`'s child.
#[test]
fn nonroot_child_helper() {
    let Some(path) = std::env::var_os("VNIO_LAB_TEST_NONROOT") else {
        return;
    };
    let journal = vnio_topo::Journal::at(path);
    // Make the journal writable first, so the failure is the namespace's.
    std::fs::create_dir_all(common::journal_dir(&journal)).expect("journal dir");
    std::fs::File::create(journal.path()).expect("journal file");
    let nobody = nix::unistd::Uid::from_raw(65534);
    std::os::unix::fs::chown(journal.path(), Some(65534), Some(65534)).expect("chown");
    nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).expect("setgid");
    nix::unistd::setuid(nobody).expect("setuid");
    assert!(!vnio_topo::is_root());
    let err = Netns::create_with_journal("vnio-nonroot-probe", &journal).expect_err("must fail");
    assert!(err.is_permission_denied(), "{err}");
    println!("CHILD-ERROR {err}");
}

#[test]
fn bridged_hosts_reach_each_other() {
    if common::skip_unless_root("bridged_hosts_reach_each_other") {
        return;
    }
    let journal = common::journal("bridged");
    let star = vnio_topo::Bridged::with_journal(3, &journal).expect("bridged");
    let hosts = star.hosts();
    assert_eq!(hosts.len(), 3);
    let mut names: Vec<String> = hosts.iter().map(|h| h.netns().name().to_owned()).collect();
    names.push(star.switch().name().to_owned());

    // Every host reaches every other one through br0.
    for (i, from) in hosts.iter().enumerate() {
        for (j, to) in hosts.iter().enumerate() {
            if i == j {
                continue;
            }
            let dst = SocketAddr::from((to.addr(), 7300 + (i * 3 + j) as u16));
            let server = to
                .run(move || UdpSocket::bind(dst))
                .expect("enter")
                .expect("bind");
            server
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let client = from
                .run(|| UdpSocket::bind("0.0.0.0:0"))
                .expect("enter")
                .expect("bind");
            client.send_to(b"star", dst).expect("send");
            let mut buf = [0u8; 8];
            let (n, src) = server.recv_from(&mut buf).expect("recv");
            assert_eq!(&buf[..n], b"star");
            assert_eq!(src.ip(), IpAddr::V4(from.addr()));
        }
    }
    let mut sw = star.switch().handle().expect("switch handle");
    let br = sw.index("br0").expect("br0");
    let ports = sw
        .links()
        .expect("links")
        .into_iter()
        .filter(|l| l.controller == Some(br))
        .count();
    assert_eq!(ports, 3);
    drop(sw);

    star.delete().expect("delete");
    for name in &names {
        assert!(!vnio_topo::netns_exists(name), "{name} left");
    }
    assert!(journal.entries().expect("journal").is_empty());
    assert!(vnio_topo::Bridged::with_journal(0, &journal).is_err());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
