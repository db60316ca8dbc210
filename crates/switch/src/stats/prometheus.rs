//! Ports' counters in the Prometheus text exposition format.

use super::{PortStatsSnapshot, QueuePairSnapshot, QueueSnapshot, UplinkQueueSnapshot};
use std::fmt::Write as _;

/// Renders ports' counters in the Prometheus text exposition format.
pub fn prometheus(ports: &[(String, PortStatsSnapshot)]) -> String {
    let mut out = String::new();
    for (name, help, f) in DIRECTION_FAMILIES {
        family(&mut out, name, help, by_direction(ports, *f));
    }
    family(
        &mut out,
        "drops_total",
        "Frames dropped, by reason.",
        drops(ports),
    );
    pressure_families(&mut out, ports);
    uplink_queue_families(&mut out, ports);
    queue_pair_families(&mut out, ports);
    vtep_families(&mut out, ports);
    time_in_switch(&mut out, ports);
    let resets = ports
        .iter()
        .map(|(p, s)| (format!("port=\"{p}\""), s.resets));
    family(
        &mut out,
        "port_resets_total",
        "Port resets after protocol or ring errors.",
        resets,
    );
    out
}

/// A counter family in each direction of a port: name, help, the counter.
type DirectionFamily = (&'static str, &'static str, fn(&QueueSnapshot) -> u64);

/// The per-direction counter families, in the order they are rendered.
const DIRECTION_FAMILIES: &[DirectionFamily] = &[
    (
        "packets_total",
        "Frames through the port, by the frontend's direction.",
        |q| q.packets,
    ),
    (
        "bytes_total",
        "Bytes through the port, by the frontend's direction.",
        |q| q.bytes,
    ),
    (
        "notifications_sent_total",
        "Call eventfd writes to the frontend.",
        |q| q.notifications_sent,
    ),
    (
        "notifications_received_total",
        "Kicks from the frontend.",
        |q| q.notifications_received,
    ),
    (
        "notifications_suppressed_total",
        "Calls the frontend did not want (EVENT_IDX or VRING_AVAIL_F_NO_INTERRUPT).",
        |q| q.notifications_suppressed,
    ),
    (
        "notifications_coalesced_total",
        "Calls held back by the port's coalescing policy.",
        |q| q.notifications_coalesced,
    ),
    (
        "sw_checksums_total",
        "Checksums the switch completed in software for a destination without checksum offload.",
        |q| q.sw_checksums,
    ),
    (
        "lro_merged_total",
        "TCP segments LRO merged into a frame toward the port (deliveries saved).",
        |q| q.lro_merged,
    ),
    (
        "egress_waits_total",
        "Rounds in which an uplink's egress scheduler held the port's next frame in the guest's ring.",
        |q| q.egress_waits,
    ),
    (
        "mac_kept_total",
        "Frames whose source address another port holds and is still sending from: not moved (FDB rule for moves).",
        |q| q.mac_kept,
    ),
    (
        "mac_flaps_total",
        "Addresses the port took that their previous holder claimed back: held there.",
        |q| q.mac_flaps,
    ),
    (
        "sw_segmented_total",
        "GSO frames the switch segmented in software for a destination without TSO.",
        |q| q.sw_segmented,
    ),
];

/// Writes one counter family `vnio_switch_NAME` of ports' counters.
fn family(out: &mut String, name: &str, help: &str, rows: impl IntoIterator<Item = (String, u64)>) {
    write_family(out, &format!("vnio_switch_{name}"), help, "counter", rows);
}

