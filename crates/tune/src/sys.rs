//! The only module of `vnio-tune` with `unsafe`: thin, checked wrappers
//! over the system calls the standard library does not offer (ethtool and
//! iptables queries, absolute-deadline sleep, the monotonic clock, cpuid).
//! Every `unsafe` block says why its invariant holds.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SIOCETHTOOL` from `<linux/sockios.h>`.
// `libc::Ioctl`: the request type differs between glibc (c_ulong) and musl (c_int).
const SIOCETHTOOL: libc::Ioctl = 0x8946;
/// `ETHTOOL_GCOALESCE` from `<linux/ethtool.h>`.
const ETHTOOL_GCOALESCE: u32 = 0x0e;
/// `ETHTOOL_GFLAGS`: legacy feature flags, includes LRO.
const ETHTOOL_GFLAGS: u32 = 0x25;
/// `ETHTOOL_GGRO`: generic receive offload on/off.
const ETHTOOL_GGRO: u32 = 0x2b;
/// `ETH_FLAG_LRO` in the `ETHTOOL_GFLAGS` value.
const ETH_FLAG_LRO: u32 = 1 << 15;
/// `IPT_SO_GET_INFO` from `<linux/netfilter_ipv4/ip_tables.h>`.
const IPT_SO_GET_INFO: libc::c_int = 64;

/// Interrupt coalescing of one interface, as `ethtool -c` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Coalesce {
    /// `rx-usecs`.
    pub rx_usecs: u32,
    /// `rx-frames`.
    pub rx_frames: u32,
    /// `tx-usecs`.
    pub tx_usecs: u32,
    /// `tx-frames`.
    pub tx_frames: u32,
    /// `adaptive-rx`.
    pub adaptive_rx: bool,
    /// `adaptive-tx`.
    pub adaptive_tx: bool,
}

/// Receive offloads of one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Offloads {
    /// Large receive offload, `None` if the driver does not say.
    pub lro: Option<bool>,
    /// Generic receive offload, `None` if the driver does not say.
    pub gro: Option<bool>,
}

/// What the KVM CPUID leaves tell a guest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KvmCpuid {
    /// Hypervisor signature (leaf 0x4000_0000), e.g. `KVMKVMKVM`.
    pub signature: String,
    /// Feature bits (leaf 0x4000_0001 EAX), `KVM_FEATURE_*`.
    pub features: u32,
    /// Hint bits (leaf 0x4000_0001 EDX), `KVM_HINTS_*`.
    pub hints: u32,
}

