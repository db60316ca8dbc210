//! The only unsafe code of the crate: what QEMU's child process does
//! between fork and exec, and the ethtool ioctl a guest's init uses to turn
//! on a multiqueue NIC's queue pairs (busybox has no `ethtool`).

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

/// `struct ethtool_channels` (linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// One SIOCETHTOOL request on `dev` through socket `sock`.
fn ethtool(sock: &std::os::fd::OwnedFd, dev: &str, ch: &mut EthtoolChannels) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = dev.as_bytes();
    if name.is_empty() || name.len() >= ifr.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (ch as *mut EthtoolChannels).cast();
    // SAFETY: SIOCETHTOOL reads the ifreq and the ethtool_channels its data
    // points to (both live for the call) and writes only into the latter.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets NIC `dev`'s combined channels (queue pairs) to `count`, as
/// `ethtool -L DEV combined COUNT`; returns the driver's maximum.
pub fn set_combined_channels(dev: &str, count: u32) -> io::Result<u32> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    ethtool(&sock, dev, &mut ch)?;
    if count > ch.max_combined {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{dev} has at most {} combined channels", ch.max_combined),
        ));
    }
    ch.cmd = ETHTOOL_SCHANNELS;
    ch.combined_count = count;
    ethtool(&sock, dev, &mut ch)?;
    Ok(ch.max_combined)
}
