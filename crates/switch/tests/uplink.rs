//! Uplink ports (root only): a poll-mode endpoint reaches the host stack on
//! the far side of a veth pair through an AF_PACKET uplink; and a trunk
//! uplink tags frames toward the wire and untags frames from it (including
//! tags the driver stripped into packet metadata). Prints a skip line without root.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::stack::Event;
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::uplink::{Read, UplinkPort, HDR_LEN};
use vnio_switch::port::SocketMode;
use vnio_switch::wire::Ipv4Address;

fn root_with_ip() -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        });
    uid.as_deref() == Some("0") && Command::new("ip").arg("-V").output().is_ok()
}

fn ip_cmd(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A veth pair, deleted on drop.
struct Veth(String);

impl Veth {
    fn new(a: &str, b: &str) -> Self {
        let _ = Command::new("ip").args(["link", "del", a]).output();
        ip_cmd(&["link", "add", a, "type", "veth", "peer", "name", b]);
        ip_cmd(&["link", "set", a, "up"]);
        ip_cmd(&["link", "set", b, "up"]);
        Self(a.to_string())
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

fn ping_host() {
    let dir = Dir::new("uplink");
    let n = (std::process::id() % 100) as u8;
    let (a, b) = (format!("vnua{n}"), format!("vnub{n}"));
    let _veth = Veth::new(&a, &b);
    let host_ip = Ipv4Address([10, 232, n, 1]);
    let ep_ip = Ipv4Address([10, 232, n, 2]);
    ip_cmd(&["addr", "add", &format!("{host_ip}/24"), "dev", &b]);
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![
            PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
            PortSpec::uplink("up", &a),
        ],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut ep = Endpoint::connect(&dir.sock("p1"), EndpointConfig::new(mac(2), ep_ip)).unwrap();
    ep.resolve(host_ip, T)
        .expect("the host answers ARP through the uplink");
    for seq in 1..=3 {
        ep.ping(host_ip, 3, seq, b"over the uplink").unwrap();
        ep.poll_until(T, |_, ev| {
            matches!(ev, Event::EchoReply { seq: s, .. } if s == seq).then_some(())
        })
        .expect("echo reply");
    }
    let upi = sw
        .handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "up")
        .unwrap();
    assert!(
        upi.stats.tx.packets >= 4 && upi.stats.rx.packets >= 4,
        "{:?}",
        upi.stats
    );
}

/// The far end of the veth, driven by the test through the same AF_PACKET code.
fn far_end_read(far: &mut UplinkPort, buf: &mut [u8], want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = Instant::now() + T;
    loop {
        far.on_readable();
        if let Some(Read::Frame { start, len }) = far.read(buf) {
            let f = &buf[start + HDR_LEN..start + len];
            if want(f) {
                return f.to_vec();
            }
            continue;
        }
        assert!(Instant::now() < deadline, "nothing arrived at the far end");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn trunk() {
    let dir = Dir::new("trunk");
    let n = (std::process::id() % 100) as u8 + 100;
    let (a, b) = (format!("vnua{n}"), format!("vnub{n}"));
    let _veth = Veth::new(&a, &b);
    let mut p1 = PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server);
    p1.vlan = Some(10);
    let mut up = PortSpec::uplink("up", &a);
    up.trunk = vec![10, 20];
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![p1, up],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut ep = Endpoint::connect(
        &dir.sock("p1"),
        EndpointConfig::new(mac(2), Ipv4Address([10, 0, 0, 2])),
    )
    .unwrap();
    let mut far = UplinkPort::new(&b).unwrap();
    let mut buf = vec![0u8; vnio_switch::port::uplink::BUF_LEN];
    let far_mac = [2, 0, 0, 0, 0, 0x77];

    // Far end -> trunk, tagged 10 -> p1, untagged.
    let mut tagged = vec![0u8; HDR_LEN];
    tagged.extend_from_slice(&[0xff; 6]);
    tagged.extend_from_slice(&far_mac);
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a, 0x88, 0xb5]);
    tagged.extend_from_slice(&[0x33; 46]);
    let len = tagged.len();
    far.out_buf()[..len].copy_from_slice(&tagged);
    assert!(far.send(len));
    let mut got = [0u8; 2048];
    let deadline = Instant::now() + T;
    let m = loop {
        if let Some(m) = ep.poll_recv(&mut got) {
            if got[6..12] == far_mac {
                break m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "tagged frame never reached the access port"
        );
        ep.wait(Duration::from_millis(20)).unwrap();
    };
    assert_eq!(
        &got[12..14],
        &[0x88, 0xb5],
        "tag stripped toward the access port"
    );
    assert_eq!(m, 14 + 46);

    // p1 -> trunk: the far end sees tag 10 (recovered from auxdata if the driver stripped it).
    let mut f = vec![0x44u8; 60];
    f[..6].copy_from_slice(&far_mac);
    f[6..12].copy_from_slice(&mac(2).0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    ep.send_frame(&f).unwrap();
    let seen = far_end_read(&mut far, &mut buf, |fr| {
        fr.len() >= 18 && fr[6..12] == mac(2).0
    });
    assert_eq!(
        &seen[12..16],
        &[0x81, 0x00, 0x00, 0x0a],
        "tag 10 inserted toward the trunk"
    );
    assert_eq!(&seen[16..18], &[0x88, 0xb5]);
    // (Untagged host chatter on the veth, IPv6 neighbour discovery, is dropped: the trunk has no native VLAN.)
    let upi = sw
        .handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "up")
        .unwrap();
    assert!(
        upi.stats.tx.packets >= 1 && upi.stats.rx.packets >= 1,
        "{:?}",
        upi.stats
    );
}

#[test]
fn untagged_uplink_to_the_host_stack() {
    if !root_with_ip() {
        println!("skip: uplink test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(40), ping_host);
}

#[test]
fn trunk_uplink_tags_and_untags() {
    if !root_with_ip() {
        println!("skip: uplink test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(40), trunk);
}
