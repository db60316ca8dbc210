//! `vnio switch` locks the pages it has mapped at start into memory
//! (`[switch] lock_memory`, default on), says so in its log, and leaves
//! them unlocked when the key is off.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;
use vnio_switch::control::{Client, Request};

/// The switch's `VmLck` in bytes, once its control socket answers.
fn locked_once_up(sw: &Reaped, ctl: &Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = loop {
        match Client::connect(ctl) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the switch never answered on {}: {e}", ctl.display()),
        }
    };
    c.request(&Request::PortList).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", sw.0.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmLck:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn run(dir: &Path, lock: Option<bool>) -> (u64, String) {
    let ctl = dir.join("ctl.sock");
    let cfg = dir.join("switch.toml");
    let key = lock.map_or(String::new(), |on| format!("lock_memory = {on}\n"));
    std::fs::write(
        &cfg,
        format!("[switch]\ncontrol = {:?}\n{key}", ctl.display().to_string()),
    )
    .unwrap();
    let log = dir.join("switch.log");
    let sw = start_switch_logged(&cfg, std::fs::File::create(&log).unwrap());
    let locked = locked_once_up(&sw, &ctl);
    drop(sw);
    let _ = std::fs::remove_file(&ctl);
    (locked, std::fs::read_to_string(&log).unwrap())
}

#[test]
fn the_switch_locks_its_pages_by_default_and_not_when_told() {
    let dir = Tmp::new("memlock");
    let (locked, log) = run(&dir.0, None);
    // /proc/self belongs to the process's effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root {
        // Root has CAP_IPC_LOCK: at least the program's code is locked.
        assert!(locked >= 1 << 20, "VmLck {locked} B; log:\n{log}");
        assert!(log.contains("memory locked: "), "{log}");
    } else {
        assert!(
            locked >= 1 << 20 || log.contains("memory not locked ([switch] lock_memory): "),
            "VmLck {locked} B and no warning; log:\n{log}"
        );
    }
    let (locked, log) = run(&dir.0, Some(false));
    assert_eq!(locked, 0, "locked with lock_memory = false; log:\n{log}");
    assert!(!log.contains("memory locked"), "{log}");
}
