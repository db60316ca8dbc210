//! Port kinds, and the one place the switch dispatches on a port's kind.
//!
//! Every kind has the same shape. Its keys ([`KindSpec`], `spec.rs`'s
//! `KindKeys`): their defaults, their checks and the opening of the port.
//! The port (`Kind`): the descriptors the worker watches ([`Watch`]), the
//! two data-path halves (frames from the port: `receive`; frames to the
//! port: `deliver`), the round's end (`end_round`: what it queued leaves,
//! its calls go), its offload capabilities, lending where a kind lends
//! part of itself to another worker, what the control plane shows of it
//! (`describe`, `vteps`) and what goes when it is deleted (`release`).
//! `kinds!` is the one list of kinds: it makes [`Port`] and [`KindSpec`]
//! and the dispatch over them (enum dispatch: the forwarding loop stays
//! monomorphic, no trait object, no box). Adding a kind is its own folder
//! (the port, `Kind`, its keys, `KindKeys`), its `mod` line, and one line
//! in `kinds!`.

pub mod flow_hash;
mod local;
pub mod tap;
mod turns;
pub mod uplink;
pub mod vhost_user;
pub mod vxlan;

pub(crate) use local::assemble;
pub(crate) use turns::in_turns;
pub use turns::QUEUE_TURN;

use crate::datapath::{DeliverError, Frame, FrameCtx, Fwd, PortRuntime};
use crate::egress::Scheduler;
use crate::offload::Caps;
use crate::stats::{DropReason, PortStats};
use crate::vhost_user::buffers::Src;
use crate::vhost_user::chain::Chain;
use crate::vlan::Tagging;
use crate::PortId;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::time::Instant;
use tap::{TapPort, TapSpec};
use uplink::{UplinkPort, UplinkSpec};
use vhost_user::{RxPlan, VhostUserPort, VhostUserSpec};
use vxlan::{VxlanPort, VxlanSpec};

