//! A real peer: DPDK's testpmd with a virtio-user port (`dpdk-testpmd` from
//! Debian's dpdk-dev) on a switch port, in macswap mode, returns frames a
//! poll-mode endpoint sends through the switch: DPDK's vhost-user front-end
//! and virtio driver against our back-end, both directions. Prints a skip
//! line when testpmd is not installed.

mod common;

use common::*;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Testpmd(Child);

impl Drop for Testpmd {
    fn drop(&mut self) {
        // SIGTERM to `timeout`, which passes it on to testpmd (SIGKILL would orphan testpmd).
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn testpmd_present() -> bool {
    Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn testpmd_virtio_user_macswaps_frames_through_the_switch() {
    if !testpmd_present() {
        println!("skip: dpdk-testpmd not installed (Debian package dpdk-dev)");
        return;
    }
    bounded(Duration::from_secs(50), || {
        let dir = Dir::new("dpdk");
        let sw = switch(&dir, 2);
        let peer = [2, 0, 0, 0, 0, 0x09];
        let vdev = format!(
            "net_virtio_user0,path={},queues=1,queue_size=256,mac=02:00:00:00:00:09",
            dir.sock("p1").display()
        );
        let prefix = format!("vnio-test-{}", std::process::id());
        // testpmd exits when stdin closes: keep a pipe open until it is killed.
        // `timeout` bounds testpmd's life even if the test process dies without killing it.
        let child = Command::new("timeout")
            .args(["120", "dpdk-testpmd"])
            .args([
                "--lcores",
                "0@0,1@0",
                "--no-pci",
                "--no-huge",
                "-m",
                "512",
                "--file-prefix",
                &prefix,
                "--vdev",
                &vdev,
            ])
            .args(["--", "--forward-mode=macswap", "--total-num-mbufs=2048"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut tp = Testpmd(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sw
            .handle()
            .list()
            .unwrap()
            .iter()
            .any(|p| p.name == "p1" && p.running)
        {
            if let Ok(Some(status)) = tp.0.try_wait() {
                let mut err = String::new();
                let _ = tp.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("testpmd exited ({status}): {err}");
            }
            assert!(
                Instant::now() < deadline,
                "testpmd never started its queues"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut ep = endpoint(&dir, 2, 2);
        let mut f = vec![0x42u8; 64];
        f[..6].copy_from_slice(&peer);
        f[6..12].copy_from_slice(&mac(2).0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        let mut buf = [0u8; 2048];
        let mut rtts = Vec::new();
        // testpmd's forwarding starts a little after its queues: retry the first frame.
        let start = Instant::now();
        let mut first = true;
        while rtts.len() < 1000 {
            f[20..24].copy_from_slice(&(rtts.len() as u32).to_le_bytes());
            let t0 = Instant::now();
            ep.send_frame(&f).unwrap();
            let wait_until = t0 + if first { Duration::from_millis(200) } else { T };
            let got = loop {
                if let Some(n) = ep.poll_recv(&mut buf) {
                    break Some(n);
                }
                if Instant::now() > wait_until {
                    break None;
                }
                std::hint::spin_loop();
            };
            match got {
                Some(n) => {
                    assert_eq!(n, 64);
                    assert_eq!(&buf[..6], &mac(2).0, "destination swapped back to us");
                    assert_eq!(&buf[6..12], &peer, "source is testpmd");
                    assert_eq!(&buf[12..64], &f[12..64], "payload intact");
                    rtts.push(t0.elapsed());
                    first = false;
                }
                None if first => assert!(
                    start.elapsed() < Duration::from_secs(15),
                    "testpmd never returned a frame"
                ),
                None => panic!("frame {} lost", rtts.len()),
            }
        }
        rtts.sort();
        println!(
            "testpmd macswap round trip through the switch (64 B, unpinned, debug build): p50 {:?} p99 {:?}",
            rtts[rtts.len() / 2],
            rtts[rtts.len() * 99 / 100]
        );
        let p1 = sw
            .handle()
            .list()
            .unwrap()
            .into_iter()
            .find(|p| p.name == "p1")
            .unwrap();
        assert!(
            p1.stats.tx.packets >= 1000 && p1.stats.rx.packets >= 1000,
            "{:?}",
            p1.stats
        );
        assert_eq!(p1.stats.resets, 0);
    });
}
