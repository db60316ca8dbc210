//! Per-port and per-queue counters: plain relaxed atomics written by the
//! worker that owns the queue and read by the control socket at any time.
//!
//! Directions are the guest's: `tx` counts frames the port's frontend sent
//! into the switch, `rx` counts frames the switch delivered to it.
//!
//! Each counter has one writer, the worker that owns the port, so counting
//! is a relaxed load and store ([`bump`]) rather than a locked read-modify-write:
//! a locked instruction is a full barrier that waits for the frame copy's
//! stores to drain, which on the fast path cost more than the copy itself.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub mod pressure;
mod prometheus;
pub use prometheus::prometheus;
pub(crate) use prometheus::write_family;

/// Why a frame was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The destination's receive ring had no (or not enough) buffers.
    RingFull,
    /// A descriptor chain failed validation (the port is reset).
    BadDescriptor,
    /// No destination: hairpin to the ingress port, or nobody in the VLAN.
    NoRoute,
    /// The frame's VLAN is not allowed on the port.
    Vlan,
    /// The source MAC is not the port's (MAC-spoof guard) or is a group address.
    Spoof,
    /// Too short for an Ethernet header, or longer than the switch carries,
    /// or offload metadata out of range (or not negotiated).
    Malformed,
    /// An offload the destination cannot take and the switch cannot complete
    /// in software (UDP GSO, TSO over IPv6 extension headers).
    Offload,
    /// Not a lost frame: the frame was forwarded, but its source address
    /// was not learned because the port holds as many as its FDB limit
    /// allows (see [`crate::fdb`]). Counted with the drops so that a port
    /// sending from too many addresses shows, with its reason, where
    /// operators look.
    FdbLimit,
    /// VXLAN: a datagram whose header lacks the I flag or names another VNI.
    Vni,
    /// Longer than the destination carries: a frame that would not fit the
    /// VXLAN underlay's MTU once encapsulated (never fragmented), or a
    /// datagram larger than the port's receive slots.
    TooBig,
    /// VXLAN: a datagram from a VTEP that is neither in the port's
    /// `remotes` nor in its `accept` ranges.
    UnknownVtep,
    /// A flood from a vNIC past its egress limit toward a port that
    /// leaves the host (a VXLAN port's VTEPs): a flood cannot wait for one
    /// destination, so it does not go there.
    Egress,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 12] = [
        DropReason::RingFull,
        DropReason::BadDescriptor,
        DropReason::NoRoute,
        DropReason::Vlan,
        DropReason::Spoof,
        DropReason::Malformed,
        DropReason::Offload,
        DropReason::FdbLimit,
        DropReason::Vni,
        DropReason::TooBig,
        DropReason::UnknownVtep,
        DropReason::Egress,
    ];

    /// The label used in JSON and Prometheus output.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::RingFull => "ring_full",
            DropReason::BadDescriptor => "bad_descriptor",
            DropReason::NoRoute => "no_route",
            DropReason::Vlan => "vlan",
            DropReason::Spoof => "spoof",
            DropReason::Malformed => "malformed",
            DropReason::Offload => "offload",
            DropReason::FdbLimit => "fdb_limit",
            DropReason::Vni => "vni",
            DropReason::TooBig => "too_big",
            DropReason::UnknownVtep => "unknown_vtep",
            DropReason::Egress => "egress",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Adds `n` to a counter that only the calling thread writes (readers may
/// see it a little late, never torn).
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Counters of one direction of one queue.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Frames.
    pub packets: AtomicU64,
    /// Bytes of frames (virtio-net header excluded).
    pub bytes: AtomicU64,
    /// Notifications the switch sent to the frontend (call eventfd writes).
    pub notifications_sent: AtomicU64,
    /// Notifications the frontend sent to the switch (kicks handled).
    pub notifications_received: AtomicU64,
    /// Notifications the frontend did not want (EVENT_IDX or
    /// VRING_AVAIL_F_NO_INTERRUPT): rounds whose used buffers needed no call.
    pub notifications_suppressed: AtomicU64,
    /// Rounds whose call the port's coalescing policy held back (folded
    /// into a later call).
    pub notifications_coalesced: AtomicU64,
    /// Frames whose checksum the switch completed in software for this
    /// destination (it did not negotiate checksum offload).
    pub sw_checksums: AtomicU64,
    /// GSO frames the switch cut into segments in software for this destination.
    pub sw_segmented: AtomicU64,
    /// TCP segments merged by LRO into a frame started by an earlier one
    /// (deliveries saved).
    pub lro_merged: AtomicU64,
    /// Times the uplink's egress scheduler held the port's next frame in
    /// the guest's ring for a later round (limit or contended link; not
    /// drops): a frame held over several rounds counts once per round.
    pub egress_waits: AtomicU64,
    /// Frames forwarded whose source address another port holds and is
    /// still sending from: the address was not moved to this port (the
    /// FDB's rule for moves, [`crate::fdb`]).
    pub mac_kept: AtomicU64,
    /// Flaps caught: an address this port took was claimed back by its
    /// previous holder, and is held there.
    pub mac_flaps: AtomicU64,
    /// Back-pressure: frames left in the guest's transmit ring at the end
    /// of a round because a destination could not take them (an uplink's
    /// egress held the port, [`QueueStats::egress_waits`]); a frame waiting
    /// several rounds counts once per round.
    pub held_frames: AtomicU64,
    /// Holds (of [`QueueStats::egress_waits`]) whose destination's own
    /// ring was full: a slow destination, not a limit or a busy link.
    pub held_dest_full: AtomicU64,
    drops: [AtomicU64; DropReason::ALL.len()],
}

