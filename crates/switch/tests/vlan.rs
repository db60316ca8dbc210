//! VLAN port groups and the MAC-spoof guard through real ports: access
//! ports are isolated by VLAN, a trunk carries tagged frames (tag inserted
//! on the way to the trunk, stripped on the way from it), and a guarded
//! port drops frames with a foreign source MAC.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;

fn spec(dir: &Dir, name: &str) -> PortSpec {
    PortSpec::vhost_user(name, dir.sock(name), SocketMode::Server)
}

fn recv(ep: &mut Endpoint, within: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 2048];
    loop {
        if let Some(n) = ep.poll_recv(&mut buf) {
            return Some(buf[..n].to_vec());
        }
        if Instant::now() >= deadline {
            return None;
        }
        ep.wait(Duration::from_millis(20)).unwrap();
    }
}

fn frame(dst: [u8; 6], src: [u8; 6], tag: Option<u16>, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    if let Some(vid) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(body);
    f
}

#[test]
fn access_isolation_and_trunk_tagging() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("vlan");
        let mut p1 = spec(&dir, "p1");
        p1.vlan = Some(10);
        let mut p2 = spec(&dir, "p2");
        p2.vlan = Some(20);
        let mut p3 = spec(&dir, "p3");
        p3.trunk = vec![10, 20];
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..Default::default()
            },
            ports: vec![p1, p2, p3],
        };
        let sw = Switch::start(cfg).unwrap();
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let mut t = endpoint(&dir, 3, 3);
        let body = [0x5a; 46];

        // Broadcast on VLAN 10: the trunk gets it tagged 10, VLAN 20 does not see it.
        a.send_frame(&frame([0xff; 6], mac(1).0, None, &body))
            .unwrap();
        assert_eq!(
            recv(&mut t, T).unwrap(),
            frame([0xff; 6], mac(1).0, Some(10), &body),
            "tag inserted"
        );
        assert_eq!(
            recv(&mut b, Duration::from_millis(200)),
            None,
            "VLANs are isolated"
        );

        // Tagged 20 from the trunk to b: delivered untagged.
        t.send_frame(&frame(mac(2).0, mac(9).0, Some(20), &body))
            .unwrap();
        assert_eq!(
            recv(&mut b, T).unwrap(),
            frame(mac(2).0, mac(9).0, None, &body),
            "tag stripped"
        );
        assert_eq!(recv(&mut a, Duration::from_millis(200)), None);

        // A VLAN the trunk does not carry, and a tagged frame from an access port, are dropped.
        t.send_frame(&frame([0xff; 6], mac(9).0, Some(30), &body))
            .unwrap();
        a.send_frame(&frame([0xff; 6], mac(1).0, Some(10), &body))
            .unwrap();
        let deadline = Instant::now() + T;
        loop {
            let ports = sw.handle().list().unwrap();
            let vlan_drops =
                |n: &str| ports.iter().find(|p| p.name == n).unwrap().stats.tx.drops["vlan"];
            if vlan_drops("p3") == 1 && vlan_drops("p1") == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "VLAN drops not counted");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The FDB keeps VLANs apart.
        let fdb = sw.handle().fdb().unwrap();
        assert!(fdb.iter().any(|e| e.vid == 20 && e.mac == mac(9)));
        assert!(fdb.iter().any(|e| e.vid == 10 && e.mac == mac(1)));
    });
}

#[test]
fn spoof_guard_drops_foreign_source_macs() {
    bounded(Duration::from_secs(30), || {
        let dir = Dir::new("spoof");
        let mut p1 = spec(&dir, "p1");
        p1.mac = Some(mac(1).to_string());
        p1.spoof_guard = true;
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..Default::default()
            },
            ports: vec![p1, spec(&dir, "p2")],
        };
        let sw = Switch::start(cfg).unwrap();
        let mut a = endpoint(&dir, 1, 1);
        let mut b = endpoint(&dir, 2, 2);
        let body = [1u8; 46];
        a.send_frame(&frame([0xff; 6], mac(7).0, None, &body))
            .unwrap();
        a.send_frame(&frame([0xff; 6], mac(1).0, None, &body))
            .unwrap();
        let got = recv(&mut b, T).unwrap();
        assert_eq!(&got[6..12], &mac(1).0, "only the genuine frame passes");
        assert_eq!(recv(&mut b, Duration::from_millis(200)), None);
        let p1 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p1")
            .unwrap();
        assert_eq!(p1.stats.tx.drops["spoof"], 1);
        assert!(
            !sw.handle().fdb().unwrap().iter().any(|e| e.mac == mac(7)),
            "spoofed MAC not learned"
        );
    });
}
