//! Holding a PM QoS CPU latency request: the kernel keeps a value written to
//! `/dev/cpu_dma_latency` only while the file stays open, so a process must
//! hold it (`vnio tune hold-pm-qos`); closing it, or the process ending,
//! drops the request: nothing to revert, nothing left behind.

use std::io::Write;

use crate::error::{Result, TuneError};
use crate::host::{Host, Unread};

/// The device.
pub const DEVICE: &str = "/dev/cpu_dma_latency";

/// "No constraint" as the kernel reports it (`PM_QOS_CPU_LATENCY_DEFAULT_VALUE`
/// is 2000 s in µs).
pub const NO_CONSTRAINT_US: i32 = 2_000_000_000;

/// An open request; dropping it ends the request.
#[derive(Debug)]
pub struct Hold {
    _file: std::fs::File,
    /// The requested limit, µs.
    pub latency_us: i32,
}

/// Requests that no CPU enters an idle state whose exit latency exceeds
/// `latency_us`, for as long as the returned [`Hold`] lives.
pub fn hold(host: &Host, latency_us: i32) -> Result<Hold> {
    let path = host.path(DEVICE);
    let wrap = |source| TuneError::PmQos {
        path: DEVICE.to_string(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(wrap)?;
    f.write_all(&latency_us.max(0).to_ne_bytes())
        .map_err(wrap)?;
    Ok(Hold {
        _file: f,
        latency_us: latency_us.max(0),
    })
}

/// Reads the current aggregate request (µs): the device returns it as a
/// 32-bit binary integer; a text value is accepted too.
pub fn current(host: &Host) -> std::result::Result<i32, Unread> {
    let bytes = host.read_bytes(DEVICE)?;
    if bytes.len() == 4 {
        let v = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if v >= 0 {
            return Ok(v);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| {
            Unread::garbage(
                DEVICE,
                format!("expected a 32-bit latency, found {} bytes", bytes.len()),
            )
        })
}

/// Processes holding the device open: `(pid, command)` from `/proc/*/fd`.
/// Other users' processes are invisible without root; the count of
/// unreadable process directories is returned too.
pub fn holders(host: &Host) -> (Vec<(u32, String)>, usize) {
    let mut found = Vec::new();
    let mut hidden = 0;
    let Ok(pids) = host.list("/proc") else {
        return (found, hidden);
    };
    for pid in pids.iter().filter_map(|p| p.parse::<u32>().ok()) {
        let fd_dir = format!("/proc/{pid}/fd");
        let Ok(fds) = host.list(&fd_dir) else {
            hidden += 1;
            continue;
        };
        if fds.iter().any(|fd| {
            host.read_link(&format!("{fd_dir}/{fd}"))
                .is_ok_and(|t| t == DEVICE)
        }) {
            let comm = host
                .read(&format!("/proc/{pid}/comm"))
                .unwrap_or_else(|_| "?".into());
            found.push((pid, comm));
        }
    }
    (found, hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_root(tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("vnio-tune-pmqos-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("dev")).expect("mkdir");
        std::fs::create_dir_all(p.join("proc/42/fd")).expect("mkdir");
        std::fs::write(p.join("proc/42/comm"), "holder\n").expect("write");
        std::os::unix::fs::symlink(DEVICE, p.join("proc/42/fd/5")).expect("symlink");
        p
    }

    #[test]
    fn current_reads_binary_and_text_and_rejects_garbage() {
        let root = fake_root("cur");
        let host = Host::with_root(&root);
        std::fs::write(root.join("dev/cpu_dma_latency"), 20i32.to_ne_bytes()).expect("write");
        assert_eq!(current(&host), Ok(20));
        std::fs::write(root.join("dev/cpu_dma_latency"), "15\n").expect("write");
        assert_eq!(current(&host), Ok(15));
        std::fs::write(root.join("dev/cpu_dma_latency"), "-3\n").expect("write");
        let e = current(&host).expect_err("negative");
        assert_eq!(
            e.to_string(),
            "/dev/cpu_dma_latency: expected a 32-bit latency, found 3 bytes"
        );
        let (h, hidden) = holders(&host);
        assert_eq!((h, hidden), (vec![(42, "holder".to_string())], 0));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn hold_writes_the_request_as_a_binary_s32() {
        let root = fake_root("hold");
        let host = Host::with_root(&root);
        std::fs::write(root.join("dev/cpu_dma_latency"), []).expect("write");
        let h = hold(&host, 3).expect("hold");
        assert_eq!(h.latency_us, 3);
        assert_eq!(
            std::fs::read(root.join("dev/cpu_dma_latency")).expect("read"),
            3i32.to_ne_bytes()
        );
        drop(h);
        let e = hold(&Host::with_root(root.join("nowhere")), 1).expect_err("no device");
        assert!(crate::apply::error_chain(&e).starts_with(
            "cannot hold a PM QoS CPU latency request through /dev/cpu_dma_latency: "
        ));
        let _ = std::fs::remove_dir_all(root);
    }
}