impl QueueStats {
    /// Counts one frame of `bytes` bytes.
    #[inline]
    pub fn frame(&self, bytes: usize) {
        bump(&self.packets, 1);
        bump(&self.bytes, bytes as u64);
    }

    /// Counts `frames` frames of `bytes` bytes in all.
    #[inline]
    pub fn frames(&self, frames: u64, bytes: u64) {
        bump(&self.packets, frames);
        bump(&self.bytes, bytes);
    }

    /// Takes back a frame counted with [`QueueStats::frame`] that was not
    /// taken after all (it stays in the guest's ring for a later round).
    #[inline]
    pub fn unframe(&self, bytes: usize) {
        bump(&self.packets, u64::MAX);
        bump(&self.bytes, (bytes as u64).wrapping_neg());
    }

    /// Counts one dropped frame.
    #[inline]
    pub fn drop(&self, reason: DropReason) {
        bump(&self.drops[reason.index()], 1);
    }

    /// Counts `n` frames dropped for `reason`.
    #[inline]
    pub fn drops_n(&self, reason: DropReason, n: u64) {
        bump(&self.drops[reason.index()], n);
    }

    /// Drops counted for `reason`.
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()].load(Ordering::Relaxed)
    }

    /// A consistent-enough copy for rendering.
    pub fn snapshot(&self) -> QueueSnapshot {
        QueueSnapshot {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            notifications_sent: self.notifications_sent.load(Ordering::Relaxed),
            notifications_received: self.notifications_received.load(Ordering::Relaxed),
            notifications_suppressed: self.notifications_suppressed.load(Ordering::Relaxed),
            notifications_coalesced: self.notifications_coalesced.load(Ordering::Relaxed),
            sw_checksums: self.sw_checksums.load(Ordering::Relaxed),
            sw_segmented: self.sw_segmented.load(Ordering::Relaxed),
            lro_merged: self.lro_merged.load(Ordering::Relaxed),
            egress_waits: self.egress_waits.load(Ordering::Relaxed),
            mac_kept: self.mac_kept.load(Ordering::Relaxed),
            mac_flaps: self.mac_flaps.load(Ordering::Relaxed),
            held_frames: self.held_frames.load(Ordering::Relaxed),
            held_dest_full: self.held_dest_full.load(Ordering::Relaxed),
            drops: DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), self.drops(*r)))
                .collect(),
        }
    }
}

