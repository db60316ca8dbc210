//! A VXLAN port (RFC 7348): the switch's frames to and from other VTEPs
//! (other vnio switches, the Linux `vxlan` device, a hardware VTEP) over
//! the host's IPv4 network, one VNI per port.
//!
//! Transport: a UDP socket bound to `local:dstport` receives (the kernel
//! routes, reassembles and checks the outer headers); a raw IPPROTO_UDP
//! socket bound to `local` sends, so the switch writes the UDP header and
//! gives each inner flow its own source port (§5: underlay ECMP and RSS
//! spread flows by it) while the kernel still routes and writes the outer
//! IPv4 header. Without CAP_NET_RAW the UDP socket sends, with `dstport`
//! as the source port of every flow.
//!
//! Both directions are batched: reads take up to a burst of datagrams with
//! one `recvmmsg` after epoll said the socket was readable (as a tap port
//! does), until it would block; encapsulated frames wait in a fixed set of
//! slots and leave with one `sendmmsg` per polling round (or when the slots
//! fill). A flood is encapsulated once and sent to every remote VTEP from
//! the same slot (head-end replication). Nothing is allocated after the
//! port is opened.
//!
//! The outer packet never fragments (DF, §4.3): an inner frame longer than
//! `underlay_mtu - 36` (outer IPv4 20 + UDP 8 + VXLAN 8 in front of it) is
//! dropped and counted (`too_big`) before it is copied, and the kernel's
//! EMSGSIZE for a route with a smaller MTU is counted the same way.

use super::{Watch, Watched};
use crate::stats::{DropReason, QueueStats};
use crate::sys::udp::{self, Incoming, Outgoing, MAX_BATCH};
use crate::wire::vxlan::{self, VxlanPacket, VxlanRepr};
use crate::wire::{udp as wudp, virtio_net};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

/// Most remote VTEPs in a port's flood list (a flood of one frame must fit
/// one send batch twice over).
pub const MAX_REMOTES: usize = MAX_BATCH / 2;
/// Datagrams one `recvmmsg` takes.
pub const RX_BATCH: usize = 32;
/// Frames waiting for the round's `sendmmsg`.
pub const TX_SLOTS: usize = 32;
/// Default underlay MTU.
pub const DEFAULT_UNDERLAY_MTU: usize = 1500;
/// Where a received datagram's VXLAN header sits in its slot: the 8 bytes
/// end where a 12-byte virtio-net header would, so the header can be
/// overwritten with an empty virtio-net header and the slot forwarded as
/// it is, like a tap read (no copy before the destination's).
const RX_OFF: usize = virtio_net::HEADER_LEN - vxlan::HEADER_LEN;
/// UDP + VXLAN headers in front of an outgoing inner frame.
const TX_HDR: usize = wudp::HEADER_LEN + vxlan::HEADER_LEN;

/// How a VXLAN port is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanOptions {
    /// The segment (24 bits).
    pub vni: u32,
    /// Outer source address (must be the host's, on the underlay).
    pub local: Ipv4Addr,
    /// The flood list: VTEPs that get broadcast, multicast and unknown unicast.
    pub remotes: Vec<Ipv4Addr>,
    /// UDP destination port (and the port received on).
    pub dstport: u16,
    /// Outer TTL (default: the kernel's).
    pub ttl: Option<u8>,
    /// The underlay's MTU: largest outer IPv4 packet.
    pub underlay_mtu: usize,
}