/// Writes one metric family of the switch's: its help and type lines,
/// then a line per row (its labels, without braces, and its value). The
/// one writer of the ports' and the workers' families.
pub(crate) fn write_family<V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    rows: impl IntoIterator<Item = (String, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

/// How long frames delivered to each port stayed in the switch
/// ([`crate::dwell`]), a histogram in seconds.
fn time_in_switch(out: &mut String, ports: &[(String, PortStatsSnapshot)]) {
    let name = "vnio_switch_time_in_switch_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time frames delivered to the port stayed in the switch: from the polling round that took them to the publication of their used entries."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (p, t) in ports
        .iter()
        .filter_map(|(p, s)| Some((p, s.time_in_switch.as_ref()?)))
    {
        for (le, n) in crate::dwell::LE_NS.iter().zip(&t.le) {
            let _ = writeln!(
                out,
                "{name}_bucket{{port=\"{p}\",le=\"{}\"}} {n}",
                *le as f64 / 1e9
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{port=\"{p}\",le=\"+Inf\"}} {}",
            t.frames
        );
        let _ = writeln!(out, "{name}_sum{{port=\"{p}\"}} {}", t.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{port=\"{p}\"}} {}", t.frames);
    }
}

/// One row per port and direction (the frontend's: tx, then rx).
fn by_direction(
    ports: &[(String, PortStatsSnapshot)],
    f: fn(&QueueSnapshot) -> u64,
) -> Vec<(String, u64)> {
    ports
        .iter()
        .flat_map(move |(p, s)| {
            [("tx", &s.tx), ("rx", &s.rx)]
                .into_iter()
                .map(move |(d, q)| (format!("port=\"{p}\",direction=\"{d}\""), f(q)))
        })
        .collect()
}

/// One row per port, direction and drop reason.
fn drops(ports: &[(String, PortStatsSnapshot)]) -> Vec<(String, u64)> {
    ports
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
        .collect()
}

/// Drops and waits where they happen: each vhost-user receive queue's
/// drops for want of buffers, and each source's frames held back.
fn pressure_families(out: &mut String, ports: &[(String, PortStatsSnapshot)]) {
    let queues = ports.iter().flat_map(|(p, s)| {
        s.rx_queues
            .iter()
            .map(move |q| (format!("port=\"{p}\",queue=\"{}\"", q.queue), q.ring_full))
    });
    family(
        out,
        "rx_ring_full_total",
        "Frames dropped because a vhost-user receive queue (by queue pair) had no buffers.",
        queues,
    );
    let per_port = |f: fn(&QueueSnapshot) -> u64| {
        ports
            .iter()
            .map(move |(p, s)| (format!("port=\"{p}\""), f(&s.tx)))
    };
    family(
        out,
        "held_frames_total",
        "Frames left in the port's transmit ring because a destination could not take them (once per round).",
        per_port(|q| q.held_frames),
    );
    family(
        out,
        "held_dest_full_total",
        "Rounds the port was held back because a destination's own ring was full.",
        per_port(|q| q.held_dest_full),
    );
}

/// An uplink's receive queues, each with its owner.
fn uplink_queue_families(out: &mut String, ports: &[(String, PortStatsSnapshot)]) {
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
        out,
        "uplink_queue_packets_total",
        "Frames taken from an uplink receive queue.",
        uq(|q| q.packets),
    );
    family(
        out,
        "uplink_queue_bytes_total",
        "Bytes taken from an uplink receive queue.",
        uq(|q| q.bytes),
    );
    family(
        out,
        "uplink_queue_kernel_drops_total",
        "Frames the kernel dropped because an uplink receive queue was full.",
        uq(|q| q.kernel_drops),
    );
}

/// A multiqueue vNIC's queue pairs, by the guest's direction.
fn queue_pair_families(out: &mut String, ports: &[(String, PortStatsSnapshot)]) {
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
        out,
        "queue_packets_total",
        "Frames through one queue pair of a multiqueue vNIC, by the guest's direction.",
        qp(|q| (q.tx_packets, q.rx_packets)),
    );
    family(
        out,
        "queue_bytes_total",
        "Bytes through one queue pair of a multiqueue vNIC, by the guest's direction.",
        qp(|q| (q.tx_bytes, q.rx_bytes)),
    );
}

/// A VXLAN port's remote VTEPs, in and out.
fn vtep_families(out: &mut String, ports: &[(String, PortStatsSnapshot)]) {
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
        out,
        "vtep_packets_total",
        "VXLAN datagrams from (in) and to (out) a remote VTEP.",
        vt(|v| (v.packets_in, v.packets_out)),
    );
    family(
        out,
        "vtep_bytes_total",
        "Inner frame bytes from (in) and to (out) a remote VTEP.",
        vt(|v| (v.bytes_in, v.bytes_out)),
    );
}
