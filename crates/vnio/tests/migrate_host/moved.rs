//! The migrations that happen: B over TLS under ping and a paced TCP
//! stream, its memory never in clear on the underlay, then seen and stopped
//! by m1's vnio; and the control, A with `--insecure`, whose memory is.

use std::time::Instant;

use vnio_vm::state::VmDir;
use vnio_vm::testkit::{alive, Traffic};

use super::bed::Bed;
use super::m1::{finished, migrate_cmd, netns_of, on_m1, ports, processes_with};
use super::underlay::{occurrences, plant_marker, Capture};
use crate::text;

/// The migration over TLS, under ping and a paced TCP stream, the
/// underlay captured; B's memory holds the marker, which the capture does
/// not. B then answers from a QEMU in vnio-m1 booted from m1's cache.
/// Returns B's state directory on m1 and its new QEMU's pid.
pub fn over_tls(bed: &Bed) -> (VmDir, String) {
    let (a, b, old_pid) = (&bed.a, &bed.b, bed.old_pid);
    let marker_b = format!("vnio-migration-marker-b-{}-{}", std::process::id(), bed.n);
    plant_marker(b, &marker_b);
    let traffic = Traffic::start(a, b, &bed.a_ip, &bed.b_ip);
    let capture = Capture::start(bed.work.join("tls.pcap"));
    let mut cmd = bed.migrate_tls();
    cmd.arg("--remote-cache").arg(bed.cache());
    let t = Instant::now();
    let out = finished(cmd);
    let took = t.elapsed();
    let pcap = capture.stop();
    assert!(
        out.status.success(),
        "vnio vm migrate --to m1: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!(
        "migration to m1: total {} ms, downtime {} ms, {} bytes of RAM, {} ms in all; ports {}",
        m["total_ms"], m["downtime_ms"], m["ram_transferred"], m["wall_ms"], m["ports"]
    );
    println!("migration over TLS: {took:?} for the command");
    let sent = m["ram_transferred"].as_u64().unwrap();
    assert!(
        pcap.len() as u64 > sent,
        "the capture ({} bytes) holds the stream ({sent} bytes)",
        pcap.len()
    );
    assert_eq!(
        occurrences(&pcap, marker_b.as_bytes()),
        0,
        "B's memory crossed the underlay in clear"
    );
    assert_eq!(m["host"], "m1");
    assert_eq!(m["old_pid"], old_pid);
    let new_pid = m["new_pid"].as_u64().unwrap().to_string();
    assert!(m["total_ms"].as_u64().unwrap() > 0);
    assert_eq!(m["ports"], serde_json::json!([["p2", "p2-m1"]]));
    assert!(
        m.get("copied").is_none(),
        "m1's cache had the image, and the verified copy of vnio: {}",
        m["copied"]
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", m["new_pid"])).unwrap();
    assert!(
        text(&cmdline).contains(&format!("{}/vmlinuz", bed.cached_image().display())),
        "the destination boots from m1's cache"
    );
    let remote = moved_to_m1(bed, &new_pid);
    traffic.check(a, &remote);
    bed.ping_b(3);
    (remote, new_pid)
}

/// The guest now runs in a QEMU (`new_pid`) in m1's namespace; the source
/// is gone. Its state directory on m1.
fn moved_to_m1(bed: &Bed, new_pid: &str) -> VmDir {
    assert!(alive(new_pid.parse().unwrap()));
    assert_eq!(
        netns_of(&format!("/proc/{new_pid}/ns/net")),
        netns_of("/run/netns/vnio-m1"),
        "the new QEMU lives in vnio-m1"
    );
    assert!(!alive(bed.old_pid), "the source QEMU is gone");
    assert!(!bed.b.path().exists(), "the source's state is gone");
    assert_eq!(
        ports(&bed.control),
        ["p1", "vx"],
        "the source's port is gone"
    );
    assert_eq!(ports(&bed.m1_control), ["p2-m1", "vx"]);
    VmDir::new(&bed.remote_root, &bed.name)
}

/// m1's vnio sees the guest (QEMU `new_pid`, state `remote`), and stops it
/// leaving nothing.
pub fn stopped_on_m1(bed: &Bed, remote: &VmDir, new_pid: &str) {
    let root = bed.remote_root.display().to_string();
    let list = on_m1(&["vm", "--state-dir", &root, "list", "--json"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    assert!(
        text(&list.stdout).contains(new_pid),
        "{}",
        text(&list.stdout)
    );
    let stop = on_m1(&["vm", "--state-dir", &root, "stop", &bed.name]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert!(!alive(new_pid.parse().unwrap()));
    assert!(!remote.path().exists(), "m1's state is gone");
    assert_eq!(ports(&bed.m1_control), ["vx"], "m1's port is gone");
    assert_eq!(
        processes_with(&bed.remote_root.display().to_string()),
        Vec::<String>::new(),
        "nothing of the VM runs on m1"
    );
    assert!(
        std::fs::read_dir(&bed.remote_root).map_or(true, |mut d| d.next().is_none()),
        "no state directory left on m1"
    );
}

/// The control: A moves with --insecure, and its marker is in clear on
/// the underlay (so the capture would have shown B's). m1's vnio stops it.
pub fn insecure_control(bed: &Bed) {
    let a_name = bed.a.name();
    let marker_a = format!("vnio-migration-marker-a-{}-{}", std::process::id(), bed.n);
    plant_marker(&bed.a, &marker_a);
    let capture = Capture::start(bed.work.join("insecure.pcap"));
    let mut cmd = migrate_cmd(&bed.kit.root.0, &a_name, &bed.remote_root, &bed.m1_control);
    cmd.arg("--insecure");
    let out = finished(cmd);
    let pcap = capture.stop();
    assert!(out.status.success(), "--insecure: {}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--insecure: the guest's memory crosses the network in plain text"),
        "says so: {}",
        text(&out.stderr)
    );
    let seen = occurrences(&pcap, marker_a.as_bytes());
    println!("--insecure: A's marker {seen} times in the capture");
    assert!(
        seen > 0,
        "A's memory was not seen in clear: the capture proves nothing"
    );
    let root = bed.remote_root.display().to_string();
    let stop = on_m1(&["vm", "--state-dir", &root, "stop", &a_name]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert_eq!(ports(&bed.m1_control), ["vx"], "m1's port is gone");
}
