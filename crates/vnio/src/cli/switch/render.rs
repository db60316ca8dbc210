//! The tables `vnio switch` prints: ports, their counters and the
//! workers' time. Separate because they only format what the switch
//! returned, and they are most of the lines.

use std::collections::BTreeMap;

use vnio_switch::perf::{hold_bucket_label, PerfSnapshot};
use vnio_switch::port::SocketMode;
use vnio_switch::stats::pressure::PortPressure;
use vnio_switch::stats::PortStatsSnapshot;
use vnio_switch::worker::PortInfo;

/// "coalesce adaptive:4000, lro on, latency normal, tx-poll-budget 64".
pub(super) fn policy_text(p: &PortInfo) -> String {
    let core = p
        .policy
        .core
        .map(|c| format!(" (core {c})"))
        .unwrap_or_default();
    format!(
        "coalesce {}, lro {}, latency {}{core}, tx-poll-budget {}",
        p.policy.coalesce,
        if p.policy.lro { "on" } else { "off" },
        p.policy.latency,
        p.policy.tx_poll_budget
    )
}

pub(super) fn print_ports(ports: &[PortInfo]) {
    println!(
        "{:<12} {:>3}  {:<10} {:<6} {:<17} {:>10} {:>10} {:>7}  {:<16} {:<3} {:<7}  SOCKET",
        "NAME",
        "ID",
        "KIND",
        "MODE",
        "STATE",
        "TX-PKTS",
        "RX-PKTS",
        "DROPS",
        "COALESCE",
        "LRO",
        "LATENCY"
    );
    for p in ports {
        let mut state = match (p.running, p.connected, &p.queues) {
            // A multiqueue vNIC: pairs running of pairs offered, and the
            // worker serving each pair when they are spread over workers.
            (true, _, Some(q)) if !q.workers.is_empty() => format!(
                "running {}/{}q w{}",
                q.running,
                q.pairs,
                q.workers
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            (true, _, Some(q)) => format!("running {}/{}q", q.running, q.pairs),
            (true, _, None) => "running".into(),
            (false, true, _) => "connected".into(),
            (false, false, _) => "waiting".into(),
        };
        // Split rings are the usual case; packed ones are worth a word.
        if p.virtqueue.is_some_and(|v| v.packed) {
            state.push_str(" packed");
        }
        let drops: u64 = p
            .stats
            .tx
            .drops
            .values()
            .chain(p.stats.rx.drops.values())
            .sum();
        let mode = match p.mode {
            Some(SocketMode::Server) => "server",
            Some(SocketMode::Client) => "client",
            None => "-",
        };
        let latency = match p.policy.core {
            Some(c) => format!("{}@{c}", p.policy.latency),
            None => p.policy.latency.to_string(),
        };
        println!(
            "{:<12} {:>3}  {:<10} {:<6} {:<17} {:>10} {:>10} {:>7}  {:<16} {:<3} {:<7}  {}",
            p.name,
            p.id,
            p.kind,
            mode,
            state,
            p.stats.tx.packets,
            p.stats.rx.packets,
            drops,
            p.policy.coalesce.to_string(),
            if p.policy.lro { "on" } else { "off" },
            latency,
            p.socket.as_deref().unwrap_or("-")
        );
    }
}

pub(super) fn print_stats(m: &BTreeMap<String, PortStatsSnapshot>) {
    for (name, s) in m {
        println!(
            "port {name}  (resets {}, connections {})",
            s.resets, s.connections
        );
        for (dir, q) in [("tx (from frontend)", &s.tx), ("rx (to frontend)", &s.rx)] {
            let drops: Vec<String> = q
                .drops
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "  {dir:<19} packets {:>10}  bytes {:>12}  notify sent {:>8} coalesced {:>8} declined {:>8}  recv {:>8}  drops {}",
                q.packets,
                q.bytes,
                q.notifications_sent,
                q.notifications_coalesced,
                q.notifications_suppressed,
                q.notifications_received,
                if drops.is_empty() {
                    "0".to_string()
                } else {
                    drops.join(" ")
                }
            );
        }
        if let Some(t) = &s.time_in_switch {
            let us = |ns: u64| ns as f64 / 1e3;
            println!(
                "  time in switch      frames {:>10}  p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us",
                t.frames,
                us(t.p50_ns),
                us(t.p99_ns),
                us(t.p999_ns),
                us(t.max_ns)
            );
        }
        for q in &s.uplink_queues {
            println!(
                "  queue {:<3} {:<16} {:<17} packets {:>10}  bytes {:>12}  kernel drops {}",
                q.queue,
                q.owner
                    .as_deref()
                    .unwrap_or(if q.queue == 0 { "(shared)" } else { "(free)" }),
                q.mac.as_deref().unwrap_or("-"),
                q.packets,
                q.bytes,
                q.kernel_drops
            );
        }
        for q in &s.queue_pairs {
            println!(
                "  queue pair {:<2} tx packets {:>10} bytes {:>12}  rx packets {:>10} bytes {:>12}",
                q.queue, q.tx_packets, q.tx_bytes, q.rx_packets, q.rx_bytes
            );
        }
        if !s.rx_queues.is_empty() {
            let cells: Vec<String> = s
                .rx_queues
                .iter()
                .map(|q| format!("queue {} {}", q.queue, q.ring_full))
                .collect();
            println!("  rx ring full        {}", cells.join("  "));
        }
        if s.tx.egress_waits > 0 {
            println!(
                "  held back           rounds {:>8} (destination full {})  frames left in ring {}",
                s.tx.egress_waits, s.tx.held_dest_full, s.tx.held_frames
            );
        }
        for v in &s.vteps {
            println!(
                "  vtep {:<15} in packets {:>10} bytes {:>12}  out packets {:>10} bytes {:>12}",
                if v.remote == "0.0.0.0" {
                    "(others)"
                } else {
                    &v.remote
                },
                v.packets_in,
                v.bytes_in,
                v.packets_out,
                v.bytes_out
            );
        }
    }
}

