//! What the worker tells the control plane about a port: its kind, state,
//! policies, counters and, for an uplink, each receive queue with its
//! owner. Separate from the worker's loop: read-only views, built on
//! request.

use super::spread;
use super::{EgressInfo, PolicyInfo, PortInfo, VirtqueueInfo, Worker};
use crate::config::Latency;
use crate::datapath::{Port, Slot};
use crate::stats::{PortStatsSnapshot, UplinkQueueSnapshot};
use crate::vhost_user::device::feature;
use crate::PortId;

impl Worker {
    /// An uplink's receive queues with their owners and counters.
    fn uplink_queues(&mut self, slot: usize) -> Vec<UplinkQueueSnapshot> {
        let names: Vec<(PortId, String)> = self
            .dp
            .table()
            .slots()
            .map(|(_, s)| (s.id, s.name.clone()))
            .collect();
        let Some(Slot {
            port: Port::Uplink(u),
            ..
        }) = self.dp.table_mut().slot_mut(slot)
        else {
            return Vec::new();
        };
        // A lent queue's holder names it by its number on the uplink.
        let held = u.lent();
        (0..u.queue_count())
            .map(|q| {
                let owner = u.table().owner(q);
                let lent = u.lent_out(q);
                let (packets, bytes, kernel_drops) = match (u.queue_mut(q), lent) {
                    (Some(rx), _) => (rx.packets, rx.bytes, rx.kernel_drops()),
                    (None, Some((p, b))) => (p, b, 0),
                    (None, None) => (0, 0, 0),
                };
                UplinkQueueSnapshot {
                    queue: held.unwrap_or(q),
                    owner: owner.and_then(|(id, _)| {
                        names.iter().find(|(i, _)| *i == id).map(|(_, n)| n.clone())
                    }),
                    owner_id: owner.map(|(id, _)| id),
                    mac: owner.and_then(|(_, m)| m).map(|m| m.to_string()),
                    packets,
                    bytes,
                    kernel_drops,
                    lent: lent.is_some(),
                }
            })
            .collect()
    }

    pub(super) fn info(&mut self, slot: usize) -> Option<PortInfo> {
        let queues = self.uplink_queues(slot);
        let s = self.dp.table().slot(slot)?;
        let d = s.port.describe();
        let pairs = spread::pairs_info(&s.port);
        // Read from the acknowledged features once the queues run: they
        // were started with this layout.
        let virtqueue = match &s.port {
            Port::VhostUser(p) if d.running => {
                let acked = p.device.acked_features();
                Some(VirtqueueInfo {
                    packed: p.device.packed(),
                    in_order: acked & feature::IN_ORDER != 0,
                })
            }
            _ => None,
        };
        Some(PortInfo {
            name: s.name.clone(),
            id: s.id.0,
            kind: d.kind.into(),
            socket: Some(d.at),
            mode: d.mode,
            connected: d.connected,
            running: d.running,
            queues: pairs,
            virtqueue,
            vlan: format!("{:?}", s.policy.vlan),
            policy: PolicyInfo {
                coalesce: s.policies.effective_coalesce(),
                lro: s.policies.effective_lro(),
                latency: s.policies.latency,
                core: self
                    .dedicated
                    .filter(|_| s.policies.latency == Latency::High),
                tx_poll_budget: s.policies.effective_tx_poll_budget(),
            },
            egress: match s.port.sched().filter(|_| d.wire) {
                Some(sched) => EgressInfo {
                    capacity_mbps: sched.capacity_bps().map(|b| b / 1_000_000),
                    contended: Some(sched.contended()),
                    ..Default::default()
                },
                None => EgressInfo {
                    settings: s.policy.egress.into(),
                    ..Default::default()
                },
            },
            stats: PortStatsSnapshot {
                uplink_queues: queues,
                vteps: s.port.vteps(),
                ..spread::snapshot(s)
            },
        })
    }
}
