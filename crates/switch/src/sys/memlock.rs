//! Locking the process's pages into memory (`[switch] lock_memory`): a
//! worker that touches a page of code the kernel dropped under memory
//! pressure waits for the disk while it holds its ports, for milliseconds
//! or more. Locked once at start, what is mapped then (the program, its
//! libraries, the heap) stays resident. Mappings made later, guests'
//! memory above all, are not locked: `MCL_FUTURE` would fault in all of a
//! front-end's memory table at its mapping.

/// Locks every page mapped now; returns the bytes locked (the process's
/// `VmLck`, when it can be read).
pub fn lock_current() -> std::io::Result<Option<u64>> {
    // SAFETY: mlockall takes flags only and changes no memory contents.
    if unsafe { libc::mlockall(libc::MCL_CURRENT) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(locked_bytes())
}

/// The process's locked memory (`VmLck` in /proc/self/status).
pub fn locked_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmLck:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
