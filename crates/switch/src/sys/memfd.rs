//! Anonymous shared memory files (memfd), the memory a poll-mode endpoint
//! shares with the switch through the vhost-user memory table.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};

/// Creates a memfd of `size` bytes named `name` (close-on-exec).
pub fn create(name: &str, size: u64) -> io::Result<File> {
    create_with(name, size, false)
}

/// [`create`] on 2 MiB hugepages from the kernel's pool (`size` a multiple
/// of 2 MiB): the memory DPDK's drivers give their buffers.
pub fn create_huge(name: &str, size: u64) -> io::Result<File> {
    create_with(name, size, true)
}

fn create_with(name: &str, size: u64, huge: bool) -> io::Result<File> {
    let cname = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in memfd name"))?;
    let flags = libc::MFD_CLOEXEC | if huge { libc::MFD_HUGETLB } else { 0 };
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)?;
    if huge {
        // The pool is only drawn on at the first touch, where running short
        // kills the process (SIGBUS): reserve every page now instead, or fail.
        // SAFETY: `file` is a valid descriptor for the call's duration.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "{} MiB of 2 MiB hugepages: {e} (raise /proc/sys/vm/nr_hugepages)",
                    size >> 20
                ),
            ));
        }
    }
    Ok(file)
}
