//! The forwarding loop over a set of ports: pop frames from each port's
//! transmit queue, decide (FDB, VLAN, guard), copy each frame once into
//! each destination's receive buffers, return buffers, notify.
//!
//! No allocation, lock or system call per frame: buffers are fixed arrays
//! on the stack, counters are relaxed atomics, and notifications (eventfd
//! writes) happen once per queue per burst, only when the driver wants one.
//!
//! The data path keeps the ports (`table.rs`, `Table`), the FDB,
//! classification and the fast case; each kind of port receives, delivers
//! and ends its round itself (`crate::port`), reached through one dispatch
//! point. A frame's context (`FrameCtx`) is an argument, never a field set
//! around a call; the buffers reused frame after frame are one struct
//! (`Scratch`); what is not forwarding has its own type: the other workers
//! (`peers.rs`, `Peers`), what is said (`teller.rs`, `Teller`), where the
//! time goes (`clock.rs`, `RoundClock`, with `read_ahead.rs`).
//!
//! A frame's way, one file per stage: `ingress.rs` (taken from a port's
//! transmit ring, or from another worker's ring), `fast.rs` and `copies/`
//! (the fast case: a burst's plain frames to a remembered destination) or
//! `classify.rs` (the full path: headers, decision, unicast or flood),
//! `deliver.rs` and `lro_delivery.rs` (into a destination's receive
//! buffers, software offloads, LRO aggregates), `events.rs` (publishing,
//! calls, kicks and descriptor events). Beside the way: `lifecycle.rs`
//! (adding, removing, resetting ports; EVPN's routes), `spread.rs` (pairs
//! of other workers' ports served here), and on the table `lending.rs`
//! (uplink queues given to vNICs) and `cross.rs` (cross-connects).

mod classify;
mod clock;
mod copies;
mod cross;
mod deliver;
mod events;
mod fast;
mod frame;
mod ingress;
mod lending;
mod lifecycle;
mod lro_delivery;
mod peers;
mod read_ahead;
mod spread;
mod table;
mod teller;

pub use crate::port::QUEUE_TURN;
use clock::RoundClock;
pub(crate) use copies::Copies;
pub(crate) use events::signal_now;
use events::tx_budget;
pub(crate) use fast::Look;
use frame::head_of;
pub(crate) use frame::{Frame, FrameCtx};
pub use lending::Lent;
use lifecycle::Faults;
pub use lro_delivery::{LRO_HOLD, LRO_IDLE};
use peers::Peers;
pub use read_ahead::ReadAheadMode;
use spread::HeldPairs;
pub use table::Table;
use teller::Teller;

use crate::coalesce::Coalescer;
use crate::config::Policies;
use crate::fdb::Fdb;
use crate::forward::{L2Header, PortPolicy};
use crate::lro::place::InPlace;
use crate::perf::WorkerPerf;
use crate::port::vhost_user::RxPlan;
pub use crate::port::Port;
use crate::port::RoundCx;
use crate::stats::{DropReason, PortStats};
use crate::vhost_user::chain::{Chain, ChainError};
use crate::vhost_user::device::{tx_queue, RX_QUEUE};
use crate::vhost_user::queue::Burst;
use crate::vlan::Tagging;
use crate::PortId;
use std::sync::Arc;
use std::time::Instant;

/// Largest frame carried (a 64 KiB GSO frame plus Ethernet and VLAN headers).
pub const MAX_FRAME: u64 = 65535 + 18;
/// Most receive buffers one frame may span with mergeable buffers.
pub const MAX_MERGE: usize = 64;

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
    /// Where its frames go as they are, not switched: the uplink of a
    /// direct-mode port, or a cross-connected port's peer (`cross.rs`).
    pub direct_to: Option<PortId>,
    /// A multiqueue port whose pairs are spread over workers (its owner's
    /// slot, or a pair lent here): a frame switched to it goes to the
    /// worker serving the pair it steers to.
    pub routed: bool,
}

/// The running state of a port's latency policies.
#[derive(Debug)]
pub struct PortRuntime {
    /// When to call the guest after deliveries to its receive queue.
    pub coalescer: Coalescer,
    /// Frames delivered to the receive queue in the current round.
    round_rx: u32,
    /// Used entries added to the receive queues and not yet published
    /// (the port is in [`Datapath::rx_touched`]).
    rx_unpublished: bool,
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
    /// A cross-connected port's peer, by slot (the fast case's destination).
    cross: Option<usize>,
}

