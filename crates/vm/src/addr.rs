//! Addresses on the launcher's command line: `ADDR/PREFIX` and MACs.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An interface address with its prefix length: `10.0.0.2/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not an address with prefix: {s:?} (try 10.0.0.2/24)");
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for Cidr {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// An Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// A stable locally-chosen MAC for NIC `index` of VM `name`, in QEMU's
    /// 52:54:00 range, so a VM keeps its MAC across restarts (switch FDBs,
    /// neighbour caches and captures stay readable).
    pub fn for_vm(name: &str, index: usize) -> Mac {
        // FNV-1a: tiny, stable across Rust versions (unlike DefaultHasher).
        let mut h: u32 = 0x811c_9dc5;
        for b in name.bytes().chain([0, index as u8]) {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        let [a, b, _, _] = h.to_be_bytes();
        Mac([0x52, 0x54, 0x00, a, b, index as u8])
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not a MAC address: {s:?} (try 52:54:00:12:34:56)");
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut m = [0u8; 6];
        for (o, p) in m.iter_mut().zip(parts) {
            if p.len() != 2 {
                return Err(bad());
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if m[0] & 1 == 1 {
            return Err(format!("{s} is a multicast address, not a NIC's"));
        }
        Ok(Mac(m))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl From<Mac> for String {
    fn from(m: Mac) -> String {
        m.to_string()
    }
}

impl TryFrom<String> for Mac {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_and_print() {
        let c: Cidr = "10.0.0.2/24".parse().unwrap();
        assert_eq!(c.prefix, 24);
        assert_eq!(c.to_string(), "10.0.0.2/24");
        assert!("fd00::2/64".parse::<Cidr>().is_ok());
        for bad in ["10.0.0.2", "10.0.0.2/33", "x/24", "fd00::1/129"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_parse_print_and_are_stable_per_vm() {
        let m: Mac = "52:54:00:AB:cd:01".parse().unwrap();
        assert_eq!(m.to_string(), "52:54:00:ab:cd:01");
        assert!("01:00:5e:00:00:01".parse::<Mac>().is_err(), "multicast");
        assert!("52:54:00:ab:cd".parse::<Mac>().is_err());
        assert_eq!(Mac::for_vm("a", 0), Mac::for_vm("a", 0));
        assert_ne!(Mac::for_vm("a", 0), Mac::for_vm("b", 0));
        assert_ne!(Mac::for_vm("a", 0), Mac::for_vm("a", 1));
        assert_eq!(Mac::for_vm("a", 3).0[..3], [0x52, 0x54, 0x00]);
    }
}
