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
use vnio_switch::port::uplink::{Rx, UplinkPort, HDR_LEN};
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
fn far_end_read(far: &mut UplinkPort, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = Instant::now() + T;
    let q = far.queue_mut(0).unwrap();
    loop {
        let got = match q.peek() {
            Some(Rx::Frame(f)) => Some(f[HDR_LEN..].to_vec()),
            Some(Rx::Unsupported) => None,
            None => {
                assert!(Instant::now() < deadline, "nothing arrived at the far end");
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        q.release();
        if let Some(f) = got.filter(|f| want(f)) {
            return f;
        }
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
    let far_mac = [2, 0, 0, 0, 0, 0x77];

    // Far end -> trunk, tagged 10 -> p1, untagged.
    let mut tagged = vec![0u8; HDR_LEN];
    tagged.extend_from_slice(&[0xff; 6]);
    tagged.extend_from_slice(&far_mac);
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a, 0x88, 0xb5]);
    tagged.extend_from_slice(&[0x33; 46]);
    assert!(far.send_frame(&tagged));
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
    let seen = far_end_read(&mut far, |fr| fr.len() >= 18 && fr[6..12] == mac(2).0);
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

/// Bursts both ways through the rings, more frames than a ring holds and
/// in order, with and without the qdisc bypass.
fn bursts(qdisc_bypass: bool) {
    let dir = Dir::new("burst");
    let n = (std::process::id() % 25) as u8 + 200 + if qdisc_bypass { 25 } else { 0 };
    let (a, b) = (format!("vnua{n}"), format!("vnub{n}"));
    let _veth = Veth::new(&a, &b);
    let mut up = PortSpec::uplink("up", &a);
    up.kind.uplink_mut().unwrap().qdisc_bypass = qdisc_bypass;
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![
            PortSpec::vhost_user("p1", dir.sock("p1"), SocketMode::Server),
            up,
        ],
    };
    let _sw = Switch::start(cfg).unwrap();
    let mut ep = Endpoint::connect(
        &dir.sock("p1"),
        EndpointConfig::new(mac(2), Ipv4Address([10, 0, 0, 2])),
    )
    .unwrap();
    let mut far = UplinkPort::new(&b).unwrap();
    let far_mac = [2, 0, 0, 0, 0, 0x77];
    let frame = |dst: [u8; 6], src: [u8; 6], seq: u32| {
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        f
    };
    // vNIC -> wire: 3000 frames, in order (the transmit ring wraps).
    let total = 3000u32;
    let (mut sent, mut next) = (0u32, 0u32);
    let q = far.queue_mut(0).unwrap();
    let deadline = Instant::now() + T;
    while next < total {
        // At most 1000 in flight: the far end's ring (2048) must not fill
        // while this thread is descheduled.
        while sent < total
            && sent - next < 1000
            && ep.send_frame(&frame(far_mac, mac(2).0, sent)).is_ok()
        {
            sent += 1;
        }
        let seq = match q.peek() {
            Some(Rx::Frame(f)) if f[HDR_LEN + 6..HDR_LEN + 12] == mac(2).0 => Some(
                u32::from_be_bytes(f[HDR_LEN + 14..HDR_LEN + 18].try_into().unwrap()),
            ),
            Some(_) => None,
            None => {
                assert!(Instant::now() < deadline, "{next} of {total} frames left");
                continue;
            }
        };
        q.release();
        if let Some(seq) = seq {
            assert_eq!(seq, next, "frames leave in order");
            next += 1;
        }
    }
    // wire -> vNIC: 3000 frames in bursts of 50 (the receive ring wraps).
    let mut buf = [0u8; 2048];
    let (mut sent, mut next) = (0u32, 0u32);
    let deadline = Instant::now() + T;
    while next < total {
        // At most 150 in flight: the endpoint's receive ring holds 256.
        if sent < total && sent - next < 100 {
            for _ in 0..50 {
                let mut f = vec![0u8; HDR_LEN];
                f.extend_from_slice(&frame(mac(2).0, far_mac, sent));
                assert!(far.send_frame(&f));
                sent += 1;
            }
        }
        if let Some(m) = ep.poll_recv(&mut buf) {
            if m >= 18 && buf[6..12] == far_mac {
                let seq = u32::from_be_bytes(buf[14..18].try_into().unwrap());
                assert_eq!(seq, next, "frames arrive in order");
                next += 1;
            }
        } else {
            assert!(
                Instant::now() < deadline,
                "{next} of {total} frames arrived"
            );
        }
    }
}

/// TCP GSO frames larger than a ring slot cross the uplink both ways whole:
/// out through the ring-less socket, in through the copy the kernel queues
/// beside a truncated slot.
fn gso_both_ways() {
    use vnio_switch::vhost_user::device::feature;
    use vnio_switch::wire::testing::{pattern, TcpFrame};
    use vnio_switch::wire::virtio_net::{VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_TCPV4};
    let dir = Dir::new("gso");
    let n = (std::process::id() % 50) as u8 + 150;
    let (a, b) = (format!("vnua{n}"), format!("vnub{n}"));
    let _veth = Veth::new(&a, &b);
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
    let _sw = Switch::start(cfg).unwrap();
    let mut ecfg = EndpointConfig::new(mac(2), Ipv4Address([10, 0, 0, 2]));
    ecfg.offloads = feature::CSUM | feature::HOST_TSO4 | feature::GUEST_CSUM | feature::GUEST_TSO4;
    let mut ep = Endpoint::connect(&dir.sock("p1"), ecfg).unwrap();
    let mut far = UplinkPort::new(&b).unwrap();
    let far_mac = [2, 0, 0, 0, 0, 0x77];
    let tcp = TcpFrame {
        payload: pattern(20_000, 7),
        ..Default::default()
    };
    let hdr = VirtioNetHdrRepr {
        flags: FLAG_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: (tcp.l4() + 20) as u16,
        gso_size: 1448,
        csum_start: tcp.l4() as u16,
        csum_offset: 16,
        num_buffers: 0,
    };
    let mut frame = tcp.build(true);
    frame[..6].copy_from_slice(&far_mac);
    frame[6..12].copy_from_slice(&mac(2).0);

    // vNIC -> wire.
    ep.send_frame_with(&hdr, &frame).unwrap();
    let seen = far_end_read(&mut far, |f| f.len() > 2048 && f[6..12] == mac(2).0);
    assert_eq!(seen.len(), frame.len());
    assert_eq!(
        seen[tcp.l4() + 20..],
        frame[tcp.l4() + 20..],
        "payload intact"
    );

    // wire -> vNIC.
    let mut back = frame.clone();
    back[..6].copy_from_slice(&mac(2).0);
    back[6..12].copy_from_slice(&far_mac);
    let mut wire = vec![0u8; HDR_LEN];
    hdr.emit(&mut wire, HDR_LEN).unwrap();
    wire.extend_from_slice(&back);
    assert!(far.send_frame(&wire));
    let mut buf = vec![0u8; 70_000];
    let deadline = Instant::now() + T;
    loop {
        if let Some((h, m)) = ep.poll_recv_with(&mut buf) {
            if buf[6..12] == far_mac {
                assert_eq!(m, back.len(), "one frame, whole");
                assert_eq!(h.gso_type, GSO_TCPV4);
                assert_eq!(buf[tcp.l4() + 20..m], back[tcp.l4() + 20..]);
                break;
            }
        }
        assert!(Instant::now() < deadline, "the GSO frame never arrived");
        std::thread::yield_now();
    }
}

#[test]
fn gso_frames_cross_the_uplink_both_ways() {
    if !root_with_ip() {
        println!("skip: uplink test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(40), gso_both_ways);
}

#[test]
fn bursts_through_the_rings() {
    if !root_with_ip() {
        println!("skip: uplink test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(40), || bursts(false));
    bounded(Duration::from_secs(40), || bursts(true));
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
