//! The forwarding loop over a set of ports: pop frames from each port's
//! transmit queue, decide (FDB, VLAN, guard), copy each frame once into
//! each destination's receive buffers, return buffers, notify.
//!
//! No allocation, lock or system call per frame: buffers are fixed arrays
//! on the stack, counters are relaxed atomics, and notifications (eventfd
//! writes) happen once per queue per burst, only when the driver wants one.

use crate::coalesce::{Coalescer, Decision};
use crate::config::Policies;
use crate::fdb::{Fdb, Learned};
use crate::forward::{decide, Destination, L2Header, PortPolicy};
use crate::lro;
use crate::lro::place::{Delivered, InPlace, PlaceError};
use crate::mesh::{Kind, Peer, PeerSetup, Record, RemotePort, WorkerId, RECORD_HEADER};
use crate::netqueue::QueueRequest;
use crate::offload::{self, Caps, Reject, Work};
use crate::port::tap::{self, TapPort};
use crate::port::uplink::{self, UplinkPort};
use crate::port::vhost_user::{ResetCause, VhostUserPort};
use crate::port::vxlan::VxlanPort;
use crate::port::{Watch, Watched};
use crate::stats::{DropReason, PortStats};
use crate::vhost_user::buffers::{self, Src};
use crate::vhost_user::chain::{Chain, ChainError, Seg, MAX_SEGS};
use crate::vhost_user::conn::ConnError;
use crate::vhost_user::device::{RX_QUEUE, TX_QUEUE};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::queue::{Burst, BURST};
use crate::vlan::Tagging;
use crate::wire::virtio_net::{self, VirtioNetHdr, VirtioNetHdrRepr, FLAG_NEEDS_CSUM, GSO_NONE};
use crate::PortId;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// Largest frame carried (a 64 KiB GSO frame plus Ethernet and VLAN headers).
pub const MAX_FRAME: u64 = 65535 + 18;
/// Most receive buffers one frame may span with mergeable buffers.
pub const MAX_MERGE: usize = 64;

/// The kinds of ports (enum dispatch keeps the loop monomorphic).
// One value per port: its size does not matter, a Box would add a pointer chase per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Port {
    /// vhost-user virtio-net.
    VhostUser(VhostUserPort),
    /// A tap interface.
    Tap(TapPort),
    /// A host interface through AF_PACKET.
    Uplink(UplinkPort),
    /// A VXLAN tunnel endpoint: frames to and from remote VTEPs over UDP.
    Vxlan(VxlanPort),
}

impl Port {
    /// The offloads the port takes as a destination.
    fn rx_caps(&self) -> Caps {
        match self {
            Port::VhostUser(p) => Caps::guest_rx(p.device.acked_features()),
            // tun and AF_PACKET sockets hand any TCP GSO or partially
            // checksummed frame to the kernel, which completes it as needed.
            Port::Tap(_) | Port::Uplink(_) => Caps::ALL,
            // A datagram carries a finished frame: TSO super-frames and
            // partial checksums are completed in software before
            // encapsulation (`deliver_soft`), as for a guest without offloads.
            Port::Vxlan(_) => Caps::NONE,
        }
    }

    /// The offloads the port may use as a source.
    fn tx_caps(&self) -> Caps {
        match self {
            Port::VhostUser(p) => Caps::guest_tx(p.device.acked_features()),
            // The kernel sends what TUNSETOFFLOAD (tap) allowed, and a packet
            // socket passes the stack's own TCP GSO frames.
            Port::Tap(_) | Port::Uplink(_) => Caps::ALL,
            // Received frames are as their sender finished them.
            Port::Vxlan(_) => Caps::NONE,
        }
    }

    fn watched(&self, out: &mut Vec<Watched>) {
        match self {
            Port::VhostUser(p) => p.watched(out),
            Port::Tap(p) => p.watched(out),
            Port::Uplink(p) => p.watched(out),
            Port::Vxlan(p) => p.watched(out),
        }
    }
}

/// A port in the switch.
#[derive(Debug)]
pub struct Slot {
    /// Identity.
    pub id: PortId,
    /// Name (unique).
    pub name: String,
    /// Forwarding policy.
    pub policy: PortPolicy,
    /// The port.
    pub port: Port,
    /// Counters (shared with the control plane).
    pub stats: Arc<PortStats>,
    /// Latency policies as configured.
    pub policies: Policies,
    /// The policies' running state.
    pub rt: PortRuntime,
    /// A vNIC's MAC: configured, or the first source address learned on it
    /// (its uplink receive queue takes frames for it).
    pub mac: Option<crate::wire::EthernetAddress>,
    /// A vNIC whose MAC is still to be learned.
    needs_mac: bool,
    /// Direct mode: the uplink this port is bound to.
    pub direct_up: Option<PortId>,
}

impl Slot {
    /// A virtual NIC (vhost-user or tap), as opposed to an uplink.
    pub fn is_vnic(&self) -> bool {
        matches!(self.port, Port::VhostUser(_) | Port::Tap(_))
    }
}

/// The running state of a port's latency policies.
#[derive(Debug)]
pub struct PortRuntime {
    /// When to call the guest after deliveries to its receive queue.
    pub coalescer: Coalescer,
    /// Frames delivered to the receive queue in the current round.
    round_rx: u32,
    /// A delivery found the receive ring full: call the guest at once.
    urgent: bool,
    /// A call is held until this instant.
    hold: Option<Instant>,
    /// Empty rounds of the transmit queue since its last frame.
    tx_idle: u32,
    /// The guest was asked to kick for new transmit buffers.
    tx_armed: bool,
    /// An uplink's egress scheduler holds the frame at the head of the
    /// transmit ring: the port is polled again on the scheduler's timer, not
    /// on kicks (nothing behind that frame can leave first).
    egress_held: bool,
    /// The LRO aggregate toward the port (vhost-user ports; moved out while in use).
    lro: Option<Box<LroCtx>>,
    /// The last forwarding decision for a frame from the port.
    flow: Option<FlowMemo>,
}

/// A forwarding decision and what it depended on: the frame's addresses
/// and tag, the time (aging), the FDB's generation and the ports' (their
/// VLANs and who exists). Reused for the next frame with the same inputs,
/// which would get the same answer, without hashing into the FDB twice.
#[derive(Debug, Clone, Copy)]
struct FlowMemo {
    l2: L2Header,
    now: Instant,
    fdb_gen: u64,
    topo_gen: u64,
    decision: Result<crate::forward::Decision, DropReason>,
}

/// An LRO aggregate (built in the port's receive buffers) and how it leaves the port.
#[derive(Debug)]
struct LroCtx {
    agg: InPlace,
    tagging: Tagging,
    /// When its first segment came.
    started: Instant,
    /// When its last segment came.
    last: Instant,
}

/// An LRO aggregate ends once no segment has joined it for this long: the
/// flow paused (maybe waiting for this very data), so holding it only adds
/// latency. At high rates segments come closer than this and merge; at low
/// rates the guest has time for each segment anyway.
pub const LRO_IDLE: std::time::Duration = std::time::Duration::from_micros(10);
/// An LRO aggregate never waits longer than this after its first segment.
pub const LRO_HOLD: std::time::Duration = std::time::Duration::from_micros(50);

impl PortRuntime {
    fn new(p: &Policies) -> Self {
        Self {
            coalescer: Coalescer::new(p.effective_coalesce()),
            round_rx: 0,
            urgent: false,
            hold: None,
            tx_idle: 0,
            tx_armed: false,
            egress_held: false,
            lro: None,
            flow: None,
        }
    }

    /// Forgets rates and holds (the front-end went away).
    fn restart(&mut self) {
        self.coalescer.restart();
        self.round_rx = 0;
        self.urgent = false;
        self.hold = None;
        self.tx_idle = 0;
        self.tx_armed = false;
        self.flow = None;
        self.egress_held = false;
        if let Some(l) = self.lro.as_mut() {
            // The queue is gone: its chains with it.
            l.agg.abandon();
        }
    }
}

/// What became of a frame taken from a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fwd {
    /// Forwarded or dropped: the source's buffer can be returned.
    Done,
    /// Held back by the uplink: leave it in the source's ring.
    Wait,
}

/// A destination that misbehaved while a frame was delivered to it.
enum DeliverError {
    Drop(DropReason),
    Hostile(ChainError),
}

/// The switch's data plane.
pub struct Datapath {
    slots: Vec<Option<Slot>>,
    fdb: Fdb,
    /// Slots whose watched descriptors changed outside an event (resets).
    dirty: Vec<usize>,
    /// The SIGBUS handler's epoch last seen ([`crate::sys::sigbus::epoch`]).
    sigbus_epoch: u64,
    /// A queue failed to signal its call eventfd this round.
    call_failed: bool,
    /// Where frames read from tap ports land (moved out while in use).
    scratch: Option<Box<[u8]>>,
    /// The transmit chains being forwarded (moved out while in use).
    tx_burst: Option<Box<Burst>>,
    /// Receive buffers being gathered for one delivery, reused frame after frame.
    rx_chain: Box<Chain>,
    plan: Box<RxPlan>,
    /// The earliest held call's deadline after the last round.
    next_deadline: Option<Instant>,
    /// The other workers.
    peers: Vec<Peer>,
    /// Ports other workers own.
    remote: Vec<RemotePort>,
    /// A frame materialized for software offload work (moved out while in use).
    soft: Option<Box<[u8]>>,
    /// Where software segmentation builds each segment (moved out while in use).
    seg: Option<Box<[u8]>>,
    /// Counts changes to the ports and their policies (see [`FlowMemo`]).
    topo_gen: u64,
    /// Frames of the current transmit burst still to forward, this one
    /// included: how many receive chains a destination pops ahead when it
    /// runs out (one frame in flight pops one: no latency for the rest).
    rx_hint: usize,
    /// The VTEP the frame being forwarded came from (a VXLAN port's frame):
    /// its source address is learned behind it.
    from_vtep: Option<std::net::Ipv4Addr>,
    /// The VTEP the frame being delivered to a VXLAN port goes to: its
    /// destination's, from the FDB; `None` floods to the port's remotes.
    to_vtep: Option<std::net::Ipv4Addr>,
}