/// Why a VXLAN port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum VxlanError {
    /// The options are inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// A socket could not be set up.
    #[error("cannot {what}")]
    Socket {
        /// What was attempted.
        what: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Counters of one remote VTEP (a flood-list member, or `0.0.0.0` for
/// every VTEP not on the list: learned ones, strangers).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct VtepSnapshot {
    /// The VTEP's address.
    pub remote: String,
    /// Datagrams received from it with this port's VNI.
    pub packets_in: u64,
    /// Inner frame bytes received from it.
    pub bytes_in: u64,
    /// Datagrams sent to it.
    pub packets_out: u64,
    /// Inner frame bytes sent to it.
    pub bytes_out: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Count {
    packets: u64,
    bytes: u64,
}

/// A received datagram's inner frame, ready to forward: `len` bytes at
/// `off` in the receive buffer, a zeroed 12-byte virtio-net header first.
#[derive(Debug, Clone, Copy)]
pub struct RxFrame {
    /// Offset in the receive buffer ([`VxlanRx::frame`] reads it).
    pub off: usize,
    /// Length, virtio-net header included.
    pub len: usize,
    /// The sending VTEP.
    pub from: Ipv4Addr,
}

/// The receive half, taken out of the port while its frames are forwarded
/// (they are read in place from its buffer).
#[derive(Debug)]
pub struct VxlanRx {
    buf: Box<[u8]>,
    slot: usize,
    meta: [Incoming; RX_BATCH],
    n: usize,
    next: usize,
    vni: u32,
    /// Per VTEP (same order as the port's remotes, then "other").
    counts: Box<[Count]>,
    remotes: Box<[Ipv4Addr]>,
}

impl VxlanRx {
    /// The next datagram of the batch: its inner frame, or why it is dropped.
    pub fn next_frame(&mut self) -> Option<Result<RxFrame, DropReason>> {
        if self.next >= self.n {
            return None;
        }
        let k = self.next;
        self.next += 1;
        let m = self.meta[k];
        let slot = &mut self.buf[k * self.slot..(k + 1) * self.slot];
        if m.truncated {
            return Some(Err(DropReason::TooBig));
        }
        let d = &slot[RX_OFF..RX_OFF + m.len];
        let Ok(p) = VxlanPacket::new_checked(d) else {
            return Some(Err(DropReason::Malformed));
        };
        match VxlanRepr::parse(&p) {
            Ok(r) if r.vni == self.vni => {}
            _ => return Some(Err(DropReason::Vni)),
        }
        let inner = m.len - vxlan::HEADER_LEN;
        slot[..virtio_net::HEADER_LEN].fill(0);
        let from = *m.from.ip();
        let v = vtep_index(&self.remotes, from);
        self.counts[v].packets += 1;
        self.counts[v].bytes += inner as u64;
        Some(Ok(RxFrame {
            off: k * self.slot,
            len: virtio_net::HEADER_LEN + inner,
            from,
        }))
    }

    /// The bytes of a frame [`VxlanRx::next_frame`] returned.
    pub fn frame(&self, f: &RxFrame) -> &[u8] {
        &self.buf[f.off..f.off + f.len]
    }
}

/// Index of `ip` in the flood list, or the "other" row after it.
fn vtep_index(remotes: &[Ipv4Addr], ip: Ipv4Addr) -> usize {
    remotes
        .iter()
        .position(|&r| r == ip)
        .unwrap_or(remotes.len())
}

/// The port.
#[derive(Debug)]
pub struct VxlanPort {
    opts: VxlanOptions,
    sock: UdpSocket,
    /// Sends with per-flow source ports (absent without CAP_NET_RAW).
    raw: Option<OwnedFd>,
    readable: bool,
    rx: Option<Box<VxlanRx>>,
    /// Encapsulated frames: slot `k` holds UDP + VXLAN headers and the
    /// inner frame at `k * tx_slot`.
    tx: Box<[u8]>,
    tx_slot: usize,
    tx_used: usize,
    out: [Outgoing; MAX_BATCH],
    /// The VTEP row of each queued datagram and its inner length.
    out_vtep: [(u16, u32); MAX_BATCH],
    nout: usize,
    counts_out: Box<[Count]>,
}

impl VxlanPort {
    /// Opens the sockets.
    pub fn open(opts: VxlanOptions) -> Result<Self, VxlanError> {
        if opts.vni > vxlan::MAX_VNI {
            return Err(VxlanError::Invalid(format!(
                "vni {} is above 16777215",
                opts.vni
            )));
        }
        if opts.remotes.len() > MAX_REMOTES {
            return Err(VxlanError::Invalid(format!(
                "at most {MAX_REMOTES} remotes"
            )));
        }
        if !(576..=65535).contains(&opts.underlay_mtu) {
            return Err(VxlanError::Invalid(
                "underlay_mtu must be between 576 and 65535".into(),
            ));
        }
        let sock_err = |what: String| move |source| VxlanError::Socket { what, source };
        let at = SocketAddrV4::new(opts.local, opts.dstport);
        let sock = UdpSocket::bind(at).map_err(sock_err(format!("bind a UDP socket to {at}")))?;
        sock.set_nonblocking(true)
            .map_err(sock_err("make the UDP socket non-blocking".into()))?;
        udp::set_outer(sock.as_raw_fd(), opts.ttl)
            .map_err(sock_err("set the UDP socket's DF and TTL".into()))?;
        let raw = match udp::raw_udp(opts.local) {
            Ok(fd) => {
                udp::set_outer(fd.as_raw_fd(), opts.ttl)
                    .map_err(sock_err("set the raw socket's DF and TTL".into()))?;
                Some(fd)
            }
            Err(e) => {
                log::warn!(
                    "vxlan {at}: no raw socket ({e}): every flow leaves with source port {}",
                    opts.dstport
                );
                None
            }
        };
        let rx_slot = (RX_OFF + opts.underlay_mtu).next_multiple_of(64);
        let tx_slot = (TX_HDR + opts.underlay_mtu).next_multiple_of(64);
        let n = opts.remotes.len() + 1;
        Ok(Self {
            rx: Some(Box::new(VxlanRx {
                buf: vec![0u8; rx_slot * RX_BATCH].into_boxed_slice(),
                slot: rx_slot,
                meta: [Incoming::default(); RX_BATCH],
                n: 0,
                next: 0,
                vni: opts.vni,
                counts: vec![Count::default(); n].into_boxed_slice(),
                remotes: opts.remotes.clone().into_boxed_slice(),
            })),
            sock,
            raw,
            readable: true,
            tx: vec![0u8; tx_slot * TX_SLOTS].into_boxed_slice(),
            tx_slot,
            tx_used: 0,
            out: [Outgoing {
                off: 0,
                len: 0,
                to: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            }; MAX_BATCH],
            out_vtep: [(0, 0); MAX_BATCH],
            nout: 0,
            counts_out: vec![Count::default(); n].into_boxed_slice(),
            opts,
        })
    }

    /// The port's options.
    pub fn options(&self) -> &VxlanOptions {
        &self.opts
    }

    /// True when frames leave through the raw socket (per-flow source ports).
    pub fn per_flow_ports(&self) -> bool {
        self.raw.is_some()
    }

    /// "local:dstport vni N" for listings.
    pub fn describe(&self) -> String {
        format!(
            "{}:{} vni {}",
            self.opts.local, self.opts.dstport, self.opts.vni
        )
    }

    /// The largest inner frame that fits the underlay.
    pub fn max_inner(&self) -> usize {
        self.opts.underlay_mtu - vxlan::OVERHEAD
    }

    /// What the worker should watch.
    pub fn watched(&self, out: &mut Vec<Watched>) {
        out.push((self.sock.as_raw_fd(), Watch::Connection));
    }

    /// The socket became readable.
    pub fn on_readable(&mut self) {
        self.readable = true;
    }

    /// Takes the receive half with up to `max` datagrams read (none when
    /// the socket has not been readable since it last would have blocked).
    pub fn take_rx(&mut self, max: usize) -> Option<Box<VxlanRx>> {
        let mut rx = self.rx.take()?;
        rx.n = 0;
        rx.next = 0;
        if self.readable {
            let want = max.min(RX_BATCH);
            match udp::recv_batch(
                self.sock.as_raw_fd(),
                &mut rx.buf,
                rx.slot,
                RX_OFF,
                &mut rx.meta[..want],
            ) {
                Ok(n) => {
                    rx.n = n;
                    // Fewer than asked: the socket is drained.
                    self.readable = n == want;
                }
                Err(e) => {
                    log::debug!("vxlan {}: receive: {e}", self.describe());
                    self.readable = false;
                }
            }
        }
        Some(rx)
    }

    /// Gives the receive half back.
    pub fn put_rx(&mut self, rx: Box<VxlanRx>) {
        self.rx = Some(rx);
    }

    /// Whether the port can take an inner frame of `len` bytes to
    /// `fanout` VTEPs now; a full batch is sent first. `Err`: the frame is
    /// dropped for that reason.
    pub fn reserve(
        &mut self,
        len: usize,
        fanout: usize,
        stats: &QueueStats,
    ) -> Result<(), DropReason> {
        if len > self.max_inner() {
            return Err(DropReason::TooBig);
        }
        if fanout == 0 {
            return Err(DropReason::NoRoute);
        }
        if self.tx_used == TX_SLOTS || self.nout + fanout > MAX_BATCH {
            self.flush(stats);
        }
        Ok(())
    }

    /// The next free slot's room for an inner frame (after
    /// [`VxlanPort::reserve`]).
    pub fn slot(&mut self) -> &mut [u8] {
        let at = self.tx_used * self.tx_slot;
        &mut self.tx[at + TX_HDR..at + self.tx_slot]
    }

    /// Encapsulates the `len` bytes written at the start of
    /// [`VxlanPort::slot`] and queues them to `to`, or to every remote in
    /// the flood list when `to` is `None`.
    pub fn commit(&mut self, len: usize, to: Option<Ipv4Addr>) {
        let at = self.tx_used * self.tx_slot;
        let s = &mut self.tx[at..at + TX_HDR + len];
        let sport = flow_port(&s[TX_HDR..]);
        let ulen = (TX_HDR + len) as u16;
        // The UDP checksum stays zero (§5: SHOULD be zero over IPv4; the
        // inner frame carries its own checksums).
        s[..wudp::HEADER_LEN].copy_from_slice(&[
            (sport >> 8) as u8,
            sport as u8,
            (self.opts.dstport >> 8) as u8,
            self.opts.dstport as u8,
            (ulen >> 8) as u8,
            ulen as u8,
            0,
            0,
        ]);
        let _ = VxlanRepr { vni: self.opts.vni }.emit(&mut s[wudp::HEADER_LEN..]);
        self.tx_used += 1;
        let (off, dlen, port) = if self.raw.is_some() {
            (at, TX_HDR + len, 0)
        } else {
            (
                at + wudp::HEADER_LEN,
                vxlan::HEADER_LEN + len,
                self.opts.dstport,
            )
        };
        let mut push = |ip: Ipv4Addr, v: usize| {
            self.out[self.nout] = Outgoing {
                off,
                len: dlen,
                to: SocketAddrV4::new(ip, port),
            };
            self.out_vtep[self.nout] = (v as u16, len as u32);
            self.nout += 1;
        };
        match to {
            Some(ip) => push(ip, vtep_index(&self.opts.remotes, ip)),
            None => {
                for (v, &ip) in self.opts.remotes.iter().enumerate() {
                    push(ip, v);
                }
            }
        }
    }

    /// Sends the queued datagrams (one `sendmmsg`, more only when the
    /// kernel refuses one: it is counted and the rest go on).
    pub fn flush(&mut self, stats: &QueueStats) {
        let fd = match &self.raw {
            Some(r) => r.as_raw_fd(),
            None => self.sock.as_raw_fd(),
        };
        let mut done = 0;
        while done < self.nout {
            match udp::send_batch(fd, &self.tx, &self.out[done..self.nout]) {
                Ok(n) => {
                    for &(v, len) in &self.out_vtep[done..done + n] {
                        let c = &mut self.counts_out[usize::from(v)];
                        c.packets += 1;
                        c.bytes += u64::from(len);
                    }
                    done += n.max(1);
                }
                Err(e) => {
                    stats.drop(match e.raw_os_error() {
                        Some(libc::EMSGSIZE) => DropReason::TooBig,
                        Some(libc::EAGAIN | libc::ENOBUFS) => DropReason::RingFull,
                        _ => DropReason::NoRoute,
                    });
                    done += 1;
                }
            }
        }
        self.nout = 0;
        self.tx_used = 0;
    }

    /// Number of remote VTEPs a flood goes to.
    pub fn fanout(&self) -> usize {
        self.opts.remotes.len()
    }

    /// Per-VTEP counters: the flood list, then "0.0.0.0" for the others
    /// when any were seen.
    pub fn vteps(&self) -> Vec<VtepSnapshot> {
        let rx = self.rx.as_deref();
        let n = self.opts.remotes.len() + 1;
        (0..n)
            .filter_map(|v| {
                let i = rx.map(|r| r.counts[v]).unwrap_or_default();
                let o = self.counts_out[v];
                let remote = match self.opts.remotes.get(v) {
                    Some(ip) => ip.to_string(),
                    None if i.packets + o.packets == 0 => return None,
                    None => Ipv4Addr::UNSPECIFIED.to_string(),
                };
                Some(VtepSnapshot {
                    remote,
                    packets_in: i.packets,
                    bytes_in: i.bytes,
                    packets_out: o.packets,
                    bytes_out: o.bytes,
                })
            })
            .collect()
    }
}

/// The outer UDP source port for an inner frame: a hash of its addresses
/// and, for TCP and UDP over IPv4 or IPv6, its ports, folded into the
/// dynamic range 49152-65535 (§5). Frames of one flow always get the same
/// port (no reordering across underlay paths); different flows spread.
pub fn flow_port(inner: &[u8]) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: &[u8]| {
        for &x in b {
            h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    };
    let at = |a: usize, b: usize| inner.get(a..b).unwrap_or(&[]);
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([
        inner.get(12).copied().unwrap_or(0),
        inner.get(13).copied().unwrap_or(0),
    ]);
    if et == 0x8100 {
        l3 = 18;
        et = u16::from_be_bytes([
            inner.get(16).copied().unwrap_or(0),
            inner.get(17).copied().unwrap_or(0),
        ]);
    }
    let l4 = match et {
        0x0800 => {
            mix(at(l3 + 12, l3 + 20));
            let proto = inner.get(l3 + 9).copied().unwrap_or(0);
            mix(&[proto]);
            let ihl = usize::from(inner.get(l3).copied().unwrap_or(0) & 0x0f) * 4;
            // Fragments after the first have no ports.
            let frag = u16::from_be_bytes([
                inner.get(l3 + 6).copied().unwrap_or(0),
                inner.get(l3 + 7).copied().unwrap_or(0),
            ]) & 0x1fff;
            (matches!(proto, 6 | 17) && frag == 0).then_some(l3 + ihl)
        }
        0x86dd => {
            mix(at(l3 + 8, l3 + 40));
            let next = inner.get(l3 + 6).copied().unwrap_or(0);
            mix(&[next]);
            matches!(next, 6 | 17).then_some(l3 + 40)
        }
        _ => {
            mix(at(0, 12));
            None
        }
    };
    if let Some(p) = l4 {
        mix(at(p, p + 4));
    }
    let h = (h ^ (h >> 32)) as u32;
    49152 + (h % 16384) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::testing::TcpFrame as Tcp;

    #[test]
    fn flows_keep_their_port_and_spread() {
        let mut seen = std::collections::HashSet::new();
        for sport in 0..64u16 {
            let t = Tcp {
                ports: (1000 + sport, 5001),
                ..Tcp::default()
            };
            let f = t.build(false);
            let p = flow_port(&f);
            assert!(p >= 49152);
            assert_eq!(p, flow_port(&f), "the same flow, the same port");
            seen.insert(p);
        }
        assert!(seen.len() > 48, "64 flows over {} ports", seen.len());
        // Anything at all: no panic, always in range.
        for n in 0..80 {
            assert!(flow_port(&vec![0x45; n]) >= 49152);
        }
    }

    fn port_on_loopback(remotes: Vec<Ipv4Addr>) -> Option<VxlanPort> {
        VxlanPort::open(VxlanOptions {
            vni: 42,
            local: Ipv4Addr::LOCALHOST,
            remotes,
            dstport: 0,
            ttl: None,
            underlay_mtu: 1500,
        })
        .ok()
    }

    #[test]
    fn refuses_what_cannot_work() {
        let o = VxlanOptions {
            vni: vxlan::MAX_VNI + 1,
            local: Ipv4Addr::LOCALHOST,
            remotes: vec![],
            dstport: 0,
            ttl: None,
            underlay_mtu: 1500,
        };
        assert!(VxlanPort::open(o.clone()).is_err());
        let o = VxlanOptions {
            vni: 1,
            remotes: vec![Ipv4Addr::LOCALHOST; MAX_REMOTES + 1],
            ..o
        };
        assert!(VxlanPort::open(o).is_err());
    }

    #[test]
    fn frames_over_the_mtu_are_refused_before_the_copy() {
        let Some(mut p) = port_on_loopback(vec![Ipv4Addr::LOCALHOST]) else {
            return;
        };
        let s = QueueStats::default();
        assert_eq!(p.max_inner(), 1464);
        assert_eq!(p.reserve(1464, 1, &s), Ok(()));
        assert_eq!(p.reserve(1465, 1, &s), Err(DropReason::TooBig));
        assert_eq!(p.reserve(100, 0, &s), Err(DropReason::NoRoute));
    }

    /// A flood goes to every remote from one encapsulation (head-end
    /// replication); a unicast to one VTEP goes to it alone.
    #[test]
    fn floods_replicate_and_unicast_goes_to_one_vtep() {
        let p1 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = p1.local_addr().unwrap().port();
        let Ok(p3) = UdpSocket::bind(("127.0.0.3", port)) else {
            return;
        };
        let Ok(mut p) = VxlanPort::open(VxlanOptions {
            vni: 7,
            local: Ipv4Addr::new(127, 0, 0, 2),
            remotes: vec![Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 3)],
            dstport: port,
            ttl: None,
            underlay_mtu: 1500,
        }) else {
            return;
        };
        let stats = QueueStats::default();
        let frame = Tcp::default().build(false);
        for to in [None, Some(Ipv4Addr::new(127, 0, 0, 3))] {
            let fanout = if to.is_some() { 1 } else { p.fanout() };
            p.reserve(frame.len(), fanout, &stats).unwrap();
            p.slot()[..frame.len()].copy_from_slice(&frame);
            p.commit(frame.len(), to);
        }
        p.flush(&stats);
        let mut b = [0u8; 2048];
        let mut got = [0usize; 2];
        for (k, s) in [&p1, &p3].iter().enumerate() {
            s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
                .unwrap();
            while let Ok((n, _)) = s.recv_from(&mut b) {
                let d = VxlanPacket::new_checked(&b[..n]).unwrap();
                assert_eq!(VxlanRepr::parse(&d), Ok(VxlanRepr { vni: 7 }));
                assert_eq!(d.payload(), &frame[..]);
                got[k] += 1;
            }
        }
        assert_eq!(got, [1, 2], "the flood to both, the unicast to .3 only");
        let v = p.vteps();
        assert_eq!((v[0].packets_out, v[1].packets_out), (1, 2));
        assert_eq!(v.len(), 2, "no stranger seen: no others row");
    }

    /// A port sends to a plain UDP socket standing in for a VTEP, which
    /// checks the encapsulation; datagrams back with the right and a wrong
    /// VNI come out as a frame and a `vni` drop.
    #[test]
    fn encapsulates_and_decapsulates_over_loopback() {
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(pa) = peer.local_addr().unwrap() else {
            unreachable!()
        };
        // The port sends to the peer's port: as dstport it is also where
        // the port listens, so bind the port on another loopback address.
        let Ok(mut p) = VxlanPort::open(VxlanOptions {
            vni: 42,
            local: Ipv4Addr::new(127, 0, 0, 2),
            remotes: vec![Ipv4Addr::LOCALHOST],
            dstport: pa.port(),
            ttl: Some(7),
            underlay_mtu: 1500,
        }) else {
            return;
        };
        let stats = QueueStats::default();
        let frame = Tcp::default().build(false);
        p.reserve(frame.len(), p.fanout(), &stats).unwrap();
        p.slot()[..frame.len()].copy_from_slice(&frame);
        p.commit(frame.len(), None);
        p.flush(&stats);
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let mut b = [0u8; 2048];
        let (n, from) = peer.recv_from(&mut b).unwrap();
        let d = VxlanPacket::new_checked(&b[..n]).unwrap();
        assert_eq!(VxlanRepr::parse(&d), Ok(VxlanRepr { vni: 42 }));
        assert_eq!(d.payload(), &frame[..]);
        assert_eq!(from.ip().to_string(), "127.0.0.2");
        if p.per_flow_ports() {
            assert_eq!(from.port(), flow_port(&frame));
        }
        let v = p.vteps();
        assert_eq!((v[0].packets_out, v[0].bytes_out), (1, frame.len() as u64));
        // Back: one good, one of another VNI, one without the I flag.
        let to = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), pa.port());
        for (vni, flag) in [(42u32, 0x08u8), (43, 0x08), (42, 0)] {
            let mut dgram = vec![0u8; 8 + frame.len()];
            VxlanRepr { vni }.emit(&mut dgram).unwrap();
            dgram[0] = flag;
            dgram[8..].copy_from_slice(&frame);
            peer.send_to(&dgram, to).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut results = Vec::new();
        while results.len() < 3 && std::time::Instant::now() < deadline {
            p.on_readable();
            let mut rx = p.take_rx(RX_BATCH).unwrap();
            while let Some(r) = rx.next_frame() {
                results.push(r.map(|f| {
                    let b = rx.frame(&f);
                    assert_eq!(&b[..12], &[0; 12], "an empty virtio-net header");
                    assert_eq!(&b[12..], &frame[..]);
                    f.from
                }));
            }
            p.put_rx(rx);
        }
        assert_eq!(
            results,
            [
                Ok(Ipv4Addr::LOCALHOST),
                Err(DropReason::Vni),
                Err(DropReason::Vni)
            ]
        );
        let v = p.vteps();
        assert_eq!(v[0].packets_in, 1);
    }
}
