//! Ports' counters in the Prometheus text exposition format.

use super::{PortStatsSnapshot, QueuePairSnapshot, QueueSnapshot, UplinkQueueSnapshot};
use std::fmt::Write as _;

/// Renders ports' counters in the Prometheus text exposition format.
pub fn prometheus(ports: &[(String, PortStatsSnapshot)]) -> String {
    let mut out = String::new();
    let mut family =
        |name: &str, help: &str, kind: &str, rows: &mut dyn Iterator<Item = (String, u64)>| {
            let _ = writeln!(out, "# HELP vnio_switch_{name} {help}");
            let _ = writeln!(out, "# TYPE vnio_switch_{name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(out, "vnio_switch_{name}{{{labels}}} {v}");
            }
        };
    let dirs = |f: fn(&QueueSnapshot) -> u64| {
        ports
            .iter()
            .flat_map(move |(p, s)| {
                [("tx", &s.tx), ("rx", &s.rx)]
                    .into_iter()
                    .map(move |(d, q)| (format!("port=\"{p}\",direction=\"{d}\""), f(q)))
            })
            .collect::<Vec<_>>()
    };
    family(
        "packets_total",
        "Frames through the port, by the frontend's direction.",
        "counter",
        &mut dirs(|q| q.packets).into_iter(),
    );
    family(
        "bytes_total",
        "Bytes through the port, by the frontend's direction.",
        "counter",
        &mut dirs(|q| q.bytes).into_iter(),
    );
    family(
        "notifications_sent_total",
        "Call eventfd writes to the frontend.",
        "counter",
        &mut dirs(|q| q.notifications_sent).into_iter(),
    );
    family(
        "notifications_received_total",
        "Kicks from the frontend.",
        "counter",
        &mut dirs(|q| q.notifications_received).into_iter(),
    );
    family(
        "notifications_suppressed_total",
        "Calls the frontend did not want (EVENT_IDX or VRING_AVAIL_F_NO_INTERRUPT).",
        "counter",
        &mut dirs(|q| q.notifications_suppressed).into_iter(),
    );
    family(
        "notifications_coalesced_total",
        "Calls held back by the port's coalescing policy.",
        "counter",
        &mut dirs(|q| q.notifications_coalesced).into_iter(),
    );
    family(
        "sw_checksums_total",
        "Checksums the switch completed in software for a destination without checksum offload.",
        "counter",
        &mut dirs(|q| q.sw_checksums).into_iter(),
    );
    family(
        "lro_merged_total",
        "TCP segments LRO merged into a frame toward the port (deliveries saved).",
        "counter",
        &mut dirs(|q| q.lro_merged).into_iter(),
    );
    family(
        "egress_waits_total",
        "Rounds in which an uplink's egress scheduler held the port's next frame in the guest's ring.",
        "counter",
        &mut dirs(|q| q.egress_waits).into_iter(),
    );
    family(
        "mac_kept_total",
        "Frames whose source address another port holds and is still sending from: not moved (FDB rule for moves).",
        "counter",
        &mut dirs(|q| q.mac_kept).into_iter(),
    );
    family(
        "mac_flaps_total",
        "Addresses the port took that their previous holder claimed back: held there.",
        "counter",
        &mut dirs(|q| q.mac_flaps).into_iter(),
    );
    family(
        "sw_segmented_total",
        "GSO frames the switch segmented in software for a destination without TSO.",
        "counter",
        &mut dirs(|q| q.sw_segmented).into_iter(),
    );
    let drops: Vec<(String, u64)> = ports
        .iter()
        .flat_map(|(p, s)| {
            [("tx", &s.tx), ("rx", &s.rx)]
                .into_iter()
                .flat_map(move |(d, q)| {
                    q.drops.iter().map(move |(r, v)| {
                        (format!("port=\"{p}\",direction=\"{d}\",reason=\"{r}\""), *v)
                    })
                })
        })
        .collect();
    family(
        "drops_total",
        "Frames dropped, by reason.",
        "counter",
        &mut drops.into_iter(),
    );
    let uq = |f: fn(&UplinkQueueSnapshot) -> u64| {
        ports
            .iter()
            .flat_map(move |(p, s)| {
                s.uplink_queues.iter().map(move |q| {
                    let owner = q.owner.as_deref().unwrap_or("");
                    (
                        format!("port=\"{p}\",queue=\"{}\",owner=\"{owner}\"", q.queue),
                        f(q),
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "uplink_queue_packets_total",
        "Frames taken from an uplink receive queue.",
        "counter",
        &mut uq(|q| q.packets).into_iter(),
    );
    family(
        "uplink_queue_bytes_total",
        "Bytes taken from an uplink receive queue.",
        "counter",
        &mut uq(|q| q.bytes).into_iter(),
    );
    family(
        "uplink_queue_kernel_drops_total",
        "Frames the kernel dropped because an uplink receive queue was full.",
        "counter",
        &mut uq(|q| q.kernel_drops).into_iter(),
    );
    let qp = |f: fn(&QueuePairSnapshot) -> (u64, u64)| {
        ports
            .iter()
            .flat_map(move |(p, s)| {
                s.queue_pairs.iter().flat_map(move |q| {
                    let (tx, rx) = f(q);
                    [("tx", tx), ("rx", rx)].map(|(d, n)| {
                        (
                            format!("port=\"{p}\",queue=\"{}\",direction=\"{d}\"", q.queue),
                            n,
                        )
                    })
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "queue_packets_total",
        "Frames through one queue pair of a multiqueue vNIC, by the guest's direction.",
        "counter",
        &mut qp(|q| (q.tx_packets, q.rx_packets)).into_iter(),
    );
    family(
        "queue_bytes_total",
        "Bytes through one queue pair of a multiqueue vNIC, by the guest's direction.",
        "counter",
        &mut qp(|q| (q.tx_bytes, q.rx_bytes)).into_iter(),
    );
    let vt = |f: fn(&crate::port::vxlan::VtepSnapshot) -> (u64, u64)| {
        ports
            .iter()
            .flat_map(move |(p, s)| {
                s.vteps.iter().flat_map(move |v| {
                    let (i, o) = f(v);
                    [("in", i), ("out", o)].map(|(d, n)| {
                        (
                            format!("port=\"{p}\",remote=\"{}\",direction=\"{d}\"", v.remote),
                            n,
                        )
                    })
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "vtep_packets_total",
        "VXLAN datagrams from (in) and to (out) a remote VTEP.",
        "counter",
        &mut vt(|v| (v.packets_in, v.packets_out)).into_iter(),
    );
    family(
        "vtep_bytes_total",
        "Inner frame bytes from (in) and to (out) a remote VTEP.",
        "counter",
        &mut vt(|v| (v.bytes_in, v.bytes_out)).into_iter(),
    );
    let resets: Vec<(String, u64)> = ports
        .iter()
        .map(|(p, s)| (format!("port=\"{p}\""), s.resets))
        .collect();
    family(
        "port_resets_total",
        "Port resets after protocol or ring errors.",
        "counter",
        &mut resets.into_iter(),
    );
    out
}