/// Frames and bytes of one queue.
#[derive(Debug, Default)]
pub struct Count {
    /// Frames.
    pub packets: AtomicU64,
    /// Bytes of frames (virtio-net header excluded).
    pub bytes: AtomicU64,
}

impl Count {
    /// Counts one frame of `bytes` bytes.
    #[inline]
    pub fn frame(&self, bytes: usize) {
        bump(&self.packets, 1);
        bump(&self.bytes, bytes as u64);
    }
}

/// Counters of one queue pair of a multiqueue vNIC (directions are the
/// guest's, as for the port).
#[derive(Debug, Default)]
pub struct PairStats {
    /// Frames the guest sent on the pair's transmit queue.
    pub tx: Count,
    /// Frames delivered into the pair's receive queue.
    pub rx: Count,
    /// Frames dropped because the pair's receive queue had no buffers
    /// (counted in the port's `rx` `ring_full` drops too).
    pub rx_ring_full: AtomicU64,
}

/// Counters of one port.
#[derive(Debug, Default)]
pub struct PortStats {
    /// Frames the frontend sent (its transmit queue).
    pub tx: QueueStats,
    /// Frames delivered to the frontend (its receive queue).
    pub rx: QueueStats,
    /// Times the port was reset after a protocol or ring error.
    pub resets: AtomicU64,
    /// Frontend connections accepted or established.
    pub connections: AtomicU64,
    /// A multiqueue vNIC's queue pairs (0 or 1: not multiqueue, no pair counters shown).
    pub queue_pairs: AtomicU64,
    /// Per queue pair counters of a multiqueue vNIC (the port's `tx` and
    /// `rx` count every pair's frames too).
    pairs: [PairStats; crate::vhost_user::device::MAX_QUEUE_PAIRS],
    /// How long frames delivered to the port stayed in the switch.
    pub dwell: crate::dwell::Dwell,
    /// When counting began (the port was added): rates since then.
    born: Born,
}

/// The instant a port's counters began.
#[derive(Debug)]
struct Born(Instant);

impl Default for Born {
    fn default() -> Self {
        Born(Instant::now())
    }
}

impl PortStats {
    /// The counters of queue pair `k` (of a multiqueue vNIC).
    #[inline]
    pub fn pair(&self, k: usize) -> &PairStats {
        &self.pairs[k.min(self.pairs.len() - 1)]
    }

    /// A vhost-user port's receive queues and the frames each dropped
    /// for want of buffers: one queue per pair; none for other ports.
    fn rx_queues(&self) -> Vec<RxQueueSnapshot> {
        match self.queue_pairs.load(Ordering::Relaxed) as usize {
            0 => Vec::new(),
            1 => vec![RxQueueSnapshot {
                queue: 0,
                ring_full: self.rx.drops(DropReason::RingFull),
            }],
            n => self.pairs[..n.min(self.pairs.len())]
                .iter()
                .enumerate()
                .map(|(queue, p)| RxQueueSnapshot {
                    queue,
                    ring_full: p.rx_ring_full.load(Ordering::Relaxed),
                })
                .collect(),
        }
    }

    /// A copy for rendering.
    pub fn snapshot(&self) -> PortStatsSnapshot {
        PortStatsSnapshot {
            age_ns: self.born.0.elapsed().as_nanos() as u64,
            rx_queues: self.rx_queues(),
            tx: self.tx.snapshot(),
            rx: self.rx.snapshot(),
            resets: self.resets.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            uplink_queues: Vec::new(),
            vteps: Vec::new(),
            time_in_switch: {
                let c = self.dwell.snapshot();
                (c.frames() > 0).then(|| c.summary(crate::sys::tsc::calibrated_rate()))
            },
            queue_pairs: match self.queue_pairs.load(Ordering::Relaxed) as usize {
                0 | 1 => Vec::new(),
                n => self.pairs[..n.min(self.pairs.len())]
                    .iter()
                    .enumerate()
                    .map(|(k, p)| QueuePairSnapshot {
                        queue: k,
                        tx_packets: p.tx.packets.load(Ordering::Relaxed),
                        tx_bytes: p.tx.bytes.load(Ordering::Relaxed),
                        rx_packets: p.rx.packets.load(Ordering::Relaxed),
                        rx_bytes: p.rx.bytes.load(Ordering::Relaxed),
                    })
                    .collect(),
            },
        }
    }
}

