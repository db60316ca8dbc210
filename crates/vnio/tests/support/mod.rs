//! What the CLI's process tests share: a child killed and reaped however
//! the test ends, a directory removed however it ends, and a switch
//! started from a configuration file.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// Kills and reaps a child when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The test's directory, removed when the test ends, however it ends.
pub struct Tmp(pub PathBuf);

impl Tmp {
    /// A fresh directory for this process's test `tag`.
    pub fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("vnio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `vnio switch --config cfg`, its standard error to `stderr`.
pub fn start_switch_logged(cfg: &Path, stderr: impl Into<Stdio>) -> Reaped {
    Reaped(
        Command::new(VNIO)
            .args(["switch", "--config"])
            .arg(cfg)
            .stderr(stderr)
            .spawn()
            .unwrap(),
    )
}

/// `vnio switch --config cfg`, quiet.
pub fn start_switch(cfg: &Path) -> Reaped {
    start_switch_logged(cfg, Stdio::null())
}
