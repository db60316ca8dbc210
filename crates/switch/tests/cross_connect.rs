//! Cross-connects through the real switch (daemon, worker, poll-mode
//! endpoints on vhost-user sockets): two ports joined as by a cable pass
//! every frame to each other as it is, whatever its addresses, on the fast
//! case; a third, switched port neither reaches them nor hears from them;
//! the pair comes apart and together with its ports; misconfigurations are
//! refused in one line.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vnio_switch::config::{Config, Latency, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::endpoint::Endpoint;
use vnio_switch::port::SocketMode;

/// A UDP-over-IPv4-looking frame from `src` to `dst` (the switch reads no
/// further than the protocol byte), `len` bytes, its payload from `seq`.
fn frame(dst: [u8; 6], src: u8, len: usize, seq: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| seq.wrapping_add(i as u8)).collect();
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[14 + 9] = 17;
    f
}

/// Every frame `ep` receives within `wait`.
fn drain(ep: &mut Endpoint, want: usize, wait: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && got.len() < want {
        while let Some(len) = ep.poll_recv(&mut buf) {
            got.push(buf[..len].to_vec());
        }
    }
    got
}

fn spec(dir: &Dir, name: &str, cross: Option<&str>) -> PortSpec {
    let mut p = PortSpec::vhost_user(name, dir.sock(name), SocketMode::Server);
    p.kind.vhost_user_mut().unwrap().cross_connect = cross.map(str::to_string);
    p
}

fn run() {
    let dir = Dir::new("cross");
    let cfg = Config {
        switch: SwitchConfig {
            control: dir.sock("control"),
            idle_polls: 4,
            ..Default::default()
        },
        ports: vec![
            spec(&dir, "p1", None),
            spec(&dir, "p2", Some("p1")),
            spec(&dir, "p3", None),
        ],
    };
    let sw = Switch::start(cfg).unwrap();
    let mut e1 = endpoint(&dir, 1, 1);
    let mut e2 = endpoint(&dir, 2, 2);
    let mut e3 = endpoint(&dir, 3, 3);
    let short = Duration::from_millis(300);

    // Whatever the destination (p3's address, a broadcast, nobody's), to
    // the peer as sent; both ways; nothing to the switched port.
    let fast_before: u64 = sw.handle().perf().iter().map(|p| p.fast_frames).sum();
    let to_peer: Vec<Vec<u8>> = (0..32u8)
        .map(|k| {
            let dst = match k % 3 {
                0 => mac(3).0,
                1 => [0xff; 6],
                _ => [2, 0, 0, 0, 0, 0x99],
            };
            frame(dst, 1, 60 + usize::from(k), k)
        })
        .collect();
    let burst: Vec<&[u8]> = to_peer.iter().map(Vec::as_slice).collect();
    assert_eq!(e1.send_burst(&burst), 32);
    assert_eq!(drain(&mut e2, 32, T), to_peer, "byte for byte, in order");
    let back = frame(mac(1).0, 2, 64, 7);
    e2.send_frame(&back).unwrap();
    assert_eq!(drain(&mut e1, 1, T), vec![back]);
    assert!(drain(&mut e3, 1, short).is_empty(), "nothing reaches p3");
    let fast: u64 = sw.handle().perf().iter().map(|p| p.fast_frames).sum();
    assert!(
        fast - fast_before >= 32,
        "{} fast of 33",
        fast - fast_before
    );

    // Not switched: nothing learned, no flood from p3 reaches them.
    let fdb = sw.handle().fdb().unwrap();
    assert!(
        fdb.iter().all(|e| e.mac != mac(1) && e.mac != mac(2)),
        "{fdb:?}"
    );
    e3.send_frame(&frame([0xff; 6], 3, 60, 1)).unwrap();
    assert!(drain(&mut e1, 1, short).is_empty() && drain(&mut e2, 1, short).is_empty());

    // Refused, each in one line.
    let add = |s: PortSpec| sw.handle().add_port(s).unwrap_err().to_string();
    for (cross, why) in [
        ("nope", "no port named nope"),
        ("p1", "cross-connected already"),
        ("p4", "names another port"),
    ] {
        let e = add(spec(&dir, "p4", Some(cross)));
        assert!(e.contains(why) && !e.contains('\n'), "{cross}: {e}");
    }
    let high = PolicyUpdate {
        latency: Some(Latency::High),
        ..Default::default()
    };
    let e = sw.handle().set_port("p1", high).unwrap_err().to_string();
    assert!(e.contains("cross-connected"), "{e}");

    // The port that named its peer goes: the peer is switched again.
    sw.handle().del_port("p2").unwrap();
    drop(e2);
    let hello = frame(mac(3).0, 1, 60, 3);
    e1.send_frame(&hello).unwrap();
    assert_eq!(drain(&mut e3, 1, T), vec![hello], "p1 is switched again");
    // It comes back, and the pair with it.
    sw.handle().add_port(spec(&dir, "p2", Some("p1"))).unwrap();
    let mut e2 = endpoint(&dir, 2, 2);
    let again = frame(mac(3).0, 1, 60, 4);
    e1.send_frame(&again).unwrap();
    assert_eq!(drain(&mut e2, 1, T), vec![again]);
    assert!(drain(&mut e3, 1, short).is_empty());

    // The named port goes: its peer's frames have no route until it is back.
    sw.handle().del_port("p1").unwrap();
    drop(e1);
    e2.send_frame(&frame(mac(3).0, 2, 60, 5)).unwrap();
    wait_for("p2's no_route drop", || {
        let l = sw.handle().list().unwrap();
        let p2 = l.iter().find(|p| p.name == "p2").unwrap();
        p2.stats.tx.drops.get("no_route").copied().unwrap_or(0) >= 1
    });
    assert!(
        drain(&mut e3, 1, short).is_empty(),
        "not switched meanwhile"
    );
    sw.handle().add_port(spec(&dir, "p1", None)).unwrap();
    let mut e1 = endpoint(&dir, 1, 1);
    let last = frame([0xff; 6], 2, 60, 6);
    e2.send_frame(&last).unwrap();
    assert_eq!(drain(&mut e1, 1, T), vec![last]);
}

#[test]
fn a_cross_connected_pair_passes_frames_as_a_cable() {
    bounded(Duration::from_secs(60), run);
}
