//! The bridge FDB over rtnetlink (AF_BRIDGE neighbours): a dump, then
//! RTM_NEWNEIGH and RTM_DELNEIGH as they happen, of the entries on one
//! `vxlan` device that carry a remote VTEP (`NDA_DST`): remote addresses,
//! and the all-zero address, which stands for the flood list. Messages are
//! built and read with netlink-packet-route, the socket is netlink-sys's.

use crate::sys::netlink::force_rcvbuf;
use crate::sys::wait::readable_within;
use crate::wire::EthernetAddress;
use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

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
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// An entry of the device (from the dump or an event).
    Neigh(Neigh),
    /// The dump is complete.
    DumpDone,
}

/// A netlink socket subscribed to neighbour changes.
pub struct Watch {
    socket: Socket,
    ifindex: u32,
    buf: Vec<u8>,
    seq: u32,
}

impl Watch {
    /// Watches device `ifindex`. A large receive buffer makes an overrun
    /// (a burst of routes) rare; it is still handled (dump again).
    pub fn open(ifindex: i32) -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        // A smaller buffer only makes overruns likelier; they are handled.
        let _ = force_rcvbuf(&socket, 8 << 20);
        socket.bind_auto()?;
        socket.add_membership(libc::RTNLGRP_NEIGH)?;
        socket.set_non_blocking(true)?;
        Ok(Self {
            socket,
            ifindex: ifindex as u32,
            buf: Vec::with_capacity(1 << 16),
            seq: 0,
        })
    }

    /// Waits up to `ms` milliseconds for something to read.
    pub fn wait(&self, ms: u64) {
        let _ = readable_within(&self.socket, Duration::from_millis(ms));
    }

    /// Asks for every AF_BRIDGE FDB entry; they arrive through [`Watch::read`].
    pub fn dump(&mut self) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let mut request = NeighbourMessage::default();
        request.header.family = AddressFamily::Bridge;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(
            header,
            NetlinkPayload::from(RouteNetlinkMessage::GetNeighbour(request)),
        );
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        self.socket.send(&bytes, 0).map(|_| ())
    }

    /// Everything one datagram holds, into `out`; `Ok(false)` when there
    /// was nothing to read. An error (ENOBUFS: the socket overran) means
    /// events may be lost: dump again.
    pub fn read(&mut self, out: &mut Vec<Read>) -> io::Result<bool> {
        self.buf.clear();
        match self.socket.recv(&mut self.buf, 0) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
        let mut at = 0;
        while let Ok(frame) = NetlinkBuffer::new_checked(&self.buf[at..]) {
            let len = frame.length() as usize;
            out.extend(decode(&self.buf[at..at + len], self.ifindex));
            at += (len + 3) & !3;
            if at >= self.buf.len() {
                break;
            }
        }
        Ok(true)
    }
}

/// What one netlink message says about device `ifindex`: an entry with a
/// VTEP, the end of the dump, or nothing (other messages, other devices,
/// local entries, and messages that do not parse).
fn decode(frame: &[u8], ifindex: u32) -> Option<Read> {
    let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(frame).ok()?;
    let (neighbour, added) = match message.payload {
        // A failed dump ends it too: what it brought is all there is.
        NetlinkPayload::Done(_) | NetlinkPayload::Error(_) => return Some(Read::DumpDone),
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(n)) => (n, true),
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelNeighbour(n)) => (n, false),
        _ => return None,
    };
    if neighbour.header.family != AddressFamily::Bridge || neighbour.header.ifindex != ifindex {
        return None;
    }
    let (mut mac, mut vtep) = (None, None);
    for attribute in &neighbour.attributes {
        match attribute {
            NeighbourAttribute::LinkLayerAddress(a) if a.len() == 6 => {
                mac = Some(EthernetAddress::from_bytes(a));
            }
            // AF_BRIDGE leaves NDA_DST's family to its length.
            NeighbourAttribute::Destination(NeighbourAddress::Other(d)) if d.len() == 4 => {
                vtep = Some(Ipv4Addr::new(d[0], d[1], d[2], d[3]));
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet(d)) => vtep = Some(*d),
            _ => {}
        }
    }
    Some(Read::Neigh(Neigh {
        added,
        mac: mac?,
        vtep: vtep?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RTM_NEWNEIGH as the kernel sent it in a dump (`bridge fdb append
    /// 02:00:00:00:00:09 dev vx0 dst 10.0.0.2 self`, vx0 index 3): ndmsg
    /// AF_BRIDGE, NUD_NOARP|NUD_PERMANENT, NTF_SELF, then NDA_LLADDR,
    /// NDA_DST and NDA_CACHEINFO.
    const CAPTURED: &str =
        "440000001c00020001000000997700000700000003000000c00002010a00020002000000\
                            00090000080001000a0000021400030000000000c1010000c101000000000000";

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn a_captured_entry_with_a_vtep_on_the_device_is_read() {
        let m = bytes(CAPTURED);
        let want = Neigh {
            added: true,
            mac: EthernetAddress([2, 0, 0, 0, 0, 9]),
            vtep: Ipv4Addr::new(10, 0, 0, 2),
        };
        assert_eq!(decode(&m, 3), Some(Read::Neigh(want)));
        // As a removal.
        let mut del = m.clone();
        del[4] = 29;
        assert_eq!(
            decode(&del, 3),
            Some(Read::Neigh(Neigh {
                added: false,
                ..want
            }))
        );
        // Another device, another family, truncated.
        assert_eq!(decode(&m, 4), None);
        let mut inet = m.clone();
        inet[16] = 2;
        assert_eq!(decode(&inet, 3), None);
        assert_eq!(decode(&m[..16 + 12 + 6], 3), None);
        // No VTEP (a local entry): the message without NDA_DST and what follows.
        let mut local = m[..16 + 12 + 12].to_vec();
        local[0] = local.len() as u8;
        assert_eq!(decode(&local, 3), None);
    }

    #[test]
    fn the_end_of_a_dump_is_read() {
        let mut done = NetlinkMessage::<RouteNetlinkMessage>::new(
            NetlinkHeader::default(),
            NetlinkPayload::Done(Default::default()),
        );
        done.finalize();
        let mut m = vec![0; done.buffer_len()];
        done.serialize(&mut m);
        assert_eq!(decode(&m, 3), Some(Read::DumpDone));
    }
}
