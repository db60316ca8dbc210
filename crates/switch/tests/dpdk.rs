//! A real peer: DPDK's testpmd with a virtio-user port (`dpdk-testpmd` from
//! Debian's dpdk-dev) on a switch port, in macswap mode, returns frames a
//! poll-mode endpoint sends through the switch: DPDK's vhost-user front-end
//! and virtio driver against our back-end, both directions, on split and
//! packed rings (`packed_vq=1`, with and without `in_order=1`; the
//! features DPDK's driver ends up with are read from its log, and the
//! switch's `port list` says the same layout). Prints a
//! skip line when testpmd is not installed.

mod common;

use common::*;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// testpmd and its EAL file prefix.
struct Testpmd(Child, String);

impl Drop for Testpmd {
    fn drop(&mut self) {
        // SIGTERM to `timeout`, which passes it on to testpmd (SIGKILL would orphan testpmd).
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
        // EAL leaves its runtime directory behind.
        let _ = std::fs::remove_dir_all(std::path::Path::new("/var/run/dpdk").join(&self.1));
    }
}

const RING_PACKED: u64 = 1 << 34;
const IN_ORDER: u64 = 1 << 35;

/// One testpmd at a time: each busy-polls a core.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn testpmd_virtio_user_macswaps_frames_through_the_switch() {
    // virtio-user asks for VIRTIO_F_IN_ORDER unless told `in_order=0`.
    macswap("split", "", IN_ORDER);
}

#[test]
fn testpmd_on_packed_in_order_rings() {
    macswap(
        "packed-io",
        ",packed_vq=1,in_order=1",
        RING_PACKED | IN_ORDER,
    );
}

#[test]
fn testpmd_on_packed_rings_out_of_order() {
    macswap("packed", ",packed_vq=1,in_order=0", RING_PACKED);
}

/// The features DPDK's virtio driver negotiated, from its init log.
fn negotiated(log: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.contains("features after negotiate"))?;
    let hex = line.rsplit(['=', ' ']).find(|w| !w.is_empty())?;
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()
}

/// testpmd on a virtio-user port with `options` appended to its vdev
/// returns 1000 frames; its driver negotiated `want` of RING_PACKED and IN_ORDER.
fn macswap(tag: &'static str, options: &str, want: u64) {
    if !common::testpmd::present() {
        println!("skip: dpdk-testpmd not installed (Debian package dpdk-dev)");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let options = options.to_string();
    bounded(Duration::from_secs(50), move || {
        let dir = Dir::new(&format!("dpdk-{tag}"));
        let sw = switch(&dir, 2);
        let mut tp = start_testpmd(&dir, tag, &options);
        wait_running(&sw, &mut tp);
        let mut ep = endpoint(&dir, 2, 2);
        let mut rtts = round_trips(&mut ep);
        rtts.sort();
        println!(
            "testpmd ({tag}) macswap round trip through the switch (64 B, unpinned, debug build): p50 {:?} p99 {:?}",
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
        // The switch says which layout it serves, as DPDK's log does below.
        let served = p1.virtqueue.expect("running queues have a layout");
        assert_eq!(
            (served.packed, served.in_order),
            (want & RING_PACKED != 0, want & IN_ORDER != 0),
            "the switch serves {served}"
        );
        let features = tp.negotiated();
        assert_eq!(
            features & (RING_PACKED | IN_ORDER),
            want,
            "negotiated {features:#x}"
        );
    });
}

/// The MAC address testpmd's port answers from.
const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0x09];

/// testpmd in macswap mode on a virtio-user port on the switch's p1.
fn start_testpmd(dir: &Dir, tag: &str, options: &str) -> Testpmd {
    let vdev = format!(
        "net_virtio_user0,path={},queues=1,queue_size=256,mac=02:00:00:00:00:09{options}",
        dir.sock("p1").display()
    );
    let prefix = format!("vnio-test-{}-{tag}", std::process::id());
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
            "--log-level=pmd.net.virtio.init:debug",
        ])
        .args(["--", "--forward-mode=macswap", "--total-num-mbufs=2048"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Testpmd(child, prefix)
}

/// Waits until p1's queues run (testpmd started them).
fn wait_running(sw: &vnio_switch::daemon::Switch, tp: &mut Testpmd) {
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
}

/// 1000 round trips from `ep` to testpmd and back, each frame swapped and
/// intact; their times.
fn round_trips(ep: &mut vnio_switch::endpoint::Endpoint) -> Vec<Duration> {
    let peer = PEER;
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
    rtts
}

impl Testpmd {
    /// Closes testpmd's stdin (it exits) and reads the features its
    /// driver negotiated from its log.
    fn negotiated(&mut self) -> u64 {
        drop(self.0.stdin.take());
        let mut out = String::new();
        let _ = self.0.stdout.take().map(|mut o| o.read_to_string(&mut out));
        let mut err = String::new();
        let _ = self.0.stderr.take().map(|mut e| e.read_to_string(&mut err));
        negotiated(&out)
            .or_else(|| negotiated(&err))
            .expect("DPDK logs the negotiated features")
    }
}
