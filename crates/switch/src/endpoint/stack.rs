//! A minimal IPv4 host: answers ARP and ICMP echo, echoes UDP on one port,
//! learns neighbours from ARP, and builds the frames the request generator
//! sends. Pure functions over byte buffers; the endpoint moves the bytes.

use crate::wire::arp::{self, ArpOperation, ArpPacket, ArpRepr};
use crate::wire::ethernet::{self, EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
use crate::wire::icmp::{IcmpPacket, IcmpRepr};
use crate::wire::ipv4::{self, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr};
use crate::wire::udp::{self, UdpPacket, UdpRepr};
use std::net::SocketAddrV4;

/// Who the host is.
#[derive(Debug, Clone, Copy)]
pub struct HostConfig {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its IPv4 address.
    pub ip: Ipv4Address,
    /// UDP port whose datagrams are echoed back (None: no echo).
    pub echo_port: Option<u16>,
}

/// Neighbours learned from ARP (bounded, oldest replaced).
#[derive(Debug, Default)]
pub struct ArpCache {
    entries: Vec<(Ipv4Address, EthernetAddress)>,
}

impl ArpCache {
    const CAPACITY: usize = 64;

    /// The MAC of `ip`, if known.
    pub fn lookup(&self, ip: Ipv4Address) -> Option<EthernetAddress> {
        self.entries.iter().find(|e| e.0 == ip).map(|e| e.1)
    }

    /// Records `ip` at `mac`.
    pub fn insert(&mut self, ip: Ipv4Address, mac: EthernetAddress) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.0 == ip) {
            e.1 = mac;
            return;
        }
        if self.entries.len() == Self::CAPACITY {
            self.entries.remove(0);
        }
        self.entries.push((ip, mac));
    }
}

/// What a received frame meant to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Nothing for the caller (ARP, echo handled, or not for us).
    None,
    /// A UDP datagram for a port other than the echo port; the payload is
    /// `frame[offset..offset + len]`.
    Udp {
        /// Sender.
        src: SocketAddrV4,
        /// Destination port.
        dst_port: u16,
        /// Payload offset in the frame.
        offset: usize,
        /// Payload length.
        len: usize,
    },
    /// An ICMP echo reply.
    EchoReply {
        /// Sender.
        src: Ipv4Address,
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
    },
}

/// Handles one received frame: may write a reply frame into `out` (its
/// length in the second field) and reports what it meant.
pub fn handle(
    host: &HostConfig,
    arp_cache: &mut ArpCache,
    frame: &[u8],
    out: &mut [u8],
) -> (Event, Option<usize>) {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return (Event::None, None);
    };
    let dst = eth.dst();
    if dst != host.mac && !dst.is_broadcast() {
        return (Event::None, None);
    }
    match eth.ethertype() {
        EtherType::Arp => (Event::None, handle_arp(host, arp_cache, eth.payload(), out)),
        EtherType::Ipv4 => handle_ipv4(host, eth.src(), frame, out),
        _ => (Event::None, None),
    }
}

fn handle_arp(
    host: &HostConfig,
    cache: &mut ArpCache,
    payload: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    let a = ArpRepr::parse(&ArpPacket::new_checked(payload).ok()?).ok()?;
    if a.target_ip != host.ip {
        return None;
    }
    cache.insert(a.source_ip, a.source_mac);
    if a.operation != ArpOperation::Request {
        return None;
    }
    let reply = ArpRepr {
        operation: ArpOperation::Reply,
        source_mac: host.mac,
        source_ip: host.ip,
        target_mac: a.source_mac,
        target_ip: a.source_ip,
    };
    build_arp(out, a.source_mac, host.mac, &reply)
}

