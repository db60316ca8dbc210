//! DPDK testpmd on a virtio-user port of the switch, driven through its
//! command line (interactive mode on a pipe kept open).

use super::T;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::endpoint::Endpoint;

/// Whether dpdk-testpmd is installed (Debian package dpdk-dev).
pub fn present() -> bool {
    Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A running testpmd, its EAL file prefix, and its log.
pub struct Testpmd {
    child: Child,
    prefix: String,
    log: std::path::PathBuf,
}

impl Testpmd {
    /// testpmd on a virtio-user port with `queues` pairs at `socket`, MAC
    /// `mac`, forwarding in `mode` once started (`start`); `tag` names its
    /// prefix and log (in `dir`).
    pub fn start(
        dir: &Path,
        tag: &str,
        socket: &Path,
        queues: usize,
        mac: &str,
        mode: &str,
    ) -> Self {
        let vdev = format!(
            "net_virtio_user0,path={},queues={queues},cq=1,queue_size=256,mac={mac}",
            socket.display()
        );
        let prefix = format!("vnio-test-{}-{tag}", std::process::id());
        let log = dir.join(format!("{tag}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new("timeout")
            .args(["120", "dpdk-testpmd", "--lcores", "0@0,1@0", "--no-pci"])
            .args(["--no-huge", "-m", "512", "--file-prefix", &prefix])
            .args(["--vdev", &vdev, "--", "-i"])
            .arg(format!("--forward-mode={mode}"))
            .arg(format!("--rxq={queues}"))
            .arg(format!("--txq={queues}"))
            .arg("--total-num-mbufs=4096")
            .stdin(Stdio::piped())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut t = Testpmd { child, prefix, log };
        t.send("start");
        t
    }

    /// Sends a command line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Panics with the log when testpmd exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "testpmd exited ({status}): {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&self.prefix));
    }
}

/// An IPv4/UDP frame of flow `flow` (its source port), sequence `seq` in
/// the payload.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6], flow: u16, seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 2]);
    f[30..34].copy_from_slice(&[10, 0, 0, 9]);
    f[34..36].copy_from_slice(&(10000 + flow).to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_le_bytes());
    f
}

/// From `ep` (MAC `me`) to testpmd in macswap mode at `peer`: once a
/// warm-up frame comes back (testpmd forwards a little after its queues
/// start), 16 rounds of one frame for each of 32 flows; every frame comes
/// back to `me`, each flow's in order.
pub fn flows_through_macswap(ep: &mut Endpoint, peer: [u8; 6], me: [u8; 6]) {
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    'warm: loop {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "testpmd never returned a frame"
        );
        ep.send_frame(&udp_frame(peer, me, 999, 0)).unwrap();
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if ep.poll_recv(&mut buf).is_some() {
                break 'warm;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    while ep.poll_recv(&mut buf).is_some() {}
    let (flows, rounds) = (32u16, 16u32);
    let mut next = vec![0u32; usize::from(flows)];
    for seq in 0..rounds {
        for flow in 0..flows {
            ep.send_frame(&udp_frame(peer, me, flow, seq)).unwrap();
        }
        let mut got = 0;
        let until = Instant::now() + T;
        while got < flows {
            assert!(
                Instant::now() < until,
                "round {seq}: {got} of {flows} frames back"
            );
            let Some(n) = ep.poll_recv(&mut buf) else {
                std::hint::spin_loop();
                continue;
            };
            assert_eq!(n, 64);
            assert_eq!(&buf[..6], &me, "destination swapped back to us");
            let flow = u16::from_be_bytes([buf[34], buf[35]]) - 10000;
            let s = u32::from_le_bytes(buf[42..46].try_into().unwrap());
            assert_eq!(s, next[usize::from(flow)], "flow {flow} in order");
            next[usize::from(flow)] += 1;
            got += 1;
        }
    }
}
