//! An underlay made of network namespaces and veths, for the VXLAN tests
//! (root only: `skip_reason` says why not).

use std::net::Ipv4Addr;
use std::process::Command;
use vnio_lab::Netns;

pub fn skip_reason() -> Option<String> {
    if !vnio_lab::is_root() {
        return Some("not root".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("no ip command".into());
    }
    // The kernel's vxlan device is the peer of the second test and a probe
    // that VXLAN works here at all.
    let name = format!("vxp{}", std::process::id() % 100_000);
    let ok = Command::new("ip")
        .args([
            "link", "add", &name, "type", "vxlan", "id", "1", "dstport", "4789",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    let _ = Command::new("ip").args(["link", "del", &name]).output();
    (!ok).then(|| "`ip link add type vxlan` fails".into())
}

pub fn ip(ns: &Netns, args: &[&str]) {
    let out = Command::new("ip")
        .arg("-n")
        .arg(ns.name())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip -n {} {args:?}: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A short per-process number for names and the underlay's third octet.
pub fn tag() -> u8 {
    (std::process::id() % 200) as u8 + 20
}

pub fn ns(name: &str) -> Netns {
    let _ = Command::new("ip").args(["netns", "del", name]).output();
    Netns::create(name).unwrap()
}

/// A veth pair from `a` (in `na`, address `aa`) to `b` (in `nb`, `ab`), /24s.
pub fn veth(na: &Netns, a: &str, aa: Ipv4Addr, nb: &Netns, b: &str, ab: Ipv4Addr) {
    ip(
        na,
        &[
            "link",
            "add",
            a,
            "type",
            "veth",
            "peer",
            "name",
            b,
            "netns",
            nb.name(),
        ],
    );
    ip(na, &["addr", "add", &format!("{aa}/24"), "dev", a]);
    ip(na, &["link", "set", a, "up"]);
    ip(nb, &["addr", "add", &format!("{ab}/24"), "dev", b]);
    ip(nb, &["link", "set", b, "up"]);
}