fn handle_ipv4(
    host: &HostConfig,
    peer_mac: EthernetAddress,
    frame: &[u8],
    out: &mut [u8],
) -> (Event, Option<usize>) {
    let l3 = &frame[ethernet::HEADER_LEN..];
    let Ok(ip) = Ipv4Packet::new_checked(l3) else {
        return (Event::None, None);
    };
    let Ok(ipr) = Ipv4Repr::parse(&ip) else {
        return (Event::None, None);
    };
    if ipr.dst != host.ip {
        return (Event::None, None);
    }
    let l4_off = ethernet::HEADER_LEN + ip.header_len();
    match ipr.protocol {
        IpProtocol::Icmp => {
            let Ok(p) = IcmpPacket::new_checked(ip.payload()) else {
                return (Event::None, None);
            };
            match IcmpRepr::parse(&p) {
                Ok(IcmpRepr::EchoRequest { ident, seq, data }) => {
                    let r = IcmpRepr::EchoReply { ident, seq, data };
                    (
                        Event::None,
                        build_icmp(out, peer_mac, host.mac, host.ip, ipr.src, &r),
                    )
                }
                Ok(IcmpRepr::EchoReply { ident, seq, .. }) => (
                    Event::EchoReply {
                        src: ipr.src,
                        ident,
                        seq,
                    },
                    None,
                ),
                Err(_) => (Event::None, None),
            }
        }
        IpProtocol::Udp => {
            let Ok(u) = UdpPacket::new_checked(ip.payload()) else {
                return (Event::None, None);
            };
            let Ok(ur) = UdpRepr::parse(&u, ipr.src, ipr.dst) else {
                return (Event::None, None);
            };
            if Some(ur.dst_port) == host.echo_port {
                let reply = build_udp(
                    out,
                    peer_mac,
                    host.mac,
                    host.ip,
                    ipr.src,
                    ur.dst_port,
                    ur.src_port,
                    u.payload(),
                );
                return (Event::None, reply);
            }
            let ev = Event::Udp {
                src: SocketAddrV4::new(ipr.src.into(), ur.src_port),
                dst_port: ur.dst_port,
                offset: l4_off + udp::HEADER_LEN,
                len: u.payload().len(),
            };
            (ev, None)
        }
        _ => (Event::None, None),
    }
}

/// Builds an Ethernet/ARP frame; returns its length.
pub fn build_arp(
    out: &mut [u8],
    dst: EthernetAddress,
    src: EthernetAddress,
    a: &ArpRepr,
) -> Option<usize> {
    let len = ethernet::HEADER_LEN + arp::PACKET_LEN;
    EthernetRepr {
        src,
        dst,
        ethertype: EtherType::Arp,
    }
    .emit(out)
    .ok()?;
    a.emit(out.get_mut(ethernet::HEADER_LEN..)?).ok()?;
    Some(len)
}

/// Builds a broadcast ARP request for `target` from `host`.
pub fn build_arp_request(out: &mut [u8], host: &HostConfig, target: Ipv4Address) -> Option<usize> {
    let a = ArpRepr {
        operation: ArpOperation::Request,
        source_mac: host.mac,
        source_ip: host.ip,
        target_mac: EthernetAddress::default(),
        target_ip: target,
    };
    build_arp(out, EthernetAddress::BROADCAST, host.mac, &a)
}

/// Builds an Ethernet/IPv4/ICMP frame; returns its length.
pub fn build_icmp(
    out: &mut [u8],
    dst_mac: EthernetAddress,
    src_mac: EthernetAddress,
    src: Ipv4Address,
    dst: Ipv4Address,
    icmp: &IcmpRepr<'_>,
) -> Option<usize> {
    let ip = Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        ttl: 64,
    };
    let len = ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp.buffer_len();
    if out.len() < len {
        return None;
    }
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(out)
    .ok()?;
    ip.emit(&mut out[ethernet::HEADER_LEN..], 0).ok()?;
    icmp.emit(&mut out[ethernet::HEADER_LEN + ipv4::HEADER_LEN..])
        .ok()?;
    Some(len)
}

