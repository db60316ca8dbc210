//! The only unsafe code of the crate: what QEMU's child process does
//! between fork and exec.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the child a session leader (no terminal signals from the
/// launcher's session, so Ctrl-C on the launcher is the launcher's to
/// handle) and hands it `fds` as (open fd, number QEMU is told about).
pub fn detach_and_pass_fds(cmd: &mut Command, fds: Vec<(RawFd, RawFd)>) {
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (setsid, dup2, fcntl); it allocates
    // nothing (`fds` was built before the fork, and io::Error from an errno
    // does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            for &(fd, target) in &fds {
                if fd == target {
                    // Same number: just let it survive exec.
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, target) < 0 {
                    // dup2 leaves FD_CLOEXEC clear on the new number.
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