/// A forwarding decision and what it depended on: the frame's addresses
/// and tag, the time (aging), the FDB's generation and the ports' (their
/// VLANs and who exists). Reused for the next frame with the same inputs,
/// which would get the same answer, without hashing into the FDB twice;
/// the time counts as the same for [`MEMO_HOLD`], so a flow's first frame
/// of each polling round does not decide again (its FDB entries are
/// refreshed at least that often, against an aging time of minutes).
#[derive(Debug, Clone, Copy)]
struct FlowMemo {
    l2: L2Header,
    /// When the decision was made plus [`MEMO_HOLD`].
    until: Instant,
    fdb_gen: u64,
    topo_gen: u64,
    decision: Result<crate::forward::Decision, DropReason>,
    /// The one slot on this worker the decision delivers to and the tagging
    /// the frame leaves with: a unicast's destination, or a flood's sole
    /// recipient (slots move only with the ports' generation).
    to: Option<(usize, Tagging)>,
}

/// How long a remembered decision holds while nothing else changes.
pub const MEMO_HOLD: std::time::Duration = std::time::Duration::from_millis(1);

impl FlowMemo {
    /// True when a frame with header `l2` at `now` gets this decision.
    #[inline]
    fn holds(&self, l2: &L2Header, now: Instant, fdb_gen: u64, topo_gen: u64) -> bool {
        self.fdb_gen == fdb_gen && self.topo_gen == topo_gen && self.l2 == *l2 && now < self.until
    }

    /// Like [`FlowMemo::holds`] for every untagged frame with the MACs
    /// of [`FlowMemo::macs`].
    #[inline]
    fn holds_any_untagged(&self, now: Instant, fdb_gen: u64, topo_gen: u64) -> bool {
        self.fdb_gen == fdb_gen
            && self.topo_gen == topo_gen
            && self.l2.tag.is_none()
            && now < self.until
    }
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

/// What became of a frame taken from a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fwd {
    /// Forwarded or dropped: the source's buffer can be returned.
    Done,
    /// Held back by the uplink: leave it in the source's ring.
    Wait,
}

/// A destination that misbehaved while a frame was delivered to it.
pub(crate) enum DeliverError {
    Drop(DropReason),
    Hostile(ChainError),
}

/// Buffers the data path reuses frame after frame, allocated once. Their
/// own struct so that each is borrowed alongside the ports (a delivery
/// gathers receive chains while its destination is borrowed), none taken
/// out and put back.
struct Scratch {
    /// Receive buffers being gathered for one delivery.
    rx_chain: Box<Chain>,
    /// Several chains for one frame (mergeable receive buffers).
    plan: Box<RxPlan>,
    /// The fast case's frame copies, made at the end of each burst.
    copies: Box<Copies>,
    /// A frame materialized for software offload work.
    soft: Box<[u8]>,
    /// Where software segmentation builds each segment.
    seg: Box<[u8]>,
}

impl Scratch {
    fn new() -> Self {
        Self {
            rx_chain: Box::new(Chain::new()),
            plan: Box::new(RxPlan::new()),
            copies: Box::default(),
            soft: vec![0u8; MAX_FRAME as usize].into_boxed_slice(),
            seg: vec![0u8; MAX_FRAME as usize].into_boxed_slice(),
        }
    }
}

/// The switch's data plane.
pub struct Datapath {
    /// The ports (`table.rs`).
    table: Table,
    fdb: Fdb,
    /// The transmit chains being forwarded (moved out while in use: the
    /// whole data path reads them, its full path and its fast case alike).
    tx_burst: Option<Box<Burst>>,
    /// Buffers reused frame after frame.
    scratch: Scratch,
    /// Slots whose receive queues have used entries to publish after the
    /// transmit burst being forwarded (see [`Datapath::publish_burst`]).
    rx_touched: Vec<usize>,
    /// The earliest held call's deadline after the last round.
    next_deadline: Option<Instant>,
    /// What broke ports outside a frame's path (`table.rs`).
    faults: Faults,
    /// The other workers and their ports (`peers.rs`).
    peers: Peers,
    /// Pairs of other workers' ports served here (`spread.rs`).
    held: HeldPairs,
    /// Where this worker's time goes (`clock.rs`).
    clock: RoundClock,
    /// Where what changes is said (`teller.rs`).
    teller: Teller,
}

impl Datapath {
    /// An empty switch with the given FDB.
    pub fn new(fdb: Fdb) -> Self {
        Self {
            table: Table::new(),
            fdb,
            tx_burst: Some(Box::new(Burst::new())),
            scratch: Scratch::new(),
            rx_touched: Vec::with_capacity(64),
            next_deadline: None,
            faults: Faults::new(),
            peers: Peers::default(),
            held: HeldPairs::default(),
            clock: RoundClock::new(),
            teller: Teller::default(),
        }
    }

    /// One polling round: up to `budget` frames from each port. Returns
    /// frames forwarded or dropped (0 means idle).
    pub fn poll(&mut self, now: Instant, budget: usize) -> usize {
        let work = self.poll_round(now, budget);
        if work == 0 {
            self.prepare_rx(now);
            self.scratch.copies.release();
        }
        self.clock.end_round(work);
        work
    }

