//! Processes the lab starts: journaled by pid and start time, killed on drop.

use std::process::{Child, Command, ExitStatus};

use crate::error::{Context, Result};
use crate::journal::{Entry, Journal};

/// A child process owned by the lab: recorded in the journal right after it
/// is spawned (its pid cannot be known before), killed with SIGKILL and
/// reaped on drop, so `clean()` can kill it if this process dies first.
///
/// Typically built from [`crate::Netns::command`] to run a program inside a
/// namespace.
#[derive(Debug)]
pub struct Process {
    child: Child,
    journal: Journal,
    entry: Option<Entry>,
}

impl Process {
    /// Spawn `command`, journaled in the default journal.
    pub fn spawn(command: &mut Command) -> Result<Process> {
        Process::spawn_with_journal(command, &Journal::default())
    }

    /// Spawn `command`, journaled in `journal`.
    pub fn spawn_with_journal(command: &mut Command, journal: &Journal) -> Result<Process> {
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .spawn()
            .what(|| format!("starting process {program}"))?;
        let pid = child.id() as i32;
        // A child that already exited has no start time; nothing to record.
        let entry = Entry::process(pid);
        let mut process = Process {
            child,
            journal: journal.clone(),
            entry: None,
        };
        if let Some(entry) = entry {
            // On failure the guard kills the child: an unjournaled process
            // must not outlive us.
            journal.record(&entry)?;
            process.entry = Some(entry);
        }
        Ok(process)
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The underlying child (for its pipes, `try_wait`, ...).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Wait for the process to exit by itself.
    pub fn wait(mut self) -> Result<ExitStatus> {
        let pid = self.child.id();
        let status = self
            .child
            .wait()
            .what(|| format!("waiting for process {pid}"))?;
        self.forget();
        Ok(status)
    }

    /// Kill the process (SIGKILL) and reap it.
    pub fn kill(mut self) -> Result<ExitStatus> {
        self.stop()
    }

    fn stop(&mut self) -> Result<ExitStatus> {
        let pid = self.child.id();
        // Fails only if it was already reaped, which `wait` below reports.
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .what(|| format!("reaping process {pid}"))?;
        self.forget();
        Ok(status)
    }

    fn forget(&mut self) {
        if let Some(entry) = self.entry.take() {
            let _ = self.journal.forget(&entry);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.entry.is_some() || matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.stop();
        }
    }
}