/// Rendered counters of one queue direction.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Frames.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
    /// Call eventfd writes.
    pub notifications_sent: u64,
    /// Kicks handled.
    pub notifications_received: u64,
    /// Calls the frontend did not want (its own suppression).
    #[serde(default)]
    pub notifications_suppressed: u64,
    /// Calls held back by coalescing.
    #[serde(default)]
    pub notifications_coalesced: u64,
    /// Checksums completed in software.
    #[serde(default)]
    pub sw_checksums: u64,
    /// GSO frames segmented in software.
    #[serde(default)]
    pub sw_segmented: u64,
    /// Segments LRO merged into an earlier one's frame.
    #[serde(default)]
    pub lro_merged: u64,
    /// Holds by an uplink's egress scheduler (once per round a frame waits).
    #[serde(default)]
    pub egress_waits: u64,
    /// Frames whose source address stayed with the port that holds it.
    #[serde(default)]
    pub mac_kept: u64,
    /// Addresses this port took that went back to their previous holder.
    #[serde(default)]
    pub mac_flaps: u64,
    /// Frames left in the guest's transmit ring by holds (once per round).
    #[serde(default)]
    pub held_frames: u64,
    /// Holds whose destination's ring was full.
    #[serde(default)]
    pub held_dest_full: u64,
    /// Drops by reason name.
    pub drops: std::collections::BTreeMap<String, u64>,
}

/// Rendered counters of one port.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct PortStatsSnapshot {
    /// Frontend transmit direction.
    pub tx: QueueSnapshot,
    /// Frontend receive direction.
    pub rx: QueueSnapshot,
    /// Port resets.
    pub resets: u64,
    /// Connections.
    pub connections: u64,
    /// Nanoseconds since the port's counters began (it was added): the
    /// span of rates since then.
    #[serde(default)]
    pub age_ns: u64,
    /// A vhost-user port's receive queues (one per queue pair), each with
    /// the frames it dropped because it had no buffers (empty for other ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rx_queues: Vec<RxQueueSnapshot>,
    /// An uplink's receive queues (empty for other ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uplink_queues: Vec<UplinkQueueSnapshot>,
    /// A VXLAN port's remote VTEPs (empty for other ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vteps: Vec<crate::port::vxlan::VtepSnapshot>,
    /// A multiqueue vNIC's queue pairs (empty for other ports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_pairs: Vec<QueuePairSnapshot>,
    /// How long frames delivered to the port stayed in the switch, since
    /// it was added ([`crate::dwell`]); none before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_in_switch: Option<crate::dwell::DwellSummary>,
}

/// One receive queue of a vhost-user port.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RxQueueSnapshot {
    /// Its queue pair (the vring is 2 * queue).
    pub queue: usize,
    /// Frames dropped because the queue had no (or not enough) buffers,
    /// or did not run.
    pub ring_full: u64,
}

/// Counters of one queue pair of a multiqueue vNIC.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct QueuePairSnapshot {
    /// Pair number (its queues are 2k and 2k+1).
    pub queue: usize,
    /// Frames the guest sent on the pair.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames delivered into the pair.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
}

