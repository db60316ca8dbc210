//! `vnio vm wait-agent` where this host has no route of its own into the
//! guest's network.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{text, VNIO};
use vnio_vm::state::VmDir;
use vnio_vm::testkit::Kit;

/// From a namespace whose only way to the guests' network is a default
/// route to somewhere else (as on a host whose guests are only on
/// vhost-user ports), `vnio vm wait-agent` finds guest A's agent through
/// its command channel at once, and says so, instead of asking whatever
/// answers through that route.
pub fn agent_without_a_route(kit: &Kit, a: &VmDir, a_ip: &str, n: u8) {
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    let ns = Ns(format!("vnio-vmf{n}"));
    let (x, y) = (format!("vmf{n}"), format!("vmg{n}"));
    let _ = Command::new("ip").args(["netns", "del", &ns.0]).output();
    for cmd in [
        format!("netns add {}", ns.0),
        format!("-n {} link add {x} type veth peer name {y}", ns.0),
        format!("-n {} link set {x} up", ns.0),
        format!("-n {} link set {y} up", ns.0),
        format!("-n {} addr add 192.0.2.1/24 dev {x}", ns.0),
        format!("-n {} route add default via 192.0.2.254", ns.0),
    ] {
        let out = Command::new("ip").args(cmd.split(' ')).output().unwrap();
        assert!(out.status.success(), "ip {cmd}: {}", text(&out.stderr));
    }
    let t = Instant::now();
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, VNIO, "vm", "--state-dir"])
        .arg(&kit.root.0)
        .args(["wait-agent", &a.name(), "--timeout", "60s"])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    println!(
        "wait-agent without a route, {:?}: {}",
        t.elapsed(),
        said.trim()
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(said.contains(&format!("agent {a_ip}:")), "{said}");
    assert!(
        said.contains("reached through the guest's command channel (this host's route to")
            && said.contains("leads via 192.0.2.254 on vmf"),
        "{said}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}
