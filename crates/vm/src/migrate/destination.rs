//! What starts a migration's destination QEMU and what undoes it, shared
//! by the local migration and `vnio vm incoming` on another machine: the
//! QEMU spawned detached with its output in a log, the list of what was
//! made (QEMU, switch ports, directory) removed if the migration fails,
//! and errors that carry QEMU's last word.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::del_port;
use crate::error::{Context, Error, Result};

/// What was created for the destination (here, or on HOST by `vnio vm
/// incoming`), undone if it fails: its QEMU, its switch ports, its directory.
#[derive(Default)]
pub(super) struct Made {
    pub(super) ports: Vec<(PathBuf, String)>,
    pub(super) child: Option<Child>,
    pub(super) dir: Option<PathBuf>,
}

impl Made {
    /// Kills the QEMU, removes the ports and the directory.
    pub(super) fn undo(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for (control, name) in self.ports.drain(..) {
            let _ = del_port(&control, &name);
        }
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Starts the destination QEMU `argv`, detached, its output to `log`;
/// `made` holds it (killed if what follows fails). Returns its pid.
pub(super) fn spawn_destination(argv: &[String], log: &Path, made: &mut Made) -> Result<u32> {
    let out = std::fs::File::create(log).ctx(|| format!("creating {}", log.display()))?;
    let err = out.try_clone().ctx(|| "duplicating the log file".into())?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    crate::sys::detach_and_pass_fds(&mut cmd, Vec::new());
    let child = made.child.insert(
        cmd.spawn()
            .ctx(|| format!("starting the destination {}", argv[0]))?,
    );
    Ok(child.id())
}

/// `e` with the last line the destination QEMU wrote to `log`, if any.
pub(super) fn with_qemu_log(e: Error, log: &Path) -> Error {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    match text.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(l) => Error::Guest(format!("{e}: destination QEMU said: {l}")),
        None => e,
    }
}