/// Counters of one uplink receive queue.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct UplinkQueueSnapshot {
    /// Queue number (0: the shared queue).
    pub queue: usize,
    /// The vNIC that owns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The owner's identity (to name an owner served by another worker).
    #[serde(skip)]
    pub owner_id: Option<crate::PortId>,
    /// The destination MAC it takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Frames taken from it.
    pub packets: u64,
    /// Bytes taken from it.
    pub bytes: u64,
    /// Frames the kernel dropped because its ring was full.
    pub kernel_drops: u64,
    /// Lent to the worker of its owner (a latency-high vNIC): the counters
    /// above stopped when it left; it goes on as port `<uplink>:q<queue>`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lent: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        let s = PortStats::default();
        s.tx.frame(60);
        s.tx.frame(100);
        s.rx.drop(DropReason::RingFull);
        s.tx.drop(DropReason::Spoof);
        let snap = s.snapshot();
        assert_eq!(snap.tx.packets, 2);
        assert_eq!(snap.tx.bytes, 160);
        assert_eq!(snap.rx.drops["ring_full"], 1);
        assert_eq!(snap.tx.drops["spoof"], 1);
        let text = prometheus(&[("vm1".into(), snap)]);
        assert!(text.contains("vnio_switch_packets_total{port=\"vm1\",direction=\"tx\"} 2\n"));
        assert!(text.contains(
            "vnio_switch_drops_total{port=\"vm1\",direction=\"rx\",reason=\"ring_full\"} 1\n"
        ));
        assert!(text.contains("# TYPE vnio_switch_bytes_total counter\n"));
        assert!(
            !text.contains("vnio_switch_rx_ring_full_total{"),
            "no receive queues on a port that is not vhost-user"
        );
        let mut vx = s.snapshot();
        vx.vteps.push(crate::port::vxlan::VtepSnapshot {
            remote: "192.0.2.2".into(),
            packets_in: 3,
            bytes_in: 300,
            packets_out: 4,
            bytes_out: 400,
        });
        let mq = PortStats::default();
        mq.queue_pairs.store(2, Ordering::Relaxed);
        mq.pair(1).rx.frame(100);
        mq.pair(0).tx.frame(60);
        let snap = mq.snapshot();
        assert_eq!(snap.queue_pairs.len(), 2);
        assert_eq!(
            (snap.queue_pairs[1].rx_packets, snap.queue_pairs[1].rx_bytes),
            (1, 100)
        );
        mq.pair(1).rx_ring_full.store(3, Ordering::Relaxed);
        mq.tx.held_frames.store(9, Ordering::Relaxed);
        let snap = mq.snapshot();
        assert_eq!(snap.rx_queues.len(), 2);
        assert_eq!(
            (snap.rx_queues[0].ring_full, snap.rx_queues[1].ring_full),
            (0, 3)
        );
        let text = prometheus(&[("mq".into(), snap)]);
        assert!(text.contains("vnio_switch_rx_ring_full_total{port=\"mq\",queue=\"1\"} 3\n"));
        assert!(text.contains("vnio_switch_rx_ring_full_total{port=\"mq\",queue=\"0\"} 0\n"));
        assert!(text.contains("vnio_switch_held_frames_total{port=\"mq\"} 9\n"));
        assert!(text.contains(
            "vnio_switch_queue_packets_total{port=\"mq\",queue=\"1\",direction=\"rx\"} 1\n"
        ));
        assert!(text.contains(
            "vnio_switch_queue_bytes_total{port=\"mq\",queue=\"0\",direction=\"tx\"} 60\n"
        ));
        assert!(
            s.snapshot().queue_pairs.is_empty(),
            "a single-queue port shows no pairs"
        );
        let text = prometheus(&[("vx".into(), vx)]);
        assert!(text.contains(
            "vnio_switch_vtep_packets_total{port=\"vx\",remote=\"192.0.2.2\",direction=\"out\"} 4\n"
        ));
        assert!(text.contains(
            "vnio_switch_vtep_bytes_total{port=\"vx\",remote=\"192.0.2.2\",direction=\"in\"} 300\n"
        ));
    }

    #[test]
    fn every_reason_has_a_distinct_counter() {
        let q = QueueStats::default();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            for _ in 0..=i {
                q.drop(*r);
            }
        }
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(q.drops(*r), i as u64 + 1, "{}", r.name());
        }
    }
}
