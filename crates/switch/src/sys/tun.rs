//! tap devices: /dev/net/tun with IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, a
//! 12-byte virtio-net header (the same header virtio ports carry), and
//! checksum and TCP segmentation offloads on (TUNSETOFFLOAD).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

// `libc::Ioctl`: the request type differs between glibc (c_ulong) and musl (c_int).
const TUNSETIFF: libc::Ioctl = 0x4004_54ca;
const TUNSETVNETHDRSZ: libc::Ioctl = 0x4004_54d8;
const TUNSETOFFLOAD: libc::Ioctl = 0x4004_54d0;
const TUNSETPERSIST: libc::Ioctl = 0x4004_54cb;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens (creating if needed) the tap interface `name`, non-blocking, with
/// a virtio-net header of `vnet_hdr_len` bytes. Returns the file and the
/// interface's actual name.
pub fn open_tap(name: &str, vnet_hdr_len: i32, offloads: bool) -> io::Result<(File, String)> {
    if name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `IfReq` has its
    // layout (16-byte name, flags, padding to 40 bytes) and lives across the call.
    if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut len = vnet_hdr_len;
    // SAFETY: TUNSETVNETHDRSZ reads one int from the pointer, valid for the call.
    if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETVNETHDRSZ, &mut len as *mut i32) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // The host stack may hand over partially checksummed and TCP GSO frames
    // (the switch passes them to ports that negotiated the same, and
    // completes or segments them for the others); without this every frame
    // would be checksummed and cut to the MTU by the kernel first.
    // Without (a port configured `offloads = false`) the kernel segments and
    // checksums before the tap.
    let offloads = if offloads {
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
    } else {
        0
    };
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
    if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD, offloads as libc::c_ulong) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let end = req
        .name
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(libc::IFNAMSIZ);
    Ok((file, String::from_utf8_lossy(&req.name[..end]).into_owned()))
}

/// [`open_tap`] inside the network namespace whose file is `netns` (e.g.
/// /run/netns/NAME): a helper thread joins it (setns changes only the
/// calling thread) and opens /dev/net/tun there. The tap device is created
/// in, or found in, that namespace, and the returned file reaches it from
/// any thread.
pub fn open_tap_in(
    netns: &std::path::Path,
    name: &str,
    vnet_hdr_len: i32,
    offloads: bool,
) -> io::Result<(File, String)> {
    let ns = File::open(netns)?;
    let name = name.to_owned();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns takes a namespace fd (valid: `ns` lives across
            // the call) and a namespace type; it affects this thread only.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                return Err(io::Error::last_os_error());
            }
            open_tap(&name, vnet_hdr_len, offloads)
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the tap thread panicked")))
    })
}

/// Makes the tap device outlive its file (`on`), or go with it.
pub fn set_persist(file: &File, on: bool) -> io::Result<()> {
    // SAFETY: TUNSETPERSIST takes its argument by value; no memory is passed.
    if unsafe { libc::ioctl(file.as_raw_fd(), TUNSETPERSIST, on as libc::c_ulong) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
