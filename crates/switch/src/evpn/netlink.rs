//! The bridge FDB over rtnetlink (AF_BRIDGE neighbours): a dump, then
//! RTM_NEWNEIGH and RTM_DELNEIGH as they happen, of the entries on one
//! `vxlan` device that carry a remote VTEP (`NDA_DST`): remote addresses,
//! and the all-zero address, which stands for the flood list.

use crate::sys::netlink;
use crate::wire::EthernetAddress;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;

const RTM_NEWNEIGH: u16 = 28;
const RTM_DELNEIGH: u16 = 29;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const AF_BRIDGE: u8 = 7;
const HDR: usize = 16;
const NDMSG: usize = 12;

/// One FDB entry with a remote VTEP, added or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neigh {
    /// Added (or replaced), or removed.
    pub added: bool,
    /// The address (all zero: a flood-list member).
    pub mac: EthernetAddress,
    /// The VTEP.
    pub vtep: Ipv4Addr,
}

/// What one read brought.
pub enum Read {
    /// An entry of the device (from the dump or an event).
    Neigh(Neigh),
    /// The dump is complete.
    DumpDone,
}

/// A netlink socket subscribed to neighbour changes.
pub struct Watch {
    fd: OwnedFd,
    ifindex: i32,
    buf: Vec<u8>,
    seq: u32,
}

impl Watch {
    /// Watches device `ifindex`. A large receive buffer makes an overrun
    /// (a burst of routes) rare; it is still handled (dump again).
    pub fn open(ifindex: i32) -> io::Result<Self> {
        Ok(Self {
            fd: netlink::neigh_socket(8 << 20)?,
            ifindex,
            buf: vec![0; 1 << 16],
            seq: 0,
        })
    }

    /// Waits up to `ms` milliseconds for something to read.
    pub fn wait(&self, ms: i32) {
        netlink::wait_readable(&self.fd, ms);
    }

    /// Asks for every AF_BRIDGE FDB entry; they arrive through [`Watch::read`].
    pub fn dump(&mut self) -> io::Result<()> {
        self.seq += 1;
        let mut m = [0u8; HDR + NDMSG];
        m[0..4].copy_from_slice(&((HDR + NDMSG) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        m[6..8].copy_from_slice(&flags.to_ne_bytes());
        m[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        m[HDR] = AF_BRIDGE;
        netlink::send(&self.fd, &m)
    }

    /// Everything one datagram holds, into `out`; `Ok(false)` when there
    /// was nothing to read. An error (ENOBUFS: the socket overran) means
    /// events may be lost: dump again.
    pub fn read(&mut self, out: &mut Vec<Read>) -> io::Result<bool> {
        let Some(n) = netlink::recv(&self.fd, &mut self.buf)? else {
            return Ok(false);
        };
        let mut at = 0;
        while at + HDR <= n {
            let b = &self.buf[at..n];
            let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let ty = u16::from_ne_bytes([b[4], b[5]]);
            if len < HDR || len > b.len() {
                break;
            }
            match ty {
                // A failed dump ends it too: what it brought is all there is.
                NLMSG_DONE | NLMSG_ERROR => out.push(Read::DumpDone),
                RTM_NEWNEIGH | RTM_DELNEIGH => {
                    if let Some(x) = parse(&b[HDR..len], self.ifindex, ty == RTM_NEWNEIGH) {
                        out.push(Read::Neigh(x));
                    }
                }
                _ => {}
            }
            at += (len + 3) & !3;
        }
        Ok(true)
    }
}

/// An ndmsg and its attributes: an entry of device `ifindex` with a VTEP.
fn parse(m: &[u8], ifindex: i32, added: bool) -> Option<Neigh> {
    if m.len() < NDMSG || m[0] != AF_BRIDGE {
        return None;
    }
    if i32::from_ne_bytes([m[4], m[5], m[6], m[7]]) != ifindex {
        return None;
    }
    let (mut mac, mut vtep) = (None, None);
    let mut at = NDMSG;
    while at + 4 <= m.len() {
        let len = u16::from_ne_bytes([m[at], m[at + 1]]) as usize;
        let ty = u16::from_ne_bytes([m[at + 2], m[at + 3]]) & 0x3fff;
        if len < 4 || at + len > m.len() {
            break;
        }
        let v = &m[at + 4..at + len];
        match (ty, v.len()) {
            (NDA_LLADDR, 6) => mac = Some(EthernetAddress::from_bytes(v)),
            (NDA_DST, 4) => vtep = Some(Ipv4Addr::new(v[0], v[1], v[2], v[3])),
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Some(Neigh {
        added,
        mac: mac?,
        vtep: vtep?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ndmsg for device `ifindex` with the given attributes.
    fn ndmsg(ifindex: i32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![0u8; NDMSG];
        m[0] = AF_BRIDGE;
        m[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        for (ty, v) in attrs {
            m.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            m.extend_from_slice(&ty.to_ne_bytes());
            m.extend_from_slice(v);
            m.resize((m.len() + 3) & !3, 0);
        }
        m
    }

    #[test]
    fn entries_with_a_vtep_on_the_device_are_read() {
        let mac = [2, 0, 0, 0, 0, 9];
        let dst = [10, 0, 0, 2];
        let m = ndmsg(5, &[(NDA_LLADDR, &mac), (NDA_DST, &dst)]);
        let n = parse(&m, 5, true).unwrap();
        assert_eq!(n.mac, EthernetAddress(mac));
        assert_eq!(n.vtep, Ipv4Addr::new(10, 0, 0, 2));
        assert!(n.added);
        // Another device, no VTEP (a local entry), another family, truncated.
        assert!(parse(&m, 6, true).is_none());
        assert!(parse(&ndmsg(5, &[(NDA_LLADDR, &mac)]), 5, true).is_none());
        let mut inet = m.clone();
        inet[0] = 2;
        assert!(parse(&inet, 5, true).is_none());
        assert!(parse(&m[..NDMSG + 6], 5, true).is_none());
    }
}