    /// An idle round's spare time: every guest's next receive chain readied
    /// (`ActiveQueue::prepare`), so that the next lone frame to it takes no
    /// miss on the receive ring. A chain that fails validation is a
    /// `bad_descriptor` drop and resets its port, as it would at delivery.
    fn prepare_rx(&mut self, now: Instant) {
        for j in 0..self.table.slots.len() {
            let Some(p) = self.table.slots[j]
                .as_mut()
                .and_then(|s| s.port.vhost_user_mut())
            else {
                continue;
            };
            if p.lent_pair().is_some() {
                continue;
            }
            if let Some(Err(e)) = p.device.queue(RX_QUEUE).map(|q| q.prepare()) {
                self.rx_ring_hostile(j, now, &e);
            }
        }
    }

    /// Transmit bursts read ahead or not (see [`ReadAheadMode`]); a new
    /// datapath never does.
    pub fn set_read_ahead(&mut self, mode: ReadAheadMode) {
        self.clock.set_read_ahead(mode);
    }

    /// Records (the default) or not how long each round's frames stayed in
    /// the switch (`crate::dwell`): off, to measure what recording costs.
    pub fn set_time_in_switch(&mut self, on: bool) {
        self.clock.set_time_in_switch(on);
    }

    /// The worker is back from waiting for events (asleep, or a look at
    /// its descriptors) and the work they brought (its hold,
    /// [`crate::perf::WorkerPerf::hold`]): that time is not the next round's.
    pub fn perf_resume(&mut self) {
        self.clock.resume();
    }

    /// Says what changes into `q` from now on.
    pub fn set_events(&mut self, q: Arc<crate::events::EventQueue>) {
        self.teller.set_queue(q);
    }

    /// Connects to another worker.
    pub fn add_peer(&mut self, p: crate::mesh::PeerSetup) {
        self.peers.add(p);
    }

    /// Disconnects from a worker that stopped (its ports are gone or moved).
    pub fn remove_peer(&mut self, w: crate::mesh::WorkerId) {
        self.peers.remove(w);
    }

    /// True when another worker published records not yet taken.
    pub fn peers_pending(&mut self) -> bool {
        self.peers.pending()
    }

    /// Learns (or updates) where another worker's port is.
    pub fn set_remote(&mut self, r: crate::mesh::RemotePort) {
        self.table.gen += 1;
        self.peers.set_remote(r);
    }

    /// Forgets another worker's port.
    pub fn remove_remote(&mut self, id: PortId) {
        self.table.gen += 1;
        self.peers.forget_remote(id);
        self.fdb.flush_port(id);
    }

    /// The ports.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The ports, to change in place.
    pub fn table_mut(&mut self) -> &mut Table {
        &mut self.table
    }

    /// The counters of where this data path's time goes.
    pub fn perf(&self) -> Arc<WorkerPerf> {
        Arc::clone(&self.clock.perf)
    }

    fn poll_round(&mut self, now: Instant, budget: usize) -> usize {
        for s in self.table.slots.iter_mut().flatten() {
            if let Some(sched) = s.port.sched_mut() {
                sched.begin_round(now);
            }
        }
        let mut work = self.poll_peers(now, budget);
        for i in 0..self.table.slots.len() {
            let n = self.forward_from(i, now, budget);
            work += n;
            if let Some(s) = self.table.slots[i].as_mut() {
                tx_budget(s, n);
            }
        }
        let mut next: Option<Instant> = None;
        // LRO aggregates end when their flow pauses or they are old enough.
        for j in 0..self.table.slots.len() {
            if let Some(due) = self.lro_due(j, now) {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        // Every transmit ring's frames are returned before any receive ring
        // shows what they became: a switch killed in between loses this
        // round's frames (TCP sends them again) instead of having them sent
        // again by their guests and delivered twice.
        for s in self.table.slots.iter_mut().flatten() {
            if let Some(p) = s.port.vhost_user_mut() {
                for k in 0..p.device.queue_pairs() {
                    if let Some(vq) = p.device.queue(tx_queue(k)) {
                        vq.signal(&s.stats.tx);
                        self.faults.call_failed |= vq.call_failed();
                    }
                }
            }
        }
        // (Frames from other kinds of ports, and other workers'.)
        self.publish_rx();
        // Every frame of the round is published now (`crate::dwell`).
        let round_cycles = self.clock.forwarded(work);
        for s in self.table.slots.iter_mut().flatten() {
            let cx = RoundCx {
                now,
                round_cycles,
                stats: &s.stats,
                rt: &mut s.rt,
                call_failed: &mut self.faults.call_failed,
            };
            if let Some(t) = s.port.end_round(cx) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        self.next_deadline = next;
        self.peers.flush();
        self.reset_broken(now);
        work
    }
}
