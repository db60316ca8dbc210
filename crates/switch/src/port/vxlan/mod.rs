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

use super::{DeliverCx, Described, Kind, RoundCx, Switch, Watch, Watched};
use crate::datapath::{DeliverError, Frame};
use crate::egress::Scheduler;
use crate::offload::Caps;
use crate::sys::udp::{self, Incoming, Outgoing, MAX_BATCH};
use crate::vlan::Tagging;
use crate::wire::vxlan;
use crate::wire::{udp as wudp, virtio_net};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

mod deliver;
mod evpn;
mod flow;
mod peers;
mod receive;
mod rx;
mod spec;

pub use flow::flow_port;
pub use peers::{Ipv4Net, Peers};
pub use rx::{RxFrame, VxlanRx};
pub use spec::{VxlanSpec, MIN_VTEP_LIMIT};

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
    /// Further VTEPs whose datagrams are accepted (see [`Peers`]).
    pub accept: Vec<Ipv4Net>,
    /// UDP destination port (and the port received on).
    pub dstport: u16,
    /// The flood list and the VTEPs heard come from BGP EVPN (through
    /// FRR, see [`crate::evpn`]); sources behind VTEPs are not learned.
    pub evpn: bool,
    /// Outer TTL (default: the kernel's).
    pub ttl: Option<u8>,
    /// The underlay's MTU: largest outer IPv4 packet.
    pub underlay_mtu: usize,
    /// What the underlay carries for this port, in bit/s, shared by the
    /// vNICs' egress shares (None: only their limits and reservations).
    pub capacity_bps: Option<u64>,
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
/// every accepted VTEP not on the list; strangers' datagrams are dropped
/// and counted with the port's drops, `unknown_vtep`).
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
    /// The vNICs' shares, limits and reservations toward the underlay;
    /// a flood is charged for every VTEP it goes to.
    pub sched: crate::egress::Scheduler,
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
                peers: Peers {
                    remotes: opts.remotes.clone().into_boxed_slice(),
                    accept: opts.accept.clone().into_boxed_slice(),
                },
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
            sched: crate::egress::Scheduler::new(opts.capacity_bps),
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

impl Kind for VxlanPort {
    // A datagram carries a finished frame: TSO super-frames and partial
    // checksums are completed in software before encapsulation
    // (`deliver_soft`), as for a guest without offloads; received frames
    // are as their sender finished them.
    fn rx_caps(&self) -> Caps {
        Caps::NONE
    }

    fn tx_caps(&self) -> Caps {
        Caps::NONE
    }

    fn watched(&self, out: &mut Vec<Watched>) {
        VxlanPort::watched(self, out)
    }

    fn on_readable(&mut self) {
        VxlanPort::on_readable(self)
    }

    fn sched(&self) -> Option<&Scheduler> {
        Some(&self.sched)
    }

    #[inline]
    fn sched_mut(&mut self) -> Option<&mut Scheduler> {
        Some(&mut self.sched)
    }

    /// A flood (no VTEP known) goes to every VTEP of the flood list.
    #[inline]
    fn copies(&self, to_vtep: Option<Ipv4Addr>) -> usize {
        match to_vtep {
            Some(_) => 1,
            None => self.fanout().max(1),
        }
    }

    /// Charged once per VTEP; a guest's flood, to its own limit too.
    fn charge_flood(&mut self, from: crate::PortId, guest: bool, bytes: usize) -> bool {
        let all = bytes * self.copies(None);
        if !guest {
            self.sched.charge(all);
            return true;
        }
        self.sched.charge_flood(from, all)
    }

    #[inline]
    fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError> {
        self.deliver_frame(f, tagging, cx.to_vtep, &cx.stats.rx)
    }

    /// The round's datagrams leave in one sendmmsg.
    fn end_round(&mut self, cx: RoundCx<'_>) -> Option<Instant> {
        self.flush(&cx.stats.rx);
        self.sched.wake_at(cx.now)
    }

    fn describe(&self) -> Described {
        Described::running("vxlan", VxlanPort::describe(self))
    }

    fn vteps(&self) -> Vec<VtepSnapshot> {
        VxlanPort::vteps(self)
    }

    fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize {
        VxlanPort::receive_from(sw, i, now, budget)
    }
}

#[cfg(test)]
mod tests;
