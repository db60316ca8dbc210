//! The machines of scripts/lab-machines (network namespaces with their own
//! sshd, sharing this file system) for the tests that reach other machines
//! over SSH: what they need, and bringing them up for a test (and down after
//! it) unless they already are.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where scripts/lab-machines keeps its state (the shipped scenario's
/// `ssh_config` is in it).
pub const MACHINES: &str = "/run/vnio/machines";

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/lab-machines")
}

/// The machines of scripts/lab-machines: brought up here (and down at the
/// end) unless they already are.
pub struct Machines {
    ours: bool,
}

impl Machines {
    pub fn up() -> Option<Machines> {
        if Path::new(MACHINES).join("ssh_config").exists() {
            return Some(Machines { ours: false });
        }
        let out = Command::new(script()).args(["up", "1"]).output().unwrap();
        if !out.status.success() {
            panic!(
                "scripts/lab-machines up: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Some(Machines { ours: true })
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        if self.ours {
            let _ = Command::new(script()).arg("down").output();
        }
    }
}

pub fn ready_or_skip() -> bool {
    if !vnio_lab::is_root() {
        eprintln!("skip: machines are namespaces with their own sshd: root needed");
        return false;
    }
    if !Path::new("/usr/sbin/sshd").exists() || Command::new("ssh").arg("-V").output().is_err() {
        eprintln!("skip: no /usr/sbin/sshd or ssh (install openssh-server: scripts/setup --e2e)");
        return false;
    }
    true
}