impl Datapath {
    /// An empty switch with the given FDB.
    pub fn new(fdb: Fdb) -> Self {
        Self {
            slots: Vec::new(),
            fdb,
            dirty: Vec::with_capacity(64),
            sigbus_epoch: crate::sys::sigbus::epoch(),
            call_failed: false,
            scratch: Some(vec![0u8; tap::BUF_LEN].into_boxed_slice()),
            tx_burst: Some(Box::new(Burst::new())),
            rx_chain: Box::new(Chain::new()),
            plan: Box::new(RxPlan {
                segs: [Seg::default(); MAX_SEGS],
                nsegs: 0,
                heads: [(0, 0); MAX_MERGE],
                nheads: 0,
                cap: 0,
            }),
            next_deadline: None,
            peers: Vec::new(),
            remote: Vec::new(),
            soft: Some(vec![0u8; MAX_FRAME as usize].into_boxed_slice()),
            seg: Some(vec![0u8; MAX_FRAME as usize].into_boxed_slice()),
            topo_gen: 0,
            rx_hint: 1,
            from_vtep: None,
            to_vtep: None,
        }
    }

    /// Adds a port; returns its slot index.
    pub fn add(
        &mut self,
        id: PortId,
        name: String,
        policy: PortPolicy,
        policies: Policies,
        port: Port,
    ) -> usize {
        let mac = policy.mac;
        let mut slot = Slot {
            id,
            name,
            policy,
            port,
            stats: Arc::new(PortStats::default()),
            rt: PortRuntime::new(&policies),
            policies,
            mac,
            needs_mac: false,
            direct_up: None,
        };
        slot.needs_mac = slot.is_vnic() && mac.is_none();
        if matches!(slot.port, Port::VhostUser(_)) {
            // Reserved once per port: aggregating never allocates.
            slot.rt.lro = Some(Box::new(LroCtx {
                agg: InPlace::new(),
                tagging: Tagging::Untagged,
                started: Instant::now(),
                last: Instant::now(),
            }));
        }
        self.attach(slot)
    }

    /// Takes in a port another worker detached; returns its slot index.
    pub fn attach(&mut self, slot: Slot) -> usize {
        self.topo_gen += 1;
        // A lent uplink queue is the uplink only for unicast frames: floods
        // to the wire still go through the uplink's own worker.
        if !is_lent(&slot.port) {
            self.remote.retain(|r| r.id != slot.id);
        }
        // What was learned on it here came through another worker's ring.
        self.fdb.flush_port(slot.id);
        let idx = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        if !self.bind_direct(idx) {
            self.join_queues(idx);
        }
        idx
    }

    /// Whether a direct-mode port can be bound as its policy asks.
    pub fn check_direct(&self, policy: &PortPolicy) -> Result<(), String> {
        let Some(name) = &policy.direct else {
            return Ok(());
        };
        let Some(Slot {
            port: Port::Uplink(u),
            ..
        }) = self.find(name).and_then(|j| self.slot(j))
        else {
            return Err(format!("direct: no uplink port named {name}"));
        };
        if u.table().free_queue().is_none() {
            return Err(format!(
                "direct: uplink {name} has no receive queue to give (queues = {}, each held by a port that asked for it; raise `queues`)",
                u.queue_count()
            ));
        }
        Ok(())
    }

    /// Binds direct-mode slot `idx` to a receive queue of its uplink; false
    /// when the port is not in direct mode.
    fn bind_direct(&mut self, idx: usize) -> bool {
        let Some(s) = self.slots[idx].as_ref() else {
            return false;
        };
        let Some(name) = s.policy.direct.clone() else {
            return false;
        };
        let (id, mac) = (s.id, s.mac);
        let Some(j) = self.find(&name) else {
            return true;
        };
        let Some(Slot {
            id: up_id,
            port: Port::Uplink(u),
            ..
        }) = self.slots[j].as_mut()
        else {
            return true;
        };
        let up_id = *up_id;
        let Some(q) = u.table().free_queue() else {
            return true;
        };
        u.update_queues(|t| t.join(id, QueueRequest::Index(q), mac).unwrap_or(false));
        if let Some(rx) = u.queue_mut(q) {
            rx.direct = Some(id);
        }
        if let Some(s) = self.slots[idx].as_mut() {
            s.direct_up = Some(up_id);
        }
        log::info!("port id {id}: direct on uplink {name}, receive queue {q}");
        true
    }

    /// Whether every uplink can give a new vNIC the receive queue it asks for.
    pub fn check_queue_request(&self, req: QueueRequest) -> Result<(), String> {
        for s in self.slots.iter().flatten() {
            if let Port::Uplink(u) = &s.port {
                if u.lent().is_some() {
                    continue;
                }
                u.table()
                    .check(req)
                    .map_err(|e| format!("uplink {}: {e}", s.name))?;
            }
        }
        Ok(())
    }

