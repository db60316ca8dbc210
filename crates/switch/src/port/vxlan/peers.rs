//! Which VTEPs a VXLAN port hears: the flood list (`remotes`) and the
//! ranges it was told to accept (`accept`). A datagram from any other
//! address is dropped before its inner frame is looked at (`unknown_vtep`):
//! UDP source addresses are forgeable on an underlay without source
//! filtering, so this keeps strangers out, not a forger who can spoof a
//! listed VTEP (see docs/switch.md, "Threat model").

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 prefix, written `A.B.C.D/N` (a bare address is a /32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    addr: Ipv4Addr,
    len: u8,
}

impl Ipv4Net {
    /// The prefix `addr/len`, its host bits cleared; `None` when `len` > 32.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Self> {
        (len <= 32).then(|| Self {
            addr: Ipv4Addr::from(u32::from(addr) & Self::mask(len)),
            len,
        })
    }

    fn mask(len: u8) -> u32 {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }

    /// Whether `ip` is in the prefix.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.len) == u32::from(self.addr)
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for Ipv4Net {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not an IPv4 prefix (A.B.C.D/N)");
        let (a, len) = match s.split_once('/') {
            Some((a, n)) => (a, n.parse::<u8>().map_err(|_| bad())?),
            None => (s, 32),
        };
        let addr = a.parse().map_err(|_| bad())?;
        Self::new(addr, len).ok_or_else(bad)
    }
}

impl Serialize for Ipv4Net {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ipv4Net {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The VTEPs a port hears.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Peers {
    /// The flood list.
    pub remotes: Box<[Ipv4Addr]>,
    /// Further VTEPs it accepts (they get unicast once learned, no floods).
    pub accept: Box<[Ipv4Net]>,
}

impl Peers {
    /// The counter row of a datagram from `ip`: its place in the flood
    /// list, or the row after it for an accepted VTEP; `None` for a stranger.
    #[inline]
    pub fn row(&self, ip: Ipv4Addr) -> Option<usize> {
        match self.remotes.iter().position(|&r| r == ip) {
            Some(v) => Some(v),
            None => self
                .accept
                .iter()
                .any(|n| n.contains(ip))
                .then_some(self.remotes.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_contain_and_print() {
        let n: Ipv4Net = "192.0.2.77/24".parse().unwrap();
        assert_eq!(n.to_string(), "192.0.2.0/24");
        assert!(n.contains(Ipv4Addr::new(192, 0, 2, 1)));
        assert!(!n.contains(Ipv4Addr::new(192, 0, 3, 1)));
        let host: Ipv4Net = "10.0.0.1".parse().unwrap();
        assert!(host.contains(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(!host.contains(Ipv4Addr::new(10, 0, 0, 2)));
        let all: Ipv4Net = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(203, 0, 113, 9)));
        for bad in ["10.0.0.1/33", "10.0.0/8", "x/8", "10.0.0.1/"] {
            assert!(bad.parse::<Ipv4Net>().is_err(), "{bad}");
        }
    }

    #[test]
    fn strangers_have_no_row() {
        let p = Peers {
            remotes: vec![Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3)].into(),
            accept: vec!["10.1.0.0/16".parse().unwrap()].into(),
        };
        assert_eq!(p.row(Ipv4Addr::new(10, 0, 0, 3)), Some(1));
        assert_eq!(p.row(Ipv4Addr::new(10, 1, 200, 3)), Some(2));
        assert_eq!(p.row(Ipv4Addr::new(10, 0, 0, 4)), None);
    }
}