/// Builds an Ethernet/IPv4/UDP frame; returns its length.
#[allow(clippy::too_many_arguments)]
pub fn build_udp(
    out: &mut [u8],
    dst_mac: EthernetAddress,
    src_mac: EthernetAddress,
    src: Ipv4Address,
    dst: Ipv4Address,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Option<usize> {
    let l4 = udp::HEADER_LEN + payload.len();
    let len = ethernet::HEADER_LEN + ipv4::HEADER_LEN + l4;
    if out.len() < len {
        return None;
    }
    EthernetRepr {
        src: src_mac,
        dst: dst_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(out)
    .ok()?;
    Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::Udp,
        payload_len: l4,
        ttl: 64,
    }
    .emit(&mut out[ethernet::HEADER_LEN..], 0)
    .ok()?;
    UdpRepr { src_port, dst_port }
        .emit(
            &mut out[ethernet::HEADER_LEN + ipv4::HEADER_LEN..],
            payload,
            src,
            dst,
        )
        .ok()?;
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(n: u8) -> HostConfig {
        HostConfig {
            mac: EthernetAddress([2, 0, 0, 0, 0, n]),
            ip: Ipv4Address([10, 0, 0, n]),
            echo_port: Some(7),
        }
    }

    #[test]
    fn answers_arp_and_learns() {
        let (a, b) = (host(1), host(2));
        let mut buf = [0u8; 64];
        let n = build_arp_request(&mut buf, &a, b.ip).unwrap();
        let mut cache_b = ArpCache::default();
        let mut out = [0u8; 64];
        let (ev, reply) = handle(&b, &mut cache_b, &buf[..n], &mut out);
        assert_eq!(ev, Event::None);
        assert_eq!(cache_b.lookup(a.ip), Some(a.mac));
        let mut cache_a = ArpCache::default();
        let (_, none) = handle(&a, &mut cache_a, &out[..reply.unwrap()], &mut buf);
        assert_eq!(none, None, "replies are not answered");
        assert_eq!(cache_a.lookup(b.ip), Some(b.mac));
        // A request for someone else is ignored.
        let n = build_arp_request(&mut buf, &a, Ipv4Address([10, 0, 0, 9])).unwrap();
        assert_eq!(handle(&b, &mut cache_b, &buf[..n], &mut out).1, None);
    }

    #[test]
    fn answers_ping_and_echoes_udp() {
        let (a, b) = (host(1), host(2));
        let mut req = [0u8; 128];
        let icmp = IcmpRepr::EchoRequest {
            ident: 5,
            seq: 6,
            data: b"abc",
        };
        let n = build_icmp(&mut req, b.mac, a.mac, a.ip, b.ip, &icmp).unwrap();
        let mut out = [0u8; 128];
        let (_, reply) = handle(&b, &mut ArpCache::default(), &req[..n], &mut out);
        let (ev, _) = handle(
            &a,
            &mut ArpCache::default(),
            &out[..reply.unwrap()],
            &mut req,
        );
        assert_eq!(
            ev,
            Event::EchoReply {
                src: b.ip,
                ident: 5,
                seq: 6
            }
        );

        let n = build_udp(&mut req, b.mac, a.mac, a.ip, b.ip, 4000, 7, b"hello").unwrap();
        let (_, reply) = handle(&b, &mut ArpCache::default(), &req[..n], &mut out);
        let m = reply.unwrap();
        match handle(&a, &mut ArpCache::default(), &out[..m], &mut req).0 {
            Event::Udp {
                src,
                dst_port,
                offset,
                len,
            } => {
                assert_eq!(src, "10.0.0.2:7".parse().unwrap());
                assert_eq!(dst_port, 4000);
                assert_eq!(&out[offset..offset + len], b"hello");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ignores_frames_for_others_and_garbage() {
        let (a, b) = (host(1), host(2));
        let mut req = [0u8; 128];
        let n = build_udp(
            &mut req,
            EthernetAddress([2, 0, 0, 0, 0, 9]),
            a.mac,
            a.ip,
            b.ip,
            1,
            7,
            b"x",
        )
        .unwrap();
        let mut out = [0u8; 128];
        assert_eq!(
            handle(&b, &mut ArpCache::default(), &req[..n], &mut out),
            (Event::None, None)
        );
        assert_eq!(
            handle(&b, &mut ArpCache::default(), &req[..10], &mut out),
            (Event::None, None)
        );
    }
}