    /// Lends vNIC `id`'s own receive queue on every uplink here to the
    /// worker it runs on (a latency-high port's, see [`UplinkPort::lend`]).
    /// The vNIC joins each uplink's table first (it is served elsewhere,
    /// so it did not join on arrival). Queues lent already are not lent
    /// again; a vNIC left on the shared queue gets nothing.
    pub fn lend_queues(
        &mut self,
        id: PortId,
        req: QueueRequest,
        mac: crate::wire::EthernetAddress,
    ) -> Vec<Lent> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            let Port::Uplink(u) = &mut s.port else {
                continue;
            };
            if u.lent().is_some() {
                continue;
            }
            u.update_queues(|t| match t.join(id, req, Some(mac)) {
                Ok(c) => c | t.set_mac(id, mac),
                Err(e) => {
                    log::warn!(
                        "uplink {}: port id {id} stays on the shared queue: {e}",
                        s.name
                    );
                    false
                }
            });
            let q = u.table().queue_of(id);
            if let Some(port) = u.lend(q) {
                log::info!(
                    "uplink {}: receive queue {q} lent to the worker of port id {id}",
                    s.name
                );
                // Its socket is no longer this worker's to watch.
                if !self.dirty.contains(&i) {
                    self.dirty.push(i);
                }
                out.push(Lent {
                    uplink: s.id,
                    name: format!("{}:q{q}", s.name),
                    policy: s.policy.clone(),
                    policies: s.policies,
                    port,
                });
            }
        }
        out
    }

    /// Takes in a queue another worker's uplink lent (its frames come
    /// straight to this worker's ports, and theirs leave through it).
    pub fn hold(&mut self, l: Lent) -> usize {
        let Lent {
            uplink,
            name,
            policy,
            policies,
            port,
        } = l;
        self.add(uplink, name, policy, policies, Port::Uplink(port))
    }

    /// Gives back the lent queues held here (of uplink `of` only, when set).
    pub fn release_lent(&mut self, of: Option<PortId>) -> Vec<Lent> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() {
            let lent = self.slots[i]
                .as_ref()
                .is_some_and(|s| is_lent(&s.port) && of.map_or(true, |u| u == s.id));
            if !lent {
                continue;
            }
            if let Some(s) = self.remove(i) {
                self.mark_dirty(i);
                if let Port::Uplink(port) = s.port {
                    out.push(Lent {
                        uplink: s.id,
                        name: s.name,
                        policy: s.policy,
                        policies: s.policies,
                        port,
                    });
                }
            }
        }
        out
    }

    /// Takes back queues lent with [`Datapath::lend_queues`]; `leaving`: the
    /// vNIC they were lent for is gone (it leaves the tables too).
    pub fn restore(&mut self, lent: Vec<Lent>, leaving: Option<PortId>) {
        for l in lent {
            let at = self.slots.iter().position(|s| {
                s.as_ref()
                    .is_some_and(|s| s.id == l.uplink && matches!(s.port, Port::Uplink(_)))
            });
            if let Some(i) = at {
                if let Some(Port::Uplink(u)) = self.slots[i].as_mut().map(|s| &mut s.port) {
                    u.take_back(l.port);
                }
                self.mark_dirty(i);
            }
        }
        if let Some(id) = leaving {
            for s in self.slots.iter_mut().flatten() {
                if let Port::Uplink(u) = &mut s.port {
                    u.update_queues(|t| t.leave(id));
                }
            }
        }
    }

    /// A new vNIC joins every uplink's queue table; a new uplink takes in
    /// every vNIC, in the order they were added.
    fn join_queues(&mut self, idx: usize) {
        let Some(new) = self.slots[idx].as_ref() else {
            return;
        };
        let members: Vec<_> = if new.is_vnic() {
            vec![(new.id, new.policy.uplink_queue, new.mac, new.policy.egress)]
        } else {
            self.slots
                .iter()
                .flatten()
                .filter(|s| s.is_vnic() && s.policy.direct.is_none())
                .map(|s| (s.id, s.policy.uplink_queue, s.mac, s.policy.egress))
                .collect()
        };
        let only = (!new.is_vnic()).then_some(idx);
        for (j, s) in self.slots.iter_mut().enumerate() {
            let Some(Slot {
                port: Port::Uplink(u),
                name,
                ..
            }) = s
            else {
                continue;
            };
            if only.is_some_and(|o| o != j) {
                continue;
            }
            for &(id, _, _, egress) in &members {
                u.sched.set_policy(id, egress);
            }
            u.update_queues(|t| {
                let mut changed = false;
                for &(id, req, mac, _) in &members {
                    match t.join(id, req, mac) {
                        Ok(c) => changed |= c,
                        Err(e) => {
                            log::warn!("uplink {name}: port id {id} stays on the shared queue: {e}")
                        }
                    }
                }
                changed
            });
        }
    }

    /// Records the MAC learned on vNIC slot `i`; its uplink queues follow it.
    #[cold]
    fn learn_mac(&mut self, i: usize, mac: crate::wire::EthernetAddress) {
        let Some(s) = self.slots[i].as_mut() else {
            return;
        };
        s.needs_mac = false;
        s.mac = Some(mac);
        let id = s.id;
        for s in self.slots.iter_mut().flatten() {
            if let Port::Uplink(u) = &mut s.port {
                u.update_queues(|t| t.set_mac(id, mac));
            }
        }
    }

    /// Removes the port in slot `idx`, forgetting its addresses.
    pub fn remove(&mut self, idx: usize) -> Option<Slot> {
        // The aggregate's chains go back with a delivery, not with the port.
        self.lro_deliver(idx, Instant::now());
        self.topo_gen += 1;
        let s = self.slots.get_mut(idx)?.take()?;
        self.fdb.flush_port(s.id);
        for u in self.slots.iter_mut().flatten() {
            if let Port::Uplink(u) = &mut u.port {
                u.update_queues(|t| t.leave(s.id));
                u.sched.remove(s.id);
                for q in 0..u.queue_count() {
                    if let Some(rx) = u.queue_mut(q).filter(|rx| rx.direct == Some(s.id)) {
                        rx.direct = None;
                    }
                }
            }
        }
        Some(s)
    }

    /// The slot index of the port named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.name == name))
    }

    /// The port in slot `idx`.
    pub fn slot(&self, idx: usize) -> Option<&Slot> {
        self.slots.get(idx)?.as_ref()
    }

    /// The port in slot `idx`, mutable.
    pub fn slot_mut(&mut self, idx: usize) -> Option<&mut Slot> {
        self.slots.get_mut(idx)?.as_mut()
    }

    /// All ports with their slot indexes.
    pub fn slots(&self) -> impl Iterator<Item = (usize, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
    }

    /// Whether every uplink with a known capacity can also reserve
    /// `extra_bps` for a port (other than `except`).
    pub fn check_reservation(&self, extra_bps: u64, except: Option<PortId>) -> Result<(), String> {
        if extra_bps == 0 {
            return Ok(());
        }
        let reserved: u64 = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.is_vnic() && Some(s.id) != except)
            .filter_map(|s| s.policy.egress.reserve_bps)
            .sum();
        for s in self.slots.iter().flatten() {
            if let Port::Uplink(u) = &s.port {
                if let Some(cap) = u.sched.capacity_bps() {
                    if reserved + extra_bps > cap {
                        return Err(format!(
                            "uplink {}: reservations would total {} Mbit/s, over its capacity of {} Mbit/s",
                            s.name,
                            (reserved + extra_bps) / 1_000_000,
                            cap / 1_000_000
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Changes a vNIC's egress policy (share, limit, reservation) on every uplink.
    pub fn set_egress(&mut self, idx: usize, e: crate::egress::EgressPolicy) {
        self.topo_gen += 1;
        let Some(s) = self.slot_mut(idx) else { return };
        s.policy.egress = e;
        let id = s.id;
        for s in self.slots.iter_mut().flatten() {
            if let Port::Uplink(u) = &mut s.port {
                u.sched.set_policy(id, e);
            }
        }
    }

    /// Changes how many addresses slot `idx` may have learned. A lower
    /// limit refuses new addresses at once; those learned stay until they
    /// age out.
    pub fn set_fdb_limit(&mut self, idx: usize, limit: u32) {
        // Remembered decisions hold a refusal (or not) under the old limit.
        self.topo_gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policy.fdb_limit = Some(limit);
        }
    }

    /// Changes slot `idx`'s latency policies.
    pub fn set_policies(&mut self, idx: usize, p: Policies) {
        self.topo_gen += 1;
        if let Some(s) = self.slot_mut(idx) {
            s.policies = p;
            s.rt.coalescer.set_policy(p.effective_coalesce());
        }
    }

    /// The FDB.
    pub fn fdb(&self) -> &Fdb {
        &self.fdb
    }

    /// Ages the FDB.
    pub fn age(&mut self, now: Instant) -> usize {
        self.fdb.age(now)
    }

    /// The descriptors slot `idx` wants watched.
    pub fn watched(&self, idx: usize, out: &mut Vec<Watched>) {
        if let Some(s) = self.slot(idx) {
            s.port.watched(out);
        }
    }

    /// True when slot `idx` has descriptors to close once the worker
    /// unwatched them ([`Datapath::release_retired`]).
    pub fn has_retired(&mut self, idx: usize) -> bool {
        match self.slots.get_mut(idx).and_then(Option::as_mut) {
            Some(Slot {
                port: Port::VhostUser(p),
                ..
            }) => p.has_retired(),
            _ => false,
        }
    }

    /// Closes slot `idx`'s retired descriptors (the worker unwatched them).
    pub fn release_retired(&mut self, idx: usize) {
        if let Some(Slot {
            port: Port::VhostUser(p),
            ..
        }) = self.slots.get_mut(idx).and_then(Option::as_mut)
        {
            p.release_retired();
        }
    }

    /// Resets a port after an error: counts it, says why once in the log,
    /// and restarts it (the one restart path).
    pub fn reset(&mut self, idx: usize, now: Instant, why: &dyn std::fmt::Display) {
        let Some(s) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        s.stats
            .resets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        log::warn!("port {}: reset: {why}", s.name);
        self.restart(idx, now);
    }

    /// The one way a port goes back to its initial state (after an error or
    /// a front-end that left): its front-end and device state dropped (the
    /// descriptors retired until unwatched), its run-time state restarted,
    /// its addresses forgotten here and in the other workers.
    fn restart(&mut self, idx: usize, now: Instant) {
        let Some(s) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        match &mut s.port {
            Port::VhostUser(p) => p.reset(now),
            Port::Tap(_) | Port::Uplink(_) | Port::Vxlan(_) => {}
        }
        s.rt.restart();
        let id = s.id;
        self.fdb.flush_port(id);
        self.flush_remote(id);
        self.mark_dirty(idx);
    }

    /// Resets the ports whose guest memory vanished under the switch or
    /// whose call eventfd would have blocked. Cheap when nothing happened:
    /// one load of the SIGBUS handler's epoch and one flag a queue.
    fn reset_broken(&mut self, now: Instant) {
        let epoch = crate::sys::sigbus::epoch();
        let lost = epoch != self.sigbus_epoch;
        if !lost && !self.call_failed {
            return;
        }
        self.sigbus_epoch = epoch;
        self.call_failed = false;
        for i in 0..self.slots.len() {
            let Some(Slot {
                port: Port::VhostUser(p),
                ..
            }) = self.slots[i].as_mut()
            else {
                continue;
            };
            if lost && p.device.memory_lost() {
                self.reset(
                    i,
                    now,
                    &"guest memory vanished under the switch (its file was truncated); the switch read zeros there",
                );
            } else if let Some((q, e)) = p.device.take_call_failure() {
                self.reset(
                    i,
                    now,
                    &format_args!("queue {q}: cannot signal the call eventfd: {e}"),
                );
            }
        }
    }

    fn mark_dirty(&mut self, idx: usize) {
        if !self.dirty.contains(&idx) {
            self.dirty.push(idx);
        }
    }

    /// Takes the slots whose watched descriptors changed since the last call.
    pub fn take_dirty(&mut self, out: &mut Vec<usize>) {
        out.append(&mut self.dirty);
    }

    /// One polling round: up to `budget` frames from each port. Returns
    /// frames forwarded or dropped (0 means idle).
    pub fn poll(&mut self, now: Instant, budget: usize) -> usize {
        for s in self.slots.iter_mut().flatten() {
            if let Port::Uplink(u) = &mut s.port {
                u.sched.begin_round(now);
            }
        }
        let mut work = self.poll_peers(now, budget);
        for i in 0..self.slots.len() {
            let n = self.forward_from(i, now, budget);
            work += n;
            if let Some(s) = self.slots[i].as_mut() {
                tx_budget(s, n);
            }
        }
        let mut next: Option<Instant> = None;
        // LRO aggregates end when their flow pauses or they are old enough.
        for j in 0..self.slots.len() {
            if let Some(due) = self.lro_due(j, now) {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        for s in self.slots.iter_mut().flatten() {
            match &mut s.port {
                Port::VhostUser(p) => {
                    if let Some(vq) = p.device.queue(RX_QUEUE) {
                        s.rt.hold = signal_rx(vq, &mut s.rt, now, &s.stats.rx);
                        if let Some(t) = s.rt.hold {
                            next = Some(next.map_or(t, |n| n.min(t)));
                        }
                        self.call_failed |= vq.call_failed();
                    }
                    if let Some(vq) = p.device.queue(TX_QUEUE) {
                        vq.signal(&s.stats.tx);
                        self.call_failed |= vq.call_failed();
                    }
                }
                // The round's frames to the wire leave in one system call;
                // frames the scheduler held are tried again soon.
                Port::Uplink(u) => {
                    u.flush();
                    if let Some(t) = u.sched.wake_at(now) {
                        next = Some(next.map_or(t, |n| n.min(t)));
                    }
                }
                // The round's datagrams leave in one sendmmsg.
                Port::Vxlan(v) => v.flush(&s.stats.rx),
                Port::Tap(_) => {}
            }
        }
        self.next_deadline = next;
        self.flush_peers();
        self.reset_broken(now);
        work
    }

    /// The earliest instant a held call is due (the worker must poll by then).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next_deadline
    }

    /// True when every transmit queue asks its guest for kicks (the worker may sleep).
    pub fn all_tx_armed(&self) -> bool {
        self.slots.iter().flatten().all(|s| match &s.port {
            Port::VhostUser(p) => s.rt.tx_armed || s.rt.egress_held || !p.device.ready(TX_QUEUE),
            _ => true,
        })
    }

    /// Before sleeping: asks every transmit queue for kicks. Returns true
    /// when frames arrived meanwhile (poll again instead).
    pub fn arm_notifications(&mut self) -> bool {
        let mut pending = false;
        for s in self.slots.iter_mut().flatten() {
            if s.rt.egress_held {
                // Its frames wait for the egress scheduler, whose timer
                // wakes the worker: a kick would not let them go sooner.
                continue;
            }
            if let Port::VhostUser(p) = &mut s.port {
                if let Some(q) = p.device.queue(TX_QUEUE) {
                    pending |= q.enable_notification();
                    s.rt.tx_armed = true;
                }
            }
        }
        pending
    }

    /// After waking: tells transmit queues the worker is polling.
    pub fn disarm_notifications(&mut self) {
        for s in self.slots.iter_mut().flatten() {
            if let Port::VhostUser(p) = &mut s.port {
                if let Some(q) = p.device.queue(TX_QUEUE) {
                    q.disable_notification();
                }
                s.rt.tx_armed = false;
                s.rt.tx_idle = 0;
            }
        }
    }

    /// Handles an event on one of slot `idx`'s watched descriptors.
    pub fn on_event(&mut self, idx: usize, what: Watch, now: Instant) {
        if what == Watch::Connection {
            // The front-end's messages may stop or remap the queues: an LRO
            // aggregate's receive chains are returned first.
            self.lro_deliver(idx, now);
        }
        let Some(s) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        let p = match &mut s.port {
            Port::VhostUser(p) => p,
            Port::Tap(t) => {
                t.on_readable();
                return;
            }
            Port::Vxlan(v) => {
                v.on_readable();
                return;
            }
            // The rings are polled every round; readiness only woke the worker.
            Port::Uplink(_) => return,
        };
        match what {
            Watch::Listener => {
                if let Ok(true) = p.accept() {
                    s.stats.connections.fetch_add(1, Relaxed);
                    log::info!("port {}: front-end connected", s.name);
                }
            }
            Watch::Connection => match p.on_readable() {
                Ok(()) => {}
                Err(ResetCause::Conn(ConnError::Closed)) => {
                    log::info!("port {}: front-end disconnected", s.name);
                    self.restart(idx, now);
                }
                Err(e) => {
                    let msg = crate::error_chain(&e);
                    self.reset(idx, now, &msg);
                }
            },
            Watch::Kick(q) => {
                if p.device.drain_kick(usize::from(q)) {
                    let qs = if usize::from(q) == RX_QUEUE {
                        &s.stats.rx
                    } else {
                        &s.stats.tx
                    };
                    crate::stats::bump(&qs.notifications_received, 1);
                }
            }
        }
    }

    /// Time-driven port work (client reconnects); pushes slots whose watched set changed.
    pub fn tick(&mut self, now: Instant, changed: &mut Vec<usize>) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            if let Port::VhostUser(p) = &mut s.port {
                if p.tick(now) {
                    s.stats.connections.fetch_add(1, Relaxed);
                    log::info!("port {}: connected to front-end", s.name);
                    changed.push(i);
                }
            }
        }
    }

    fn forward_from(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        match self.slots.get(i).and_then(Option::as_ref).map(|s| &s.port) {
            Some(Port::VhostUser(_)) => self.forward_from_vhost_user(i, now, budget),
            Some(Port::Tap(_)) => self.forward_from_tap(i, now, budget),
            Some(Port::Uplink(_)) => self.forward_from_uplink(i, now, budget),
            Some(Port::Vxlan(_)) => self.forward_from_vxlan(i, now, budget),
            None => 0,
        }
    }

    /// Up to `budget` datagrams from a VXLAN port, read in batches and
    /// switched in place from the port's receive slots; each inner frame's
    /// source is learned behind the VTEP that sent it.
    fn forward_from_vxlan(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let taken = match self.slots[i].as_mut().map(|s| &mut s.port) {
                Some(Port::Vxlan(v)) => v.take_rx(budget - n),
                _ => None,
            };
            let Some(mut rx) = taken else { break };
            let mut got = 0;
            while let Some(r) = rx.next_frame() {
                got += 1;
                match r {
                    Ok(f) => {
                        let b = rx.frame(&f);
                        self.from_vtep = Some(f.from);
                        self.forward_frame(
                            i,
                            Src::Local(b),
                            b.len() as u64,
                            virtio_net::HEADER_LEN,
                            now,
                        );
                        self.from_vtep = None;
                    }
                    Err(reason) => {
                        if let Some(s) = &self.slots[i] {
                            s.stats.tx.drop(reason);
                        }
                    }
                }
            }
            if let Some(Port::Vxlan(v)) = self.slots[i].as_mut().map(|s| &mut s.port) {
                v.put_rx(rx);
            }
            n += got;
            if got == 0 {
                break;
            }
        }
        n
    }

    fn forward_from_tap(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let Some(mut buf) = self.scratch.take() else {
            return 0;
        };
        let mut n = 0;
        while n < budget {
            let got = match self.slots[i].as_mut().map(|s| &mut s.port) {
                Some(Port::Tap(t)) => t.read(&mut buf),
                _ => None,
            };
            let Some(len) = got else { break };
            n += 1;
            self.forward_frame(
                i,
                Src::Local(&buf[..len]),
                len as u64,
                virtio_net::HEADER_LEN,
                now,
            );
        }
        self.scratch = Some(buf);
        n
    }

    /// Up to `budget` frames from each of the uplink's receive queues,
    /// read in place from their rings, taken in turns (see [`in_turns`]):
    /// a frame in one queue waits for at most a turn of each other queue,
    /// not for a whole budget of a neighbour's flood (the service that makes
    /// a queue of one's own worth having; within one queue, frames go in
    /// order).
    fn forward_from_uplink(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let nq = match self.slots[i].as_ref().map(|s| &s.port) {
            Some(Port::Uplink(u)) => u.queue_count(),
            _ => return 0,
        };
        in_turns(nq, budget, QUEUE_TURN, |qi, limit| {
            self.forward_queue(i, qi, now, limit)
        })
    }

    /// Up to `limit` frames from receive queue `qi` of slot `i`'s uplink.
    #[inline]
    fn forward_queue(&mut self, i: usize, qi: usize, now: Instant, limit: usize) -> usize {
        let taken = match self.slots[i].as_mut().map(|s| &mut s.port) {
            Some(Port::Uplink(u)) => u.take_queue(qi),
            _ => None,
        };
        let Some(mut q) = taken else { return 0 };
        let to = q.direct;
        let mut m = 0;
        while m < limit {
            let len = match q.peek() {
                None => break,
                Some(uplink::Rx::Frame(f)) => {
                    self.forward_frame_to(
                        i,
                        Src::Local(f),
                        f.len() as u64,
                        uplink::HDR_LEN,
                        now,
                        to,
                    );
                    f.len()
                }
                Some(uplink::Rx::Unsupported) => {
                    if let Some(s) = &self.slots[i] {
                        s.stats.tx.drop(DropReason::Malformed);
                    }
                    0
                }
            };
            q.release();
            q.packets += 1;
            q.bytes += len as u64;
            m += 1;
        }
        if let Some(Port::Uplink(u)) = self.slots[i].as_mut().map(|s| &mut s.port) {
            u.put_queue(qi, q);
        }
        m
    }

    fn forward_from_vhost_user(&mut self, i: usize, now: Instant, budget: usize) -> usize {
        let (mem, hdr_len) = match self.slots[i].as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => {
                let hl = p.device.vnet_hdr_len();
                match p.device.queue(TX_QUEUE) {
                    Some(q) => (q.mem().clone(), hl),
                    None => return 0,
                }
            }
            _ => return 0,
        };
        let Some(mut burst) = self.tx_burst.take() else {
            return 0;
        };
        if let Some(s) = self.slots[i].as_mut() {
            s.rt.egress_held = false;
        }
        let mut n = 0;
        while n < budget {
            let want = (budget - n).min(BURST);
            let popped = match self.tx_queue(i) {
                Some(q) => q.pop_burst(&mut burst, want),
                None => break,
            };
            let mut done = 0;
            let mut wait = false;
            while done < burst.len() {
                let (_, segs, len) = burst.chain(done);
                let src = Src::Guest { mem: &mem, segs };
                self.rx_hint = burst.len() - done;
                let fwd = self.forward_frame(i, src, len, hdr_len, now);
                self.rx_hint = 1;
                if fwd == Fwd::Wait {
                    // The uplink holds this port back: this frame and the
                    // ones after it stay in the guest's ring for a later round.
                    wait = true;
                    break;
                }
                done += 1;
            }
            n += done;
            // The chains forwarded go back to the guest together (the used
            // index is published once per round, in `poll`).
            let mut bad = None;
            if wait {
                if let Some(s) = self.slots[i].as_mut() {
                    s.rt.egress_held = true;
                }
            }
            if let Some(q) = self.tx_queue(i) {
                if wait {
                    q.unpop_n((burst.len() - done) as u16);
                }
                for k in 0..done {
                    if let Err(e) = q.add_used(burst.chain(k).0, 0) {
                        bad = Some(e);
                        break;
                    }
                }
            }
            if let Err(e) = popped {
                if let Some(s) = &self.slots[i] {
                    s.stats.tx.drop(DropReason::BadDescriptor);
                }
                bad = Some(e);
                n += 1;
            }
            if let Some(e) = bad {
                self.reset(i, now, &format_args!("transmit queue: {e}"));
                break;
            }
            if wait || burst.len() < want {
                // Held back, or the ring is drained.
                break;
            }
        }
        self.tx_burst = Some(burst);
        if n == budget {
            // Frames are left for the next round: the port is still
            // backlogged toward the uplinks it sends to.
            let id = self.slots[i].as_ref().map(|s| s.id);
            for s in self.slots.iter_mut().flatten() {
                if let (Port::Uplink(u), Some(id)) = (&mut s.port, id) {
                    u.sched.backlogged(id);
                }
            }
        }
        n
    }

    /// Slot `i`'s transmit queue, when it is a running vhost-user port.
    fn tx_queue(&mut self, i: usize) -> Option<&mut crate::vhost_user::queue::ActiveQueue> {
        match self.slots.get_mut(i)?.as_mut().map(|s| &mut s.port) {
            Some(Port::VhostUser(p)) => p.device.queue(TX_QUEUE),
            _ => None,
        }
    }

    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len`
    /// first) from slot `i`, switched.
    fn forward_frame(
        &mut self,
        i: usize,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        now: Instant,
    ) -> Fwd {
        self.forward_frame_to(i, src, total, hdr_len, now, None)
    }

    /// Forwards one frame of `total` bytes (virtio-net header of `hdr_len` first) from slot `i`.
    /// `direct`: a direct-mode port the frame goes to as it is (it came
    /// in on that port's uplink queue); a frame from a direct-mode port goes
    /// as it is to its uplink. Neither is switched (no FDB, VLAN or QoS).
    fn forward_frame_to(
        &mut self,
        i: usize,
        src: Src<'_>,
        total: u64,
        hdr_len: usize,
        now: Instant,
        direct: Option<PortId>,
    ) -> Fwd {
        let Some(stats) = self.slots[i].as_ref().map(|s| &s.stats) else {
            return Fwd::Done;
        };
        let mut pre = [0u8; virtio_net::HEADER_LEN + L2Header::MAX_LEN];
        let want = (hdr_len + L2Header::MAX_LEN).min(total as usize);
        let got = src.read(0, &mut pre[..want]);
        let frame_len = total.saturating_sub(hdr_len as u64);
        if got < hdr_len || frame_len > MAX_FRAME {
            stats.tx.drop(DropReason::Malformed);
            return Fwd::Done;
        }
        let vhdr = match VirtioNetHdr::new_checked(&pre[..hdr_len], hdr_len)
            .and_then(|h| VirtioNetHdrRepr::parse(&h))
        {
            Ok(h) => h,
            Err(_) => {
                stats.tx.drop(DropReason::Malformed);
                return Fwd::Done;
            }
        };
        let l2 = match L2Header::parse(&pre[hdr_len..got]) {
            Ok(l2) => l2,
            Err(r) => {
                stats.tx.drop(r);
                return Fwd::Done;
            }
        };
        let src_tag_len: u64 = if l2.tag.is_some() { 4 } else { 0 };
        let sender = self.slots[i]
            .as_ref()
            .map_or(Caps::NONE, |s| s.port.tx_caps());
        if let Err(r) = offload::check(&vhdr, frame_len as usize, 14 + src_tag_len as usize, sender)
        {
            stats.tx.drop(match r {
                Reject::Malformed => DropReason::Malformed,
                Reject::Unsupported => DropReason::Offload,
            });
            return Fwd::Done;
        }
        stats.tx.frame(frame_len as usize);
        let direct = direct.or_else(|| self.slots[i].as_ref().and_then(|s| s.direct_up));
        if let Some(to) = direct {
            let frame = Frame {
                src,
                head: &pre[hdr_len..got],
                hdr_len,
                vhdr,
                macs: pre[hdr_len..hdr_len + 12].try_into().unwrap_or([0; 12]),
                src_tag_len,
                tci_pcp: if l2.tag.is_some() {
                    u16::from(pre[hdr_len + 14] & 0xe0) << 8
                } else {
                    0
                },
                frame_len,
            };
            // The frame leaves with the tag it came with, if any.
            let tagging = l2.tag.map_or(Tagging::Untagged, Tagging::Tagged);
            match self
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|s| s.id == to))
            {
                Some(j) => self.deliver_to(j, &frame, tagging, now),
                None => {
                    if let Some(s) = &self.slots[i] {
                        s.stats.tx.drop(DropReason::NoRoute);
                    }
                }
            }
            return Fwd::Done;
        }
        let Datapath {
            slots,
            fdb,
            remote,
            topo_gen,
            ..
        } = self;
        let Some(me) = slots[i].as_ref() else {
            return Fwd::Done;
        };
        let src_id = me.id;
        let learn = me.needs_mac;
        if let (Some(vtep), Some(vid)) = (self.from_vtep, me.policy.vlan.ingress(l2.tag)) {
            // Before the decision (whose own learning keeps the VTEP): a
            // new VTEP changes the generation, so no memo outlives it.
            fdb.learn_remote(vid, l2.src, src_id, me.policy.fdb_limit, vtep, now);
        }
        // A burst from one port is mostly one flow: the last decision holds
        // while its inputs are the same (addresses, tag, time, FDB, ports).
        let memo = me.rt.flow.filter(|m| {
            m.l2 == l2 && m.now == now && m.fdb_gen == fdb.generation() && m.topo_gen == *topo_gen
        });
        let decision = match memo {
            Some(m) => m.decision,
            None => {
                let decision = decide(fdb, src_id, &me.policy, &l2, now, |p, vid| {
                    match slots.iter().flatten().find(|s| s.id == p) {
                        Some(s) => s.policy.vlan.egress(vid),
                        None => remote
                            .iter()
                            .find(|r| r.id == p)
                            .and_then(|r| r.vlan.egress(vid)),
                    }
                });
                if let Some(me) = slots[i].as_mut() {
                    me.rt.flow = Some(FlowMemo {
                        l2,
                        now,
                        fdb_gen: fdb.generation(),
                        topo_gen: *topo_gen,
                        decision,
                    });
                }
                decision
            }
        };
        let d = match decision {
            Ok(d) => {
                if d.learned == Learned::PortLimit {
                    if let Some(me) = slots[i].as_ref() {
                        me.stats.tx.drop(DropReason::FdbLimit);
                    }
                }
                d
            }
            Err(r) => {
                if let Some(me) = slots[i].as_ref() {
                    me.stats.tx.drop(r);
                }
                return Fwd::Done;
            }
        };
        let tci_pcp = if l2.tag.is_some() {
            u16::from(pre[hdr_len + 14] & 0xe0) << 8
        } else {
            0
        };
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&pre[hdr_len..hdr_len + 12]);
        let frame = Frame {
            src,
            head: &pre[hdr_len..got],
            hdr_len,
            vhdr,
            macs,
            src_tag_len,
            tci_pcp,
            frame_len,
        };
        match d.dest {
            Destination::Port(p, tagging) => {
                if let Some(j) = self
                    .slots
                    .iter()
                    .position(|s| s.as_ref().is_some_and(|s| s.id == p))
                {
                    if self.egress_wait(i, j, frame_len as usize) {
                        return Fwd::Wait;
                    }
                    self.to_vtep = self.vtep_of(j, d.vid, l2.dst, now);
                    self.deliver_to(j, &frame, tagging, now);
                    self.to_vtep = None;
                } else if let Some(w) = self.remote.iter().find(|r| r.id == p).map(|r| r.worker) {
                    self.push_remote(i, w, Some(p), &frame, &d);
                }
            }
            Destination::Flood => {
                let mut sent = false;
                for j in 0..self.slots.len() {
                    let Some(s) = self.slots[j].as_ref() else {
                        continue;
                    };
                    // Direct-mode ports are not switched: no floods either.
                    // A lent uplink queue's lender floods to the wire.
                    if s.id == src_id || s.direct_up.is_some() || is_lent(&s.port) {
                        continue;
                    }
                    if let Some(tagging) = s.policy.vlan.egress(d.vid) {
                        // A flood does not wait for one destination; it counts against the link.
                        if let Some(Port::Uplink(u)) = self.slots[j].as_mut().map(|s| &mut s.port) {
                            u.sched.charge(frame_len as usize);
                        }
                        self.deliver_to(j, &frame, tagging, now);
                        sent = true;
                    }
                }
                // Once to every other worker with a member of the VLAN.
                for k in 0..self.peers.len() {
                    let w = self.peers[k].worker;
                    if self
                        .remote
                        .iter()
                        .any(|r| r.worker == w && r.vlan.egress(d.vid).is_some())
                    {
                        sent |= self.push_remote(i, w, None, &frame, &d);
                    }
                }
                if let (false, Some(s)) = (sent, &self.slots[i]) {
                    s.stats.tx.drop(DropReason::NoRoute);
                }
            }
        }
        if learn {
            self.learn_mac(i, l2.src);
        }
        Fwd::Done
    }

    /// Whether a frame of `bytes` from slot `i` to slot `j` must wait: `j`
    /// is an uplink whose egress scheduler or full ring holds it back, and
    /// `i` a guest whose ring can keep it. Otherwise the frame is charged
    /// to the link. A waiting frame is taken back from `i`'s counters.
    #[inline]
    fn egress_wait(&mut self, i: usize, j: usize, bytes: usize) -> bool {
        let Some(src) = self.slots[i].as_ref() else {
            return false;
        };
        let (id, guest) = (src.id, matches!(src.port, Port::VhostUser(_)));
        let Some(Port::Uplink(u)) = self.slots[j].as_mut().map(|s| &mut s.port) else {
            return false;
        };
        if !guest {
            u.sched.charge(bytes);
            return false;
        }
        if !u.tx_ready(uplink::HDR_LEN + bytes + 4) {
            // The ring is full: no verdict, but the port holds frames.
            u.sched.ring_full(id);
        } else if u.sched.admit(id, bytes).is_ok() {
            return false;
        }
        if let Some(s) = &self.slots[i] {
            s.stats.tx.unframe(bytes);
            crate::stats::bump(&s.stats.tx.egress_waits, 1);
        }
        true
    }

    /// Copies a frame from slot `i` into the ring to worker `w` (it owns the
    /// destination, or has members of the VLAN when `dest` is `None`) with
    /// decision `d`. A full ring is a `ring_full` drop counted on the
    /// sending port (the destination's counters belong to the other worker).
    fn push_remote(
        &mut self,
        i: usize,
        w: WorkerId,
        dest: Option<PortId>,
        frame: &Frame<'_>,
        d: &crate::forward::Decision,
    ) -> bool {
        let Some(src) = self.slots[i].as_ref() else {
            return false;
        };
        let Some(peer) = self.peers.iter_mut().find(|p| p.worker == w) else {
            return false;
        };
        let len = RECORD_HEADER + frame.frame_len as usize;
        let Some(buf) = peer.tx.reserve(len) else {
            src.stats.tx.drop(DropReason::RingFull);
            return false;
        };
        Record {
            kind: Kind::Frame,
            dest,
            src: src.id,
            vid: d.vid,
            tci_pcp: frame.tci_pcp,
            src_tag_len: frame.src_tag_len as u8,
            vhdr: frame.vhdr,
            learn: d.learned.is_learned(),
        }
        .emit(&mut buf[..RECORD_HEADER]);
        if frame
            .src
            .read(frame.hdr_len as u64, &mut buf[RECORD_HEADER..])
            != len - RECORD_HEADER
        {
            src.stats.tx.drop(DropReason::Malformed);
            return false;
        }
        peer.tx.commit(len);
        peer.pushed = true;
        true
    }

    /// Tells every other worker to forget what it learned on `id`.
    fn flush_remote(&mut self, id: PortId) {
        for peer in &mut self.peers {
            if let Some(buf) = peer.tx.reserve(RECORD_HEADER) {
                Record {
                    kind: Kind::Flush,
                    dest: None,
                    src: id,
                    vid: 0,
                    tci_pcp: 0,
                    src_tag_len: 0,
                    vhdr: VirtioNetHdrRepr::default(),
                    learn: false,
                }
                .emit(buf);
                peer.tx.commit(RECORD_HEADER);
                peer.pushed = true;
            }
        }
    }

    /// Takes up to `budget` records from each other worker and delivers
    /// them to this worker's ports. Returns the records taken.
    fn poll_peers(&mut self, now: Instant, budget: usize) -> usize {
        let mut work = 0;
        for k in 0..self.peers.len() {
            let Some(mut rx) = self.peers[k].rx.take() else {
                continue;
            };
            let mut n = 0;
            while n < budget {
                let Some(rec) = rx.peek() else { break };
                self.on_record(rec, now);
                rx.pop();
                n += 1;
            }
            if n > 0 {
                rx.release();
            }
            work += n;
            self.peers[k].rx = Some(rx);
        }
        work
    }

    fn on_record(&mut self, rec: &[u8], now: Instant) {
        let Some(r) = Record::parse(rec) else { return };
        if r.kind == Kind::Flush {
            self.fdb.flush_port(r.src);
            return;
        }
        let bytes = &rec[RECORD_HEADER..];
        if bytes.len() < 14 + usize::from(r.src_tag_len) {
            return;
        }
        // The port's limit was applied where it lives: learn what was
        // learned there (no limit of its own here, only the table's rules).
        if r.learn {
            self.fdb.learn(
                r.vid,
                crate::wire::EthernetAddress::from_bytes(&bytes[6..12]),
                r.src,
                Some(u32::MAX),
                now,
            );
        }
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&bytes[..12]);
        let frame = Frame {
            src: Src::Local(bytes),
            head: head_of(bytes),
            hdr_len: 0,
            vhdr: r.vhdr,
            macs,
            src_tag_len: u64::from(r.src_tag_len),
            tci_pcp: r.tci_pcp,
            frame_len: bytes.len() as u64,
        };
        for j in 0..self.slots.len() {
            let Some(s) = self.slots[j].as_ref() else {
                continue;
            };
            // A flood reached the wire through the uplink's own worker.
            let wanted = match r.dest {
                Some(p) => s.id == p,
                None => s.id != r.src && !is_lent(&s.port),
            };
            if !wanted {
                continue;
            }
            if let Some(tagging) = s.policy.vlan.egress(r.vid) {
                if r.dest.is_some() {
                    let dst = crate::wire::EthernetAddress::from_bytes(&bytes[..6]);
                    self.to_vtep = self.vtep_of(j, r.vid, dst, now);
                }
                self.deliver_to(j, &frame, tagging, now);
                self.to_vtep = None;
            }
            if r.dest.is_some() {
                break;
            }
        }
    }

    /// Publishes this round's records to other workers, waking sleepers.
    fn flush_peers(&mut self) {
        for peer in &mut self.peers {
            if std::mem::take(&mut peer.pushed) {
                peer.tx.flush();
                peer.doorbell.ring();
            }
        }
    }

    /// True when another worker published records not yet taken.
    pub fn peers_pending(&mut self) -> bool {
        self.peers
            .iter_mut()
            .any(|p| p.rx.as_mut().is_some_and(|rx| rx.pending()))
    }

    /// Connects to another worker.
    pub fn add_peer(&mut self, p: PeerSetup) {
        self.peers.retain(|x| x.worker != p.worker);
        self.peers.push(p.into_peer());
    }

    /// Disconnects from a worker that stopped (its ports are gone or moved).
    pub fn remove_peer(&mut self, w: WorkerId) {
        self.peers.retain(|x| x.worker != w);
    }

    /// Learns (or updates) where another worker's port is.
    pub fn set_remote(&mut self, r: RemotePort) {
        self.topo_gen += 1;
        self.remote.retain(|x| x.id != r.id);
        self.remote.push(r);
    }

    /// Forgets another worker's port.
    pub fn remove_remote(&mut self, id: PortId) {
        self.topo_gen += 1;
        self.remote.retain(|x| x.id != id);
        self.fdb.flush_port(id);
    }

    /// The VTEP behind VXLAN slot `j` that `dst` on `vid` was learned
    /// behind (`None`: not a VXLAN port, or unknown there: flood its remotes).
    fn vtep_of(
        &self,
        j: usize,
        vid: u16,
        dst: crate::wire::EthernetAddress,
        now: Instant,
    ) -> Option<std::net::Ipv4Addr> {
        match self.slots[j].as_ref().map(|s| &s.port) {
            Some(Port::Vxlan(_)) => self.fdb.remote(vid, dst, now),
            _ => None,
        }
    }

    /// Delivers a frame to slot `j`, doing in software the offload work the
    /// destination did not negotiate.
    fn deliver_to(&mut self, j: usize, frame: &Frame<'_>, tagging: Tagging, now: Instant) {
        let Some(caps) = self.slots[j].as_ref().map(|s| s.port.rx_caps()) else {
            return;
        };
        if self.lro_offer(j, frame, tagging, caps, now) {
            return;
        }
        let mut f = *frame;
        f.vhdr.flags = offload::egress_flags(f.vhdr.flags, caps);
        match offload::work(&frame.vhdr, caps) {
            Work::Pass => {
                self.deliver_one(j, &f, tagging, now);
            }
            work => self.deliver_soft(j, frame, work, caps, tagging, now),
        }
    }

    /// Software LRO toward slot `j`: merges the frame into the port's
    /// aggregate (built in place in the port's receive buffers) when it can
    /// (returns true: nothing else to do now); otherwise ends the aggregate
    /// first (so nothing is reordered), maybe starting a new one with this
    /// frame.
    fn lro_offer(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        tagging: Tagging,
        caps: Caps,
        now: Instant,
    ) -> bool {
        let Datapath {
            slots,
            rx_chain,
            rx_hint,
            ..
        } = self;
        let want = *rx_hint;
        let Some(slot) = slots[j].as_mut() else {
            return false;
        };
        let wanted = slot.policies.effective_lro() && caps.csum;
        let (Port::VhostUser(p), Some(ctx)) = (&mut slot.port, slot.rt.lro.as_mut()) else {
            return false;
        };
        let len = frame.frame_len as usize;
        let mut peek = [0u8; lro::PEEK_LEN];
        let mut hdr = frame.head;
        let seg = if wanted && p.device.mrg_rxbuf() {
            if hdr.len() < lro::PEEK_LEN.min(len) {
                // The headers beyond what forwarding read (only frames that may merge).
                let n = frame
                    .src
                    .read(frame.hdr_len as u64, &mut peek[..lro::PEEK_LEN.min(len)]);
                hdr = &peek[..n];
            }
            lro::Segment::parse(hdr, len, 14 + frame.src_tag_len as usize, &frame.vhdr)
                .filter(|s| if s.v6 { caps.tso6 } else { caps.tso4 })
        } else {
            None
        };
        let Some(seg) = seg else {
            if ctx.agg.active() {
                self.lro_deliver(j, now);
            }
            return false;
        };
        let hdr_len = p.device.vnet_hdr_len();
        let Some(q) = p.device.queue(RX_QUEUE) else {
            return false;
        };
        let src_off = frame.hdr_len as u64;
        let mut ended = Ok(None);
        let mut hostile = None;
        let absorbed = 'offer: {
            if ctx.agg.active() && ctx.tagging == tagging {
                match ctx.agg.append(
                    q,
                    rx_chain,
                    &seg,
                    hdr,
                    &frame.vhdr,
                    &frame.src,
                    src_off,
                    want,
                ) {
                    Ok(true) => {
                        crate::stats::bump(&slot.stats.rx.lro_merged, 1);
                        ctx.last = now;
                        return true;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        hostile = Some(e);
                        break 'offer true;
                    }
                }
            }
            if ctx.agg.active() {
                ended = ctx.agg.finish(q);
                if ended.is_err() {
                    break 'offer false;
                }
            }
            let (l2, l2_len) = frame.egress_l2(tagging);
            match ctx.agg.start(
                q,
                rx_chain,
                &seg,
                hdr,
                &frame.vhdr,
                &frame.src,
                src_off,
                &l2[..l2_len],
                frame.src_tag_len as usize,
                hdr_len,
                want,
            ) {
                Ok(started) => {
                    if started {
                        ctx.tagging = tagging;
                        ctx.started = now;
                        ctx.last = now;
                    }
                    started
                }
                Err(e) => {
                    hostile = Some(e);
                    true
                }
            }
        };
        if let Some(e) = hostile {
            ended = Err(PlaceError::Hostile(e));
        }
        self.lro_account(j, ended, now);
        absorbed
    }

    /// The end of a batch: the worker found nothing to forward for a while
    /// and is about to sleep. Every LRO aggregate ends now (the flow paused,
    /// perhaps waiting for this very data) rather than at its deadline,
    /// which would take a timer and a wake-up. True when one was delivered
    /// (a polling round must publish it and call the guest first).
    pub fn end_batch(&mut self, now: Instant) -> bool {
        let mut delivered = false;
        for j in 0..self.slots.len() {
            let active = self
                .slots
                .get(j)
                .and_then(Option::as_ref)
                .and_then(|s| s.rt.lro.as_ref())
                .is_some_and(|l| l.agg.active());
            if active {
                self.lro_deliver(j, now);
                delivered = true;
            }
        }
        delivered
    }

    /// Ends slot `j`'s aggregate if its time is up; otherwise returns when it will be.
    fn lro_due(&mut self, j: usize, now: Instant) -> Option<Instant> {
        let ctx = self.slots.get(j)?.as_ref()?.rt.lro.as_ref()?;
        if !ctx.agg.active() {
            return None;
        }
        let due = (ctx.last + LRO_IDLE).min(ctx.started + LRO_HOLD);
        if now >= due {
            self.lro_deliver(j, now);
            None
        } else {
            Some(due)
        }
    }

    /// Ends slot `j`'s aggregate, if any: delivered into the buffers it was built in.
    fn lro_deliver(&mut self, j: usize, now: Instant) {
        let Some(s) = self.slots.get_mut(j).and_then(Option::as_mut) else {
            return;
        };
        let (Port::VhostUser(p), Some(ctx)) = (&mut s.port, s.rt.lro.as_mut()) else {
            return;
        };
        if !ctx.agg.active() {
            return;
        }
        let ended = match p.device.queue(RX_QUEUE) {
            Some(q) => ctx.agg.finish(q),
            None => {
                ctx.agg.abandon();
                Ok(None)
            }
        };
        self.lro_account(j, ended, now);
    }

    /// Counts how an aggregate ended (a broken ring resets the port).
    fn lro_account(
        &mut self,
        j: usize,
        ended: Result<Option<Delivered>, PlaceError>,
        now: Instant,
    ) {
        let Some(s) = self.slots.get_mut(j).and_then(Option::as_mut) else {
            return;
        };
        match ended {
            Ok(None) => {}
            Ok(Some(d)) => {
                s.stats.rx.frame(d.len);
                s.rt.round_rx += 1;
            }
            Err(PlaceError::Unmapped) => s.stats.rx.drop(DropReason::BadDescriptor),
            Err(PlaceError::Hostile(e)) => {
                s.stats.rx.drop(DropReason::BadDescriptor);
                if let Some(l) = s.rt.lro.as_mut() {
                    l.agg.abandon();
                }
                self.reset(j, now, &format_args!("receive queue: {e}"));
            }
        }
    }

    /// The software fallback: the frame is copied out once (it is read in
    /// full anyway to checksum it), completed or cut into segments, and each
    /// result delivered like a frame from a local port.
    fn deliver_soft(
        &mut self,
        j: usize,
        frame: &Frame<'_>,
        work: Work,
        caps: Caps,
        tagging: Tagging,
        now: Instant,
    ) {
        let (Some(mut soft), Some(mut seg)) = (self.soft.take(), self.seg.take()) else {
            return;
        };
        let len = frame.frame_len as usize;
        let got = frame.src.read(frame.hdr_len as u64, &mut soft[..len]);
        let l3 = 14 + frame.src_tag_len as usize;
        let local = |bytes, vhdr| Frame {
            src: Src::Local(bytes),
            head: head_of(bytes),
            hdr_len: 0,
            vhdr,
            ..*frame
        };
        let result = if got != len {
            Err(DropReason::Malformed)
        } else if work == Work::Checksum {
            match offload::complete_checksum(&mut soft[..len], &frame.vhdr) {
                Ok(mut h) => {
                    h.flags = offload::egress_flags(h.flags, caps);
                    if self.deliver_one(j, &local(&soft[..len], h), tagging, now) {
                        if let Some(s) = &self.slots[j] {
                            crate::stats::bump(&s.stats.rx.sw_checksums, 1);
                        }
                    }
                    Ok(())
                }
                Err(_) => Err(DropReason::Malformed),
            }
        } else {
            let mut failed = false;
            let cut = offload::segment(
                &soft[..len],
                &frame.vhdr,
                l3,
                caps.csum,
                &mut seg,
                |b, h| {
                    let f = Frame {
                        src: Src::Local(b),
                        head: head_of(b),
                        hdr_len: 0,
                        vhdr: *h,
                        frame_len: b.len() as u64,
                        ..*frame
                    };
                    failed = !self.deliver_one(j, &f, tagging, now);
                    !failed
                },
            );
            match cut {
                Ok(_) => {
                    if let (false, Some(s)) = (failed, &self.slots[j]) {
                        crate::stats::bump(&s.stats.rx.sw_segmented, 1);
                    }
                    Ok(())
                }
                Err(Reject::Malformed) => Err(DropReason::Malformed),
                Err(Reject::Unsupported) => Err(DropReason::Offload),
            }
        };
        if let (Err(r), Some(s)) = (result, &self.slots[j]) {
            s.stats.rx.drop(r);
        }
        self.soft = Some(soft);
        self.seg = Some(seg);
    }

    fn deliver_one(&mut self, j: usize, frame: &Frame<'_>, tagging: Tagging, now: Instant) -> bool {
        let Datapath {
            slots,
            rx_chain,
            plan,
            rx_hint,
            to_vtep,
            ..
        } = self;
        let Some(dst) = slots[j].as_mut() else {
            return false;
        };
        let result = match &mut dst.port {
            Port::VhostUser(p) => deliver_vhost_user(p, frame, tagging, plan, rx_chain, *rx_hint),
            Port::Tap(t) => {
                let out = t.out_buf();
                deliver_local(out, virtio_net::HEADER_LEN, frame, tagging).and_then(
                    |(len, bytes)| {
                        if t.send(len) {
                            Ok(bytes)
                        } else {
                            Err(DeliverError::Drop(DropReason::RingFull))
                        }
                    },
                )
            }
            Port::Uplink(u) => {
                let need = uplink::HDR_LEN + frame.egress_l2(tagging).1 + frame.rest().1 as usize;
                match u.tx_buf(need) {
                    Some(out) => deliver_local(out, uplink::HDR_LEN, frame, tagging).and_then(
                        |(len, bytes)| {
                            if u.tx_commit(len) {
                                Ok(bytes)
                            } else {
                                Err(DeliverError::Drop(DropReason::RingFull))
                            }
                        },
                    ),
                    None => Err(DeliverError::Drop(DropReason::RingFull)),
                }
            }
            Port::Vxlan(v) => {
                // The inner frame goes into a send slot behind room for the
                // UDP and VXLAN headers; no virtio-net header (its offloads
                // were done in software: the port takes none).
                let len = frame.egress_l2(tagging).1 + frame.rest().1 as usize;
                let fanout = if to_vtep.is_some() { 1 } else { v.fanout() };
                match v.reserve(len, fanout, &dst.stats.rx) {
                    Ok(()) => deliver_local(v.slot(), 0, frame, tagging).map(|(n, bytes)| {
                        v.commit(n, *to_vtep);
                        bytes
                    }),
                    Err(r) => Err(DeliverError::Drop(r)),
                }
            }
        };
        match result {
            Ok(bytes) => {
                dst.stats.rx.frame(bytes);
                dst.rt.round_rx += 1;
                true
            }
            Err(DeliverError::Drop(r)) => {
                dst.stats.rx.drop(r);
                // The guest must hear about what it has, to return buffers.
                dst.rt.urgent |= r == DropReason::RingFull;
                false
            }
            Err(DeliverError::Hostile(e)) => {
                dst.stats.rx.drop(DropReason::BadDescriptor);
                self.reset(j, now, &format_args!("receive queue: {e}"));
                false
            }
        }
    }
}

/// An uplink receive queue on its way to or from the worker of its owner.
#[derive(Debug)]
pub struct Lent {
    /// The uplink that lent it.
    pub uplink: PortId,
    /// Its name while held: the uplink's, then `:q` and its number.
    pub name: String,
    /// The uplink's forwarding policy (VLANs), which it keeps while held.
    pub policy: PortPolicy,
    /// The uplink's latency policies.
    pub policies: Policies,
    /// The queue with its own transmit sockets.
    pub port: UplinkPort,
}

/// Whether `port` is an uplink queue lent by another worker's uplink.
fn is_lent(port: &Port) -> bool {
    matches!(port, Port::Uplink(u) if u.lent().is_some())
}

/// Frames an uplink receive queue gives per turn before the next queue's
/// turn (a round gives each queue up to the budget, in turns). Small enough
/// that a frame on its own queue waits a few frames' work behind a flood on
/// the shared one, large enough that a busy queue still goes in bursts.
pub const QUEUE_TURN: usize = 8;

/// Serves `nq` queues, each up to `budget` items, in turns of up to `turn`:
/// queue 0, 1, .., nq-1, then again, until every queue has had its budget
/// or none gave a full turn (all drained). `serve(q, limit)` takes up to
/// `limit` items from queue `q` and says how many it took. A lone queue is
/// served its whole budget at once (no turns to take). Returns the items
/// taken.
#[inline]
pub(crate) fn in_turns(
    nq: usize,
    budget: usize,
    turn: usize,
    mut serve: impl FnMut(usize, usize) -> usize,
) -> usize {
    if nq == 1 {
        return serve(0, budget);
    }
    let turn = turn.max(1);
    let mut n = 0;
    let mut given = 0;
    while given < budget {
        let limit = turn.min(budget - given);
        // Whether some queue gave a full turn (it may have more).
        let mut more = false;
        for q in 0..nq {
            let m = serve(q, limit);
            more |= m == limit;
            n += m;
        }
        given += limit;
        if !more {
            break;
        }
    }
    n
}

/// Transmit busy-poll budget: after `tx_poll_budget` empty rounds the
/// guest is asked to kick again; a frame puts the queue back to polling.
fn tx_budget(s: &mut Slot, popped: usize) {
    let Port::VhostUser(p) = &mut s.port else {
        return;
    };
    let Some(q) = p.device.queue(TX_QUEUE) else {
        return;
    };
    if s.rt.egress_held && popped == 0 {
        // Not idle: held back (polled on the scheduler's timer).
        return;
    }
    if popped > 0 {
        s.rt.tx_idle = 0;
        if s.rt.tx_armed {
            s.rt.tx_armed = false;
            q.disable_notification();
        }
        return;
    }
    s.rt.tx_idle = s.rt.tx_idle.saturating_add(1);
    if !s.rt.tx_armed && s.rt.tx_idle >= s.policies.effective_tx_poll_budget() {
        s.rt.tx_armed = true;
        if q.enable_notification() {
            // Frames came while arming: the next round takes them.
            s.rt.tx_idle = 0;
        }
    }
}

/// Receive-side calls: the used ring is published every round; the call
/// goes when the driver wants one and the coalescing policy agrees. Returns
/// when a held call is due.
fn signal_rx(
    q: &mut crate::vhost_user::queue::ActiveQueue,
    rt: &mut PortRuntime,
    now: Instant,
    stats: &crate::stats::QueueStats,
) -> Option<Instant> {
    q.flush();
    let k = std::mem::take(&mut rt.round_rx);
    rt.coalescer.delivered(now, k);
    if !q.used_pending() {
        return None;
    }
    if !q.driver_wants_call() {
        q.decline(stats);
        rt.coalescer.declined();
        return None;
    }
    let d = if std::mem::take(&mut rt.urgent) {
        Decision::Now
    } else {
        rt.coalescer.decide(now)
    };
    match d {
        Decision::Now => {
            q.call(stats);
            rt.coalescer.reset();
            None
        }
        Decision::Hold(t) => {
            if k > 0 {
                crate::stats::bump(&stats.notifications_coalesced, 1);
            }
            Some(t)
        }
    }
}

/// A local frame's first bytes, as [`Frame::head`].
fn head_of(b: &[u8]) -> &[u8] {
    &b[..b.len().min(lro::PEEK_LEN)]
}

/// A frame being forwarded: where it is and what its first bytes say.
#[derive(Clone, Copy)]
struct Frame<'a> {
    src: Src<'a>,
    /// Its first bytes from the MACs, as read already (the L2 header at
    /// least; up to [`lro::PEEK_LEN`] of a local frame).
    head: &'a [u8],
    hdr_len: usize,
    vhdr: VirtioNetHdrRepr,
    macs: [u8; 12],
    src_tag_len: u64,
    tci_pcp: u16,
    frame_len: u64,
}

impl Frame<'_> {
    /// The L2 header as it leaves with `tagging` (MACs, then a tag when tagged); its length.
    fn egress_l2(&self, tagging: Tagging) -> ([u8; 16], usize) {
        let mut l2 = [0u8; 16];
        l2[..12].copy_from_slice(&self.macs);
        match tagging {
            Tagging::Untagged => (l2, 12),
            Tagging::Tagged(vid) => {
                l2[12..14].copy_from_slice(&[0x81, 0x00]);
                l2[14..16].copy_from_slice(&(self.tci_pcp | vid).to_be_bytes());
                (l2, 16)
            }
        }
    }

    /// Offset and length of what follows the source's MACs and tag.
    fn rest(&self) -> (u64, u64) {
        (
            self.hdr_len as u64 + 12 + self.src_tag_len,
            self.frame_len - 12 - self.src_tag_len,
        )
    }

    /// The virtio-net header for an egress L2 header of `l2_len` bytes:
    /// offload metadata carried over, offsets moved by the tag change.
    fn egress_vhdr(&self, l2_len: usize, num_buffers: u16) -> VirtioNetHdrRepr {
        let delta = l2_len as i32 - 12 - self.src_tag_len as i32;
        let mut vh = self.vhdr;
        if vh.flags & FLAG_NEEDS_CSUM != 0 {
            vh.csum_start = (i32::from(vh.csum_start) + delta) as u16;
        }
        if vh.gso_type != GSO_NONE {
            vh.hdr_len = (i32::from(vh.hdr_len) + delta) as u16;
        }
        vh.num_buffers = num_buffers;
        vh
    }
}

/// Receive buffers gathered for one frame (several chains with MRG_RXBUF).
struct RxPlan {
    segs: [Seg; MAX_SEGS],
    nsegs: usize,
    heads: [(u16, u32); MAX_MERGE],
    nheads: usize,
    cap: u64,
}

fn deliver_vhost_user(
    p: &mut VhostUserPort,
    f: &Frame<'_>,
    tagging: Tagging,
    plan: &mut RxPlan,
    chain: &mut Chain,
    hint: usize,
) -> Result<usize, DeliverError> {
    let hdr_len = p.device.vnet_hdr_len();
    let mrg = p.device.mrg_rxbuf();
    let Some(q) = p.device.queue(RX_QUEUE) else {
        return Err(DeliverError::Drop(DropReason::RingFull));
    };
    let (l2, l2_len) = f.egress_l2(tagging);
    let (rest_off, rest_len) = f.rest();
    let out_frame_len = l2_len as u64 + rest_len;
    let total = hdr_len as u64 + out_frame_len;

    match q.take(chain, hint) {
        Ok(true) => {}
        Ok(false) => return Err(DeliverError::Drop(DropReason::RingFull)),
        Err(e) => return Err(DeliverError::Hostile(e)),
    }
    // Most frames fit the first chain: its buffers are used as they are.
    let single = chain.len() >= total;
    if !single {
        // Mergeable receive buffers: more chains until the frame fits.
        if !mrg {
            undo(q, 1);
            return Err(DeliverError::Drop(DropReason::RingFull));
        }
        plan.nsegs = 0;
        plan.nheads = 0;
        plan.cap = 0;
        loop {
            if plan.nsegs + chain.segs().len() > MAX_SEGS {
                undo(q, plan.nheads + 1);
                return Err(DeliverError::Drop(DropReason::RingFull));
            }
            plan.segs[plan.nsegs..plan.nsegs + chain.segs().len()].copy_from_slice(chain.segs());
            plan.nsegs += chain.segs().len();
            plan.heads[plan.nheads] = (chain.head, chain.len() as u32);
            plan.nheads += 1;
            plan.cap += chain.len();
            if plan.cap >= total {
                break;
            }
            if plan.nheads == MAX_MERGE {
                undo(q, plan.nheads);
                return Err(DeliverError::Drop(DropReason::RingFull));
            }
            match q.take(chain, hint) {
                Ok(true) => {}
                Ok(false) => {
                    undo(q, plan.nheads);
                    return Err(DeliverError::Drop(DropReason::RingFull));
                }
                Err(e) => return Err(DeliverError::Hostile(e)),
            }
        }
    }
    let (segs, nheads) = if single {
        (chain.segs(), 1)
    } else {
        (&plan.segs[..plan.nsegs], plan.nheads)
    };

    let mut hb = [0u8; virtio_net::HEADER_LEN];
    let _ = f.egress_vhdr(l2_len, nheads as u16).emit(&mut hb, hdr_len);
    let at = {
        let mem: &GuestMem = q.mem();
        // Header and MACs (and tag) in one write.
        let mut head = [0u8; virtio_net::HEADER_LEN + 16];
        head[..hdr_len].copy_from_slice(&hb[..hdr_len]);
        head[hdr_len..hdr_len + l2_len].copy_from_slice(&l2[..l2_len]);
        let mut at = buffers::write(mem, segs, 0, &head[..hdr_len + l2_len]) as u64;
        at += match f.src {
            Src::Guest {
                mem: smem,
                segs: ssegs,
            } => buffers::copy(smem, ssegs, rest_off, mem, segs, at, rest_len),
            Src::Local(b) => {
                let from = (rest_off as usize).min(b.len());
                let to = (from + rest_len as usize).min(b.len());
                buffers::write(mem, segs, at, &b[from..to]) as u64
            }
        };
        at
    };
    if at != total {
        // Unmapped memory under a validated buffer: the memory table changed under us.
        undo(q, nheads);
        return Err(DeliverError::Drop(DropReason::BadDescriptor));
    }
    if single {
        q.add_used(chain.head, total as u32)
            .map_err(DeliverError::Hostile)?;
    } else {
        let mut left = total;
        for &(head, cap) in &plan.heads[..plan.nheads] {
            let used = left.min(u64::from(cap));
            left -= used;
            q.add_used(head, used as u32)
                .map_err(DeliverError::Hostile)?;
        }
    }
    Ok(out_frame_len as usize)
}

/// Assembles a frame with a virtio-net header of `hl` bytes in `out`;
/// returns (bytes to send, frame bytes without the header).
fn deliver_local(
    out: &mut [u8],
    hl: usize,
    f: &Frame<'_>,
    tagging: Tagging,
) -> Result<(usize, usize), DeliverError> {
    let (l2, l2_len) = f.egress_l2(tagging);
    let (rest_off, rest_len) = f.rest();
    let total = hl + l2_len + rest_len as usize;
    if total > out.len() {
        return Err(DeliverError::Drop(DropReason::Malformed));
    }
    if hl > 0 {
        let _ = f.egress_vhdr(l2_len, 0).emit(&mut out[..hl], hl);
    }
    out[hl..hl + l2_len].copy_from_slice(&l2[..l2_len]);
    let got = f.src.read(rest_off, &mut out[hl + l2_len..total]);
    if got != rest_len as usize {
        return Err(DeliverError::Drop(DropReason::Malformed));
    }
    Ok((total, l2_len + rest_len as usize))
}

fn undo(q: &mut crate::vhost_user::queue::ActiveQueue, n: usize) {
    q.untake(n);
}

#[cfg(test)]
mod tests {
    use super::{in_turns, QUEUE_TURN};

    /// Queues of items (the item is the queue's index), served through
    /// `in_turns` one round; the order in which items were taken.
    fn serve(queues: &mut [usize], budget: usize) -> Vec<usize> {
        let mut order = Vec::new();
        let n = in_turns(queues.len(), budget, QUEUE_TURN, |q, limit| {
            let m = queues[q].min(limit);
            queues[q] -= m;
            order.extend(std::iter::repeat_n(q, m));
            m
        });
        assert_eq!(n, order.len());
        order
    }

    #[test]
    fn a_frame_on_its_own_queue_waits_at_most_one_turn_of_a_flood() {
        // A flood of 1000 frames on the shared queue 0, one latency frame on
        // queue 1 (and an empty queue 2).
        let mut q = [1000, 1, 0];
        let order = serve(&mut q, 64);
        let at = order.iter().position(|&x| x == 1).unwrap();
        assert_eq!(at, QUEUE_TURN, "{order:?}");
        // The flood still gets its whole budget in the round.
        assert_eq!(order.iter().filter(|&&x| x == 0).count(), 64);
        assert_eq!(q, [1000 - 64, 0, 0]);
    }

    #[test]
    fn each_queue_gets_its_budget_in_turns_and_no_more() {
        let mut q = [100, 100, 5];
        let order = serve(&mut q, 20);
        assert_eq!(q, [80, 80, 0]);
        // Turns of 8, then the budget's remaining 4.
        let mut want = Vec::new();
        for (lim, last) in [(8, 5), (8, 0), (4, 0)] {
            want.extend(std::iter::repeat_n(0, lim));
            want.extend(std::iter::repeat_n(1, lim));
            want.extend(std::iter::repeat_n(2, last));
        }
        assert_eq!(order, want);
    }

    #[test]
    fn drained_queues_end_the_round_early_and_a_lone_queue_goes_whole() {
        let mut calls = 0;
        let n = in_turns(3, 64, QUEUE_TURN, |_, _| {
            calls += 1;
            0
        });
        assert_eq!((n, calls), (0, 3), "one pass over empty queues");
        let mut limits = Vec::new();
        in_turns(1, 64, QUEUE_TURN, |_, limit| {
            limits.push(limit);
            limit
        });
        assert_eq!(limits, [64], "a lone queue is served in one go");
        let mut q = [3, 9];
        assert_eq!(serve(&mut q, 64), [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    }
}