/// `struct ifreq` with the `ifr_data` member of the union.
#[repr(C)]
struct IfReqData {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Opens a datagram socket for ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; a non-negative return is a new fd
    // that nobody else owns, so OwnedFd may take it.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs one `SIOCETHTOOL` request whose buffer starts with its `cmd` word.
fn ethtool(ifname: &str, buf: &mut [u32]) -> io::Result<()> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    let sock = ioctl_socket()?;
    let mut req = IfReqData {
        name: [0; libc::IFNAMSIZ],
        data: buf.as_mut_ptr().cast(),
        _pad: [0; 16],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: req is a properly laid out `struct ifreq` whose data pointer
    // points to `buf`, a live, writable buffer at least as large as the
    // ethtool structure selected by buf[0] (the callers size it for that
    // command); the kernel writes only within that structure.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReqData) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads interrupt coalescing (`ETHTOOL_GCOALESCE`).
pub fn ethtool_coalesce(ifname: &str) -> io::Result<Coalesce> {
    // struct ethtool_coalesce: cmd and 22 u32 fields.
    let mut buf = [0u32; 23];
    buf[0] = ETHTOOL_GCOALESCE;
    ethtool(ifname, &mut buf)?;
    Ok(Coalesce {
        rx_usecs: buf[1],
        rx_frames: buf[2],
        tx_usecs: buf[5],
        tx_frames: buf[6],
        adaptive_rx: buf[10] != 0,
        adaptive_tx: buf[11] != 0,
    })
}

/// Reads one `struct ethtool_value` query.
fn ethtool_value(ifname: &str, cmd: u32) -> io::Result<u32> {
    let mut buf = [cmd, 0u32];
    ethtool(ifname, &mut buf)?;
    Ok(buf[1])
}

/// Reads LRO (`ETHTOOL_GFLAGS`) and GRO (`ETHTOOL_GGRO`).
pub fn ethtool_offloads(ifname: &str) -> io::Result<Offloads> {
    let lro = ethtool_value(ifname, ETHTOOL_GFLAGS).map(|f| f & ETH_FLAG_LRO != 0);
    let gro = ethtool_value(ifname, ETHTOOL_GGRO).map(|v| v != 0);
    match (lro, gro) {
        (Err(e), Err(_)) => Err(e),
        (lro, gro) => Ok(Offloads {
            lro: lro.ok(),
            gro: gro.ok(),
        }),
    }
}

/// Number of entries and of built-in hooks in one legacy iptables table
/// (IPv4, or IPv6 with `ipv6`), through `IPT_SO_GET_INFO` /
/// `IP6T_SO_GET_INFO` (same number and layout); needs `CAP_NET_RAW` and
/// `CAP_NET_ADMIN`.
pub fn iptables_entries(ipv6: bool, table: &str) -> io::Result<(u32, u32)> {
    #[repr(C)]
    struct IptGetInfo {
        name: [u8; 32],
        valid_hooks: u32,
        hook_entry: [u32; 5],
        underflow: [u32; 5],
        num_entries: u32,
        size: u32,
    }
    let bytes = table.as_bytes();
    if bytes.is_empty() || bytes.len() >= 32 || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad table name",
        ));
    }
    let (family, level) = if ipv6 {
        (libc::AF_INET6, libc::IPPROTO_IPV6)
    } else {
        (libc::AF_INET, libc::IPPROTO_IP)
    };
    // SAFETY: socket() takes no pointers.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_RAW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = IptGetInfo {
        name: [0; 32],
        valid_hooks: 0,
        hook_entry: [0; 5],
        underflow: [0; 5],
        num_entries: 0,
        size: 0,
    };
    info.name[..bytes.len()].copy_from_slice(bytes);
    let mut len = std::mem::size_of::<IptGetInfo>() as libc::socklen_t;
    // SAFETY: info is a live, writable struct ipt_getinfo and len is its
    // exact size, so the kernel writes within it.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            IPT_SO_GET_INFO,
            (&mut info as *mut IptGetInfo).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.num_entries, info.valid_hooks.count_ones()))
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (through the vDSO where the
/// clocksource allows it).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a live, writable timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (absolute), as
/// cyclictest does; retries when a signal interrupts the sleep.
pub fn sleep_until_ns(deadline_ns: u64) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as _, // time_t: named only through the field (musl deprecates the alias)
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: ts is a valid timespec; with TIMER_ABSTIME the remaining
        // time pointer may be null.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        match rc {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The KVM paravirtual CPUID leaves, if the CPU says a hypervisor runs us.
#[cfg(target_arch = "x86_64")]
pub fn kvm_cpuid() -> Option<KvmCpuid> {
    use std::arch::x86_64::__cpuid;
    #[allow(unused_unsafe)]
    // SAFETY: cpuid exists on every x86_64 CPU and only reads registers.
    let leaf1 = unsafe { __cpuid(1) };
    if leaf1.ecx & (1 << 31) == 0 {
        return None;
    }
    #[allow(unused_unsafe)]
    // SAFETY: as above; hypervisor leaves are defined when bit 31 is set.
    let base = unsafe { __cpuid(0x4000_0000) };
    let mut sig = Vec::with_capacity(12);
    for reg in [base.ebx, base.ecx, base.edx] {
        sig.extend_from_slice(&reg.to_le_bytes());
    }
    let signature: String = String::from_utf8_lossy(&sig)
        .trim_end_matches('\0')
        .to_string();
    if !signature.starts_with("KVMKVMKVM") || base.eax < 0x4000_0001 {
        return Some(KvmCpuid {
            signature,
            features: 0,
            hints: 0,
        });
    }
    #[allow(unused_unsafe)]
    // SAFETY: as above; the base leaf says 0x4000_0001 exists.
    let feat = unsafe { __cpuid(0x4000_0001) };
    Some(KvmCpuid {
        signature,
        features: feat.eax,
        hints: feat.edx,
    })
}

/// Not on x86_64: no KVM CPUID leaves to read.
#[cfg(not(target_arch = "x86_64"))]
pub fn kvm_cpuid() -> Option<KvmCpuid> {
    None
}

/// Sets this thread's timer slack (the kernel may delay its timers by this
/// much to batch wake-ups; 50 µs by default for normal threads), and
/// returns the former value.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<u64> {
    // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns the value.
    let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    if old < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: PR_SET_TIMERSLACK takes the value by value, no pointer.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(old as u64)
}

/// Scheduling policy and priority of the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedPolicy {
    /// `SCHED_OTHER`, `SCHED_FIFO`, ...
    pub policy: libc::c_int,
    /// Real-time priority (0 for normal policies).
    pub priority: libc::c_int,
}

/// A `sched_param` with every field zero (glibc has one field, musl more).
fn zeroed_sched_param() -> libc::sched_param {
    // SAFETY: sched_param holds only integers, for which all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// The calling thread's scheduling policy.
pub fn sched_policy() -> io::Result<SchedPolicy> {
    let mut param = zeroed_sched_param();
    // SAFETY: pid 0 is the calling thread; param is a live, writable sched_param.
    let rc = unsafe { libc::sched_getparam(0, &mut param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pid 0 is the calling thread; no pointer is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SchedPolicy {
        policy,
        priority: param.sched_priority,
    })
}

/// Sets the calling thread's scheduling policy (`SCHED_FIFO` needs
/// `CAP_SYS_NICE`).
pub fn set_sched_policy(p: SchedPolicy) -> io::Result<()> {
    let mut param = zeroed_sched_param();
    param.sched_priority = p.priority;
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param read
    // by the kernel only during the call.
    let rc = unsafe { libc::sched_setscheduler(0, p.policy, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restores the default action of `SIGPIPE` (end the process quietly), as
/// command-line tools written in C have: the Rust runtime ignores it, so a
/// closed pipe (`vnio tune audit | head`) would otherwise end in a panic on
/// the next print.
pub fn default_sigpipe() {
    // SAFETY: setting a standard signal to SIG_DFL installs no handler and
    // touches no memory of this process.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Whether this process may write `path`, with its effective ids, as the
/// kernel would decide it (`faccessat(AT_EACCESS)`): catches read-only
/// mounts (`EROFS`), which permission bits do not show.
pub fn access_write(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: c is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