/// One block per worker: shares of its time, cost per frame, then the
/// bursts and queue depths it saw as histograms (share of bursts).
pub(super) fn render_perf(workers: &[PerfSnapshot]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for w in workers {
        let f = w.figures();
        let core = w.core.map_or("shared".into(), |c| format!("core {c}"));
        let _ = writeln!(
            out,
            "worker {} ({core}) over {:.3} s: busy {:.1}%, idle polling {:.1}%, other {:.1}% (sleeping, commands)",
            w.worker,
            w.nanos as f64 / 1e9,
            100.0 * f.busy_share,
            100.0 * f.idle_poll_share,
            100.0 * f.other_share
        );
        let _ = writeln!(
            out,
            "  {} frames ({}% on the fast case), {:.3} Mpps; busy time per frame {} ns, {} cycles ({:.2} per ns); {} busy rounds ({}% read ahead), {} idle",
            w.frames,
            opt(f.fast_share.map(|s| 100.0 * s), 1),
            f.frames_per_sec / 1e6,
            opt(f.ns_per_frame, 1),
            opt(f.cycles_per_frame, 0),
            f.ticks_per_ns,
            w.busy_rounds,
            opt(f.read_ahead_share.map(|s| 100.0 * s), 1),
            w.idle_rounds
        );
        let bursts: u64 = w.bursts.iter().sum();
        if bursts > 0 {
            let groups = [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 32)];
            let cells: Vec<String> = groups
                .iter()
                .map(|&(a, b)| {
                    let k: u64 = w.bursts.iter().take(b + 1).skip(a).sum();
                    let label = if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    };
                    format!("{label}: {:.1}%", 100.0 * k as f64 / bursts as f64)
                })
                .collect();
            let _ = writeln!(
                out,
                "  transmit bursts ({bursts}, mean {} chains): {}",
                opt(f.mean_burst, 1),
                cells.join("  ")
            );
            let depths: Vec<String> = w
                .depth
                .iter()
                .enumerate()
                .filter(|(_, &k)| k > 0)
                .map(|(i, &k)| {
                    let label = match i {
                        0 => "0".to_string(),
                        i if i + 1 == w.depth.len() => format!("{}+", 1u32 << (i - 1)),
                        i => format!("{}-{}", 1u32 << (i - 1), (1u32 << i) - 1),
                    };
                    format!("{label}: {:.1}%", 100.0 * k as f64 / bursts as f64)
                })
                .collect();
            let _ = writeln!(out, "  queue depth when polled: {}", depths.join("  "));
        }
        render_holds(&mut out, w);
    }
    out
}

/// "holds (away from polling after a wake-up or event check): N, 1.2 ms in
/// all, longest 64-128 µs (since start 2.3 ms), 0 of 1 ms or more; 4
/// control commands in 4 of them, 0.2 ms on a CPU, 0 of them 1 ms or more".
fn render_holds(out: &mut String, w: &PerfSnapshot) {
    use std::fmt::Write as _;
    let Some(top) = w.longest_hold_bucket() else {
        return;
    };
    let _ = writeln!(
        out,
        "  holds (away from polling after a wake-up or event check): {}, {:.3} ms in all, longest {} (since start {:.1} µs), {} of 1 ms or more; {} control commands in {} of them, {:.3} ms on a CPU, {} of them 1 ms or more",
        w.hold_count(),
        w.hold_nanos as f64 / 1e6,
        hold_bucket_label(top),
        w.longest_hold_ns as f64 / 1e3,
        w.holds_over_1ms,
        w.commands,
        w.command_holds,
        w.command_cpu_nanos as f64 / 1e6,
        w.command_holds_over_1ms_cpu
    );
}

/// Drops and waits per port over the span: each receive queue's ring-full
/// drops, each source's frames held back; ports with neither in one line.
pub(super) fn render_pressure(ports: &[PortPressure]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let rate = |r: &vnio_switch::stats::pressure::Rate| format!("{} ({:.1}/s)", r.count, r.per_sec);
    let quiet: Vec<&str> = ports
        .iter()
        .filter(|p| !p.any())
        .map(|p| p.port.as_str())
        .collect();
    for p in ports.iter().filter(|p| p.any()) {
        let _ = writeln!(out, "port {} over {:.3} s:", p.port, p.span_ns as f64 / 1e9);
        if p.rx_ring_full.iter().any(|q| q.ring_full.count > 0) {
            let cells: Vec<String> = p
                .rx_ring_full
                .iter()
                .map(|q| format!("queue {} {}", q.queue, rate(&q.ring_full)))
                .collect();
            let _ = writeln!(out, "  rx ring full: {}", cells.join("  "));
        }
        if p.egress_waits.count > 0 {
            let _ = writeln!(
                out,
                "  held back: {} rounds ({} with the destination full), {} frames left in its transmit ring",
                rate(&p.egress_waits),
                p.held_dest_full.count,
                rate(&p.held_frames)
            );
        }
    }
    if !quiet.is_empty() {
        let _ = writeln!(
            out,
            "no ring-full drops or held frames: {}",
            quiet.join(", ")
        );
    }
    out
}