/// The kinds of ports: the one list. Each line names a kind's variant,
/// its port type and its keys' type, and makes [`Port`], [`KindSpec`] and
/// the dispatch over them: `each_kind!` and `each_spec!` (enum dispatch, as
/// the rings' `ring!` in `vhost_user/queue.rs`), and [`receive`]. (`$d` is
/// a `$` for the macros it defines.)
macro_rules! kinds {
    ($d:tt $($(#[$doc:meta])* $v:ident($port:ident, $keys:ident),)*) => {
        /// A port of any kind.
        // One value per port: its size does not matter, a Box would add a
        // pointer chase per frame.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        pub enum Port {
            $($(#[$doc])* $v($port),)*
        }

        /// A port's kind and the keys that belong to it (`kind = "..."`,
        /// the variant's name in kebab case).
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        #[serde(tag = "kind", rename_all = "kebab-case")]
        pub enum KindSpec {
            $($(#[$doc])* $v($keys),)*
        }

        /// Evaluates `$e` with `$p` bound to the port of whatever kind
        /// `$port` holds: the one dispatch every `Kind` call goes through.
        macro_rules! each_kind {
            ($d port:expr, $d p:ident => $d e:expr) => {
                match $d port {
                    $(Port::$v($d p) => $d e,)*
                }
            };
        }

        /// Evaluates `$e` with `$k` bound to the keys of whatever kind
        /// `$spec` holds.
        macro_rules! each_spec {
            ($d spec:expr, $d k:ident => $d e:expr) => {
                match $d spec {
                    $(KindSpec::$v($d k) => $d e,)*
                }
            };
        }

        /// Up to `budget` frames from the port in slot `i` of `sw`, handed
        /// to the switch; the frames taken.
        #[inline]
        pub(crate) fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize {
            match sw.port_mut(i) {
                $(Some(Port::$v(_)) => $port::receive(sw, i, now, budget),)*
                None => 0,
            }
        }
    };
}

kinds! { $
    /// vhost-user virtio-net.
    VhostUser(VhostUserPort, VhostUserSpec),
    /// A tap interface (the host stack, or a namespace the interface is moved into).
    Tap(TapPort, TapSpec),
    /// A host interface through an AF_PACKET socket.
    Uplink(UplinkPort, UplinkSpec),
    /// A VXLAN tunnel endpoint (RFC 7348): frames to and from remote VTEPs over UDP.
    Vxlan(VxlanPort, VxlanSpec),
}

// After the list: its keys' dispatch (`each_spec!`) is used there.
pub mod spec;

/// What the switch asks of every kind of port.
pub(crate) trait Kind {
    /// The offloads the port takes as a destination.
    fn rx_caps(&self) -> Caps;
    /// The offloads the port may use as a source.
    fn tx_caps(&self) -> Caps;
    /// What the worker should watch now.
    fn watched(&self, out: &mut Vec<Watched>);
    /// A watched descriptor became readable (a vhost-user port's events,
    /// its front-end's messages, are the data path's to handle).
    fn on_readable(&mut self) {}
    /// The egress scheduler of a port whose frames leave the host (an
    /// uplink, a VXLAN port): the vNICs' shares, limits and reservations
    /// apply to what they send to it.
    fn sched(&self) -> Option<&Scheduler> {
        None
    }
    /// [`Kind::sched`], mutable.
    fn sched_mut(&mut self) -> Option<&mut Scheduler> {
        None
    }
    /// Whether this is part of a port lent by another worker's port (an
    /// uplink's receive queue, a vNIC's queue pair).
    fn is_lent(&self) -> bool {
        false
    }
    /// How many frames or datagrams one frame to the port becomes (a
    /// VXLAN port's flood, `to_vtep` unknown: one per VTEP).
    fn copies(&self, _to_vtep: Option<Ipv4Addr>) -> usize {
        1
    }
    /// Whether the port can queue a frame of `len` bytes now (a full
    /// transmit ring holds frames back).
    fn tx_ready(&mut self, _len: usize) -> bool {
        true
    }
    /// Charges a flood of `bytes` from port `from` (a guest when `guest`)
    /// to the port's egress scheduler; false: the sender is past its
    /// limit and the flood does not go here.
    fn charge_flood(&mut self, _from: PortId, _guest: bool, _bytes: usize) -> bool {
        true
    }
    /// Delivers a classified frame; the frame's bytes (without a
    /// virtio-net header) on success.
    fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError>;
    /// The polling round ends: what the port queued leaves, its guest is
    /// called. Returns when the port wants the worker back.
    fn end_round(&mut self, _cx: RoundCx<'_>) -> Option<Instant> {
        None
    }
    /// Frames from the port in slot `i` of `sw`, up to `budget`, each
    /// handed to the switch. Returns the frames taken.
    fn receive<S: Switch>(sw: &mut S, i: usize, now: Instant, budget: usize) -> usize;
    /// What the control plane shows of the port.
    fn describe(&self) -> Described;
    /// The port was deleted: what must go at once (before a port of the
    /// same name may come) goes; the rest goes when it is dropped.
    fn release(&mut self) {}
    /// The remote VTEPs the port sends to and hears (a VXLAN port's).
    fn vteps(&self) -> Vec<vxlan::VtepSnapshot> {
        Vec::new()
    }
}

/// What the control plane shows of a port's kind and state.
pub struct Described {
    /// The kind's name (`vhost-user`, `tap`, `uplink`, `uplink-queue`, `vxlan`).
    pub kind: &'static str,
    /// Where it is: a socket's path, an interface, a tunnel's addresses.
    pub at: String,
    /// A vhost-user socket's side.
    pub mode: Option<SocketMode>,
    /// A front-end is connected (always, for kinds without one).
    pub connected: bool,
    /// Its queues run.
    pub running: bool,
    /// The port is the host's wire (an uplink): it shows its egress
    /// capacity rather than a sender's share.
    pub wire: bool,
}

impl Described {
    /// A port without a front-end, always running.
    pub fn running(kind: &'static str, at: String) -> Self {
        Self {
            kind,
            at,
            mode: None,
            connected: true,
            running: true,
            wire: false,
        }
    }
}

/// What a delivery may use besides the port: the receive buffers being
/// gathered (reused frame after frame), the frame's context, the port's
/// counters.
pub(crate) struct DeliverCx<'a> {
    /// Receive chains being gathered.
    pub chain: &'a mut Chain,
    /// Several chains for one frame (mergeable receive buffers).
    pub plan: &'a mut RxPlan,
    /// Receive chains to pop ahead when the ring runs out (frames still to
    /// come in the burst, this one included).
    pub hint: usize,
    /// The VTEP the frame goes to (a VXLAN port's): `None` floods.
    pub to_vtep: Option<Ipv4Addr>,
    /// The port's counters.
    pub stats: &'a PortStats,
}

/// What a port's end of round may use.
pub(crate) struct RoundCx<'a> {
    /// The round's time.
    pub now: Instant,
    /// Counter cycles since the round began (0 in an idle round): how long
    /// the frames it delivered stayed in the switch at most.
    pub round_cycles: u64,
    /// The port's counters.
    pub stats: &'a PortStats,
    /// The port's latency policies' state.
    pub rt: &'a mut PortRuntime,
    /// Set when one of its queues failed to signal its guest.
    pub call_failed: &'a mut bool,
}

/// What a port kind's `receive` asks of the switch. (One implementation,
/// the data path: a generic, not a trait object.)
pub(crate) trait Switch {
    /// The port in slot `i`.
    fn port_mut(&mut self, i: usize) -> Option<&mut Port>;
    /// Counts a frame from slot `i` dropped for `reason`.
    fn drop_from(&self, i: usize, reason: DropReason);
    /// Forwards one frame of `total` bytes (a virtio-net header of
    /// `hdr_len` first) from slot `cx.from`: switched, or as it is to a
    /// direct-mode port `direct`.
    fn forward(
        &mut self,
        cx: FrameCtx,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        direct: Option<PortId>,
    ) -> Fwd;
    /// Up to `budget` frames from the transmit queue of slot `i`'s queue
    /// pair `pair` (counted per pair when `multi`), a burst at a time.
    fn forward_pair(
        &mut self,
        i: usize,
        pair: usize,
        multi: bool,
        now: Instant,
        budget: usize,
    ) -> usize;
}

impl Port {
    /// The offloads the port takes as a destination.
    #[inline]
    pub(crate) fn rx_caps(&self) -> Caps {
        each_kind!(self, p => p.rx_caps())
    }

    /// The offloads the port may use as a source.
    #[inline]
    pub(crate) fn tx_caps(&self) -> Caps {
        each_kind!(self, p => p.tx_caps())
    }

    /// What the worker should watch now.
    pub(crate) fn watched(&self, out: &mut Vec<Watched>) {
        each_kind!(self, p => Kind::watched(p, out))
    }

    /// See [`Kind::on_readable`].
    pub(crate) fn on_readable(&mut self) {
        each_kind!(self, p => Kind::on_readable(p))
    }

    /// What the control plane shows of the port (its kind's `describe`).
    pub fn describe(&self) -> Described {
        each_kind!(self, p => Kind::describe(p))
    }

    /// See [`Kind::release`].
    pub(crate) fn release(&mut self) {
        each_kind!(self, p => Kind::release(p))
    }

    /// See [`Kind::vteps`].
    pub(crate) fn vteps(&self) -> Vec<vxlan::VtepSnapshot> {
        each_kind!(self, p => Kind::vteps(p))
    }

    /// See [`Kind::sched`].
    pub(crate) fn sched(&self) -> Option<&Scheduler> {
        each_kind!(self, p => p.sched())
    }

    /// See [`Kind::sched_mut`].
    #[inline]
    pub(crate) fn sched_mut(&mut self) -> Option<&mut Scheduler> {
        each_kind!(self, p => p.sched_mut())
    }

    /// See [`Kind::is_lent`].
    #[inline]
    pub(crate) fn is_lent(&self) -> bool {
        each_kind!(self, p => p.is_lent())
    }

    /// See [`Kind::copies`].
    #[inline]
    pub(crate) fn copies(&self, to_vtep: Option<Ipv4Addr>) -> usize {
        each_kind!(self, p => p.copies(to_vtep))
    }

    /// See [`Kind::tx_ready`].
    #[inline]
    pub(crate) fn tx_ready(&mut self, len: usize) -> bool {
        each_kind!(self, p => p.tx_ready(len))
    }

    /// See [`Kind::charge_flood`].
    pub(crate) fn charge_flood(&mut self, from: PortId, guest: bool, bytes: usize) -> bool {
        each_kind!(self, p => p.charge_flood(from, guest, bytes))
    }

    /// See [`Kind::deliver`].
    #[inline]
    pub(crate) fn deliver(
        &mut self,
        f: &Frame<'_>,
        tagging: Tagging,
        cx: &mut DeliverCx<'_>,
    ) -> Result<usize, DeliverError> {
        each_kind!(self, p => p.deliver(f, tagging, cx))
    }

    /// See [`Kind::end_round`].
    pub(crate) fn end_round(&mut self, cx: RoundCx<'_>) -> Option<Instant> {
        each_kind!(self, p => p.end_round(cx))
    }

    /// A vhost-user port's state.
    #[inline]
    pub fn vhost_user(&self) -> Option<&VhostUserPort> {
        match self {
            Port::VhostUser(p) => Some(p),
            _ => None,
        }
    }

    /// A vhost-user port's state, mutable.
    #[inline]
    pub fn vhost_user_mut(&mut self) -> Option<&mut VhostUserPort> {
        match self {
            Port::VhostUser(p) => Some(p),
            _ => None,
        }
    }

    /// An uplink's state.
    pub fn uplink(&self) -> Option<&UplinkPort> {
        match self {
            Port::Uplink(u) => Some(u),
            _ => None,
        }
    }

    /// An uplink's state, mutable.
    pub fn uplink_mut(&mut self) -> Option<&mut UplinkPort> {
        match self {
            Port::Uplink(u) => Some(u),
            _ => None,
        }
    }

    /// A VXLAN port's state.
    pub fn vxlan(&self) -> Option<&VxlanPort> {
        match self {
            Port::Vxlan(v) => Some(v),
            _ => None,
        }
    }

    /// A virtual NIC (vhost-user or tap), as opposed to an uplink.
    pub fn is_vnic(&self) -> bool {
        matches!(self, Port::VhostUser(_) | Port::Tap(_))
    }
}

use std::os::fd::RawFd;

/// What the worker watches for a port, and why (the epoll token's meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Watch {
    /// A listening socket: accept a front-end.
    Listener,
    /// The control connection: read messages.
    Connection,
    /// A queue's kick eventfd.
    Kick(u8),
}

impl Watch {
    /// Packs into the low byte of an epoll token.
    pub fn encode(self) -> u8 {
        match self {
            Watch::Listener => 0,
            Watch::Connection => 1,
            Watch::Kick(q) => 2 + q,
        }
    }

    /// Unpacks [`Watch::encode`].
    pub fn decode(b: u8) -> Self {
        match b {
            0 => Watch::Listener,
            1 => Watch::Connection,
            q => Watch::Kick(q - 2),
        }
    }
}

/// A (descriptor, purpose) pair the worker should poll.
pub type Watched = (RawFd, Watch);

/// How a vhost-user port uses its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SocketMode {
    /// The switch listens; the front-end (QEMU `server=off`, a poll-mode endpoint) connects.
    #[default]
    Server,
    /// The switch connects, and reconnects when the front-end restarts (QEMU `server=on`, DPDK `server=1`).
    Client,
}
