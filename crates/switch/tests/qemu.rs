//! End to end with real Linux guests (QEMU, TCG): two guests on vhost-user
//! ports ping each other and move a TCP stream whose checksum must match.
//! QEMU is the front-end here, with its own request order (7.2 sends
//! SET_VRING_ENABLE before SET_FEATURES). Slow under TCG; prints a skip
//! line when QEMU, a kernel or busybox is missing.

mod common;

use common::guest::{Guest, GuestKit};
use common::*;
use std::time::Duration;

const BOOT: Duration = Duration::from_secs(150);

#[test]
fn two_guests_ping_and_transfer_over_tcp() {
    let kit = match GuestKit::find() {
        Ok(k) => k,
        Err(why) => {
            println!("skip: QEMU guest test: {why}");
            return;
        }
    };
    if std::env::var("VNIO_LOG").as_deref() == Ok("debug") {
        // Shows QEMU's request order (SET_VRING_ENABLE before SET_FEATURES on 7.2).
        vnio_switch::logging::init(vnio_switch::logging::LevelFilter::Debug);
    }
    bounded(Duration::from_secs(300), move || {
        let dir = Dir::new("qemu");
        let sw = switch(&dir, 2);
        let receiver = "ip addr add 10.0.0.2/24 dev eth0\necho VNIO-READY\nnc -l -p 5000 > /tmp/recv\necho VNIO-RECEIVED $(md5sum < /tmp/recv) $(wc -c < /tmp/recv)\nsleep 5";
        let sender = "ip addr add 10.0.0.1/24 dev eth0\necho VNIO-READY\nif ping -c 3 -W 5 10.0.0.2; then echo VNIO-PING-OK; else echo VNIO-PING-FAIL; fi\ndd if=/dev/urandom of=/tmp/data bs=1024 count=512 2>/dev/null\necho VNIO-SENDING $(md5sum < /tmp/data)\nnc -w 10 10.0.0.2 5000 < /tmp/data && echo VNIO-SENT";
        let (ia, ib) = (dir.0.join("a.cpio"), dir.0.join("b.cpio"));
        kit.initramfs(&ia, sender);
        kit.initramfs(&ib, receiver);
        let mut b = Guest::start(
            &kit,
            &ib,
            &dir.sock("p2"),
            "52:54:00:00:00:02",
            &dir.0.join("b.log"),
        );
        b.wait_for("VNIO-READY", BOOT).unwrap();
        let mut a = Guest::start(
            &kit,
            &ia,
            &dir.sock("p1"),
            "52:54:00:00:00:01",
            &dir.0.join("a.log"),
        );
        let console = a.wait_for("VNIO-SENT", BOOT).unwrap();
        assert!(console.contains("VNIO-PING-OK"), "ping failed:\n{console}");
        let sent = console
            .lines()
            .find(|l| l.starts_with("VNIO-SENDING"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        let got = b
            .wait_for("VNIO-RECEIVED", Duration::from_secs(60))
            .unwrap();
        let line = got
            .lines()
            .find(|l| l.starts_with("VNIO-RECEIVED"))
            .unwrap()
            .to_string();
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[1], sent, "the TCP stream arrived intact: {line}");
        assert_eq!(fields.last().copied(), Some("524288"));
        let ports = sw.handle().list().unwrap();
        for p in &ports {
            assert_eq!(p.stats.connections, 1, "{}", p.name);
            assert_eq!(p.stats.resets, 0, "{}: {:?}", p.name, p.stats);
        }
        // 512 KiB in MTU-sized frames (no TSO negotiated) from a to b; b's ACKs the other way.
        let (p1, p2) = (&ports[0].stats, &ports[1].stats);
        assert!(
            p1.tx.bytes > 524_288 && p2.rx.bytes > 524_288,
            "{p1:?} {p2:?}"
        );
        assert!(p2.tx.packets > 10 && p1.rx.packets > 10);
        println!(
            "qemu guests: ping ok, 512 KiB over TCP, md5 {sent}; {:?}",
            ports
                .iter()
                .map(|p| (&p.name, p.stats.tx.packets, p.stats.rx.packets))
                .collect::<Vec<_>>()
        );
    });
}

/// A guest with TSO and checksum offload talks to a guest whose NIC has
/// neither on receive: the switch cuts the first guest's 64 KiB GSO frames
/// and completes their checksums in software, and the second guest's
/// kernel checks every one of them. Both directions, md5-checked.
#[test]
fn guest_without_offloads_gets_software_segments_and_checksums() {
    let kit = match GuestKit::find() {
        Ok(k) => k,
        Err(why) => {
            println!("skip: QEMU guest test: {why}");
            return;
        }
    };
    bounded(Duration::from_secs(300), move || {
        let dir = Dir::new("qemu-offload");
        let sw = switch(&dir, 2);
        // Listeners run in the foreground (busybox nc's end-of-stream handling
        // depends on its stdin); the way back retries until A listens.
        let plain = "ip addr add 10.0.0.2/24 dev eth0\necho VNIO-READY\n\
            nc -l -p 5000 > /tmp/recv\n\
            echo VNIO-RECEIVED $(md5sum < /tmp/recv) $(wc -c < /tmp/recv)\n\
            dd if=/dev/urandom of=/tmp/data bs=1024 count=512 2>/dev/null\n\
            echo VNIO-BACK-SENDING $(md5sum < /tmp/data)\n\
            until nc -w 10 10.0.0.1 5001 < /tmp/data; do sleep 1; done\necho VNIO-BACK-SENT\nsleep 120";
        let offloading = "ip addr add 10.0.0.1/24 dev eth0\necho VNIO-READY\n\
            dd if=/dev/urandom of=/tmp/data bs=1024 count=1024 2>/dev/null\n\
            echo VNIO-SENDING $(md5sum < /tmp/data)\n\
            nc -w 10 10.0.0.2 5000 < /tmp/data && echo VNIO-SENT\n\
            nc -l -p 5001 > /tmp/back\n\
            echo VNIO-BACK-RECEIVED $(md5sum < /tmp/back) $(wc -c < /tmp/back)";
        let (ia, ib) = (dir.0.join("a.cpio"), dir.0.join("b.cpio"));
        kit.initramfs(&ia, offloading);
        kit.initramfs(&ib, plain);
        let mut b = Guest::start_with(
            &kit,
            &ib,
            &dir.sock("p2"),
            "52:54:00:00:00:02",
            &dir.0.join("b.log"),
            ",guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off",
        );
        b.wait_for("VNIO-READY", BOOT).unwrap();
        let mut a = Guest::start(
            &kit,
            &ia,
            &dir.sock("p1"),
            "52:54:00:00:00:01",
            &dir.0.join("a.log"),
        );
        let field = |console: &str, tag: &str, n: usize| {
            console
                .lines()
                .find(|l| l.starts_with(tag))
                .and_then(|l| l.split_whitespace().nth(n))
                .unwrap_or_default()
                .to_string()
        };
        let ca = a.wait_for("VNIO-SENT", BOOT).unwrap();
        let cb = b
            .wait_for("VNIO-BACK-SENT", Duration::from_secs(90))
            .unwrap();
        assert_eq!(
            field(&cb, "VNIO-RECEIVED ", 1),
            field(&ca, "VNIO-SENDING ", 1),
            "1 MiB to the guest without offloads arrived intact:\n{cb}"
        );
        assert_eq!(field(&cb, "VNIO-RECEIVED ", 3), "1048576");
        let ca = a
            .wait_for("VNIO-BACK-RECEIVED", Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}\n{:#?}", sw.handle().list().unwrap()));
        assert_eq!(
            field(&ca, "VNIO-BACK-RECEIVED", 1),
            field(&cb, "VNIO-BACK-SENDING", 1),
            "512 KiB back arrived intact:\n{ca}\n{cb}"
        );
        let ports = sw.handle().list().unwrap();
        let (p1, p2) = (&ports[0].stats, &ports[1].stats);
        println!(
            "offloads: p1 sent {} frames for 1 MiB; p2 got {} frames, {} GSO frames segmented, {} checksums completed",
            p1.tx.packets, p2.rx.packets, p2.rx.sw_segmented, p2.rx.sw_checksums
        );
        assert!(p2.rx.sw_segmented > 0, "TSO frames were segmented: {p2:?}");
        assert!(
            p2.rx.packets > p1.tx.packets,
            "more segments than super-frames"
        );
        for p in &ports {
            assert_eq!(p.stats.resets, 0, "{}", p.name);
            assert_eq!(p.stats.tx.drops["malformed"], 0, "{}", p.name);
        }
    });
}

fn root_with_ip() -> bool {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        });
    uid.as_deref() == Some("0") && std::process::Command::new("ip").arg("-V").output().is_ok()
}

