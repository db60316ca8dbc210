//! Traffic across a migration: a paced TCP stream and a 10 ms ping between
//! two guests, and busybox ping logs read.

use std::time::Duration;

use super::{poll, run};
use crate::state::VmDir;

/// (transmitted, received) from busybox ping's summary.
pub fn ping_counts(summary: &str) -> (u64, u64) {
    let line = summary
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary in {summary:?}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

/// The unanswered sequence numbers of a busybox ping log, as ranges.
pub fn gaps(log: &str) -> String {
    let seqs: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split("seq=").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let mut out = Vec::new();
    for w in seqs.windows(2) {
        if w[1] > w[0] + 1 {
            out.push(format!("{}..{}", w[0] + 1, w[1] - 1));
        }
    }
    if out.is_empty() {
        "none in sequence".into()
    } else {
        out.join(", ")
    }
}

/// Traffic across a migration: a paced TCP stream from guest B to guest A
/// (3 MiB over about 10 s, busybox nc) and a ping from A to B every 10 ms
/// (for 30 s).
pub struct Traffic {
    blocks: u32,
    port: u16,
}

impl Traffic {
    /// Starts both (A at `a_ip`, B at `b_ip`); returns once they run.
    pub fn start(a: &VmDir, b: &VmDir, a_ip: &str, b_ip: &str) -> Traffic {
        let (blocks, port) = (192, 5001);
        run(
            b,
            &format!("dd if=/dev/urandom of=/tmp/send bs=16k count={blocks} 2>/dev/null; md5sum < /tmp/send > /tmp/send.md5"),
        );
        run(
            a,
            &format!("(sleep 600 | nc -l -p {port} > /tmp/recv 2>/dev/null) > /dev/null 2>&1 &"),
        );
        run(
            a,
            &format!("(ping -i 0.01 -w 30 {b_ip} > /tmp/ping.out 2>&1) > /dev/null 2>&1 &"),
        );
        std::thread::sleep(Duration::from_secs(1));
        run(
            b,
            &format!(
                "((i=0; while [ $i -lt {blocks} ]; do dd if=/tmp/send bs=16k skip=$i count=1 2>/dev/null; usleep 50000; i=$((i+1)); done) | nc -w 10 {a_ip} {port}) > /dev/null 2>&1 &"
            ),
        );
        std::thread::sleep(Duration::from_secs(3));
        Traffic { blocks, port }
    }

    /// Waits for both to end and asserts the stream arrived whole with the
    /// sender's md5 and at most 5% of the pings were lost (B: where the
    /// guest's command channel is now). Returns (pings sent, answered).
    pub fn check(&self, a: &VmDir, b: &VmDir) -> (u64, u64) {
        let bytes = self.blocks * 16 * 1024;
        let got = poll(a, "wc -c < /tmp/recv", Duration::from_secs(120), |o| {
            o.trim() == bytes.to_string()
        });
        assert_eq!(
            got.trim(),
            bytes.to_string(),
            "stream to port {}",
            self.port
        );
        let sent = run(b, "cat /tmp/send.md5");
        let recv = run(a, "md5sum < /tmp/recv");
        assert_eq!(
            sent.split_whitespace().next(),
            recv.split_whitespace().next(),
            "the TCP stream across the migration arrived intact"
        );
        let summary = poll(a, "cat /tmp/ping.out", Duration::from_secs(60), |o| {
            o.contains("packet loss")
        });
        let (tx, rx) = ping_counts(&summary);
        println!(
            "ping across the migration: {rx} of {tx} answered; unanswered: {}",
            gaps(&summary)
        );
        assert!(tx > 100, "{summary}");
        assert!(
            (tx - rx) * 100 <= tx * 5,
            "more than 5% of the pings lost: {summary}"
        );
        (tx, rx)
    }
}
