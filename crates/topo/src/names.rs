//! Names for the objects the lab creates: validation and unique generation.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Result};

/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;

/// Check an interface name the way the kernel will, before asking it.
pub fn check_ifname(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > IFNAME_MAX {
        "longer than 15 bytes"
    } else if name == "." || name == ".." {
        "reserved"
    } else if name
        .bytes()
        .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
    {
        "contains '/', ':', NUL or whitespace"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

/// Check a network namespace name: it becomes a file in /run/netns.
pub fn check_netns_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > 255 {
        "longer than 255 bytes"
    } else if name == "." || name == ".." {
        "reserved"
    } else if name
        .bytes()
        .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace())
    {
        "contains '/', NUL or whitespace"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_owned(),
        reason,
    })
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short identifier unique to this process and call: the pid and a
/// per-process counter, both in base 36 (at most 5 + 4 characters for
/// realistic values), so `vnio` + id + a one-letter suffix fits in an
/// interface name.
///
/// Also returns the counter value, e.g. to pick a distinct subnet per call.
pub fn unique_id() -> (String, u32) {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (format!("{}x{}", base36(std::process::id()), base36(n)), n)
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base36_digits() {
        assert_eq!(base36(0), "0");
        assert_eq!(base36(35), "z");
        assert_eq!(base36(36), "10");
        assert_eq!(base36(1295), "zz");
        assert_eq!(base36(46_656), "1000");
    }

    #[test]
    fn unique_ids_fit_in_ifname_and_differ() {
        let (a, n) = unique_id();
        let (b, m) = unique_id();
        assert_ne!(a, b);
        assert!(m > n);
        check_ifname(&format!("vnio{a}a")).unwrap();
        // The largest pid Linux hands out, and a 4-digit counter, still fit.
        let worst = format!("vnio{}x{}a", base36(4_194_304), base36(1_679_615));
        check_ifname(&worst).unwrap();
    }

    #[test]
    fn ifname_rules() {
        assert!(check_ifname("").is_err());
        assert!(check_ifname("0123456789abcdef").is_err());
        assert!(check_ifname("0123456789abcde").is_ok());
        assert!(check_ifname("a/b").is_err());
        assert!(check_ifname("a b").is_err());
        assert!(check_netns_name("vnio-a").is_ok());
        assert!(check_netns_name("..").is_err());
    }
}
