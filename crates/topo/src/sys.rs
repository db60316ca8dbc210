//! The crate's only `unsafe`: hooking a child process between fork and exec.
//!
//! Everything else (unshare, setns, mount) goes through `nix`'s safe wrappers.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

/// Make the child of `cmd` join the network namespace `netns` before it execs.
///
/// The closure holds a reference to the namespace's fd, so the descriptor
/// stays open for as long as the `Command` can spawn, even if the `Netns` it
/// came from is dropped first. The fd is close-on-exec: the program itself
/// never sees it.
pub(crate) fn setns_before_exec(cmd: &mut Command, netns: Arc<OwnedFd>) {
    let hook = move || -> io::Result<()> {
        // Only one raw system call happens here (the `Arc` is only
        // dereferenced, never cloned or dropped): no allocation, no lock, no
        // libc state other than errno, which keeps the hook
        // async-signal-safe as required between fork and exec.
        // SAFETY: `setns` takes an fd and a flag and touches no memory of
        // ours; the fd is kept open by the `Arc` this closure holds.
        let rc = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc == 0 {
            Ok(())
        } else {
            // Reading errno and building an `io::Error` from a raw code does
            // not allocate.
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: `pre_exec` requires the hook to be async-signal-safe, because
    // it runs in the forked child of a possibly multi-threaded parent where
    // another thread may have held the allocator's or any other lock at fork
    // time. The hook above only issues setns(2) and reads errno, both
    // async-signal-safe; it does not allocate, lock, or unwind.
    unsafe {
        cmd.pre_exec(hook);
    }
}