fn ip_cmd(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A guest reaches the host stack through a tap port (ping, and a TCP
/// stream to a host listener checked byte for byte) and through an uplink
/// on a veth pair (ping).
#[test]
fn guest_reaches_the_host_through_tap_and_uplink() {
    let kit = match GuestKit::find() {
        Ok(k) => k,
        Err(why) => {
            println!("skip: QEMU guest test: {why}");
            return;
        }
    };
    if !root_with_ip() {
        println!("skip: QEMU tap/uplink test needs root and the ip command");
        return;
    }
    bounded(Duration::from_secs(300), move || {
        use std::io::Read;
        use vnio_switch::config::{Config, PortSpec, SwitchConfig};
        use vnio_switch::daemon::Switch;
        use vnio_switch::port::SocketMode;
        let dir = Dir::new("qemu-host");
        let n = (std::process::id() % 100) as u8 + 50;
        let (tap, va, vb) = (format!("vniog{n}"), format!("vnga{n}"), format!("vngb{n}"));
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &va])
            .output();
        ip_cmd(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        struct Del(String);
        impl Drop for Del {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["link", "del", &self.0])
                    .output();
            }
        }
        let _veth = Del(va.clone());
        ip_cmd(&["link", "set", &va, "up"]);
        ip_cmd(&["link", "set", &vb, "up"]);
        ip_cmd(&["addr", "add", &format!("10.235.{n}.1/24"), "dev", &vb]);
        let cfg = Config {
            switch: SwitchConfig {
                control: dir.sock("control"),
                idle_polls: 4,
                ..Default::default()
            },
            ports: vec![
                PortSpec::vhost_user("vm", dir.sock("vm"), SocketMode::Server),
                PortSpec::tap("host", &tap),
                PortSpec::uplink("up", &va),
            ],
        };
        let sw = Switch::start(cfg).unwrap();
        ip_cmd(&["addr", "add", &format!("10.234.{n}.1/24"), "dev", &tap]);
        ip_cmd(&["link", "set", &tap, "up"]);
        let listener = std::net::TcpListener::bind(format!("10.234.{n}.1:5001")).unwrap();
        let script = format!(
            "ip addr add 10.234.{n}.2/24 dev eth0\nip addr add 10.235.{n}.2/24 dev eth0\n\
             if ping -c 2 -W 5 10.234.{n}.1; then echo VNIO-TAP-OK; fi\n\
             if ping -c 2 -W 5 10.235.{n}.1; then echo VNIO-UPLINK-OK; fi\n\
             dd if=/dev/urandom of=/tmp/data bs=1024 count=256 2>/dev/null\n\
             echo VNIO-SENDING $(md5sum < /tmp/data)\nnc 10.234.{n}.1 5001 < /tmp/data; echo VNIO-SENT"
        );
        let initrd = dir.0.join("g.cpio");
        kit.initramfs(&initrd, &script);
        let mut g = Guest::start(
            &kit,
            &initrd,
            &dir.sock("vm"),
            "52:54:00:00:00:11",
            &dir.0.join("g.log"),
        );
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        // busybox nc exits once the host closes its side too.
        drop(conn);
        let console = g.wait_for("VNIO-SENT", BOOT).unwrap();
        assert!(
            console.contains("VNIO-TAP-OK"),
            "ping through the tap failed:\n{console}"
        );
        assert!(
            console.contains("VNIO-UPLINK-OK"),
            "ping through the uplink failed:\n{console}"
        );
        assert_eq!(data.len(), 256 * 1024);
        let md5 = std::process::Command::new("md5sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                std::io::Write::write_all(c.stdin.as_mut().unwrap(), &data)?;
                drop(c.stdin.take());
                c.wait_with_output()
            });
        let md5 = String::from_utf8(md5.unwrap().stdout).unwrap();
        let sent = console
            .lines()
            .find(|l| l.starts_with("VNIO-SENDING"))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        assert_eq!(
            md5.split_whitespace().next().unwrap(),
            sent,
            "the stream through the tap arrived intact"
        );
        for p in sw.handle().list().unwrap() {
            assert_eq!(p.stats.resets, 0, "{}", p.name);
        }
    });
}
