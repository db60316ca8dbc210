//! Workloads between two poll-mode endpoints (see [`crate::pair`]): which
//! ones one thread driving both endpoints can run.

use super::model::{Protocol, WorkloadKind, WorkloadSpec};

/// The largest payload whose frame fits a 1500-byte MTU port (1518 B):
/// what a poll-mode endpoint sends at most.
pub const MAX_PAYLOAD: u32 = 1476;

/// Why a workload between two poll-mode endpoints cannot run (None: it
/// can): one thread drives both (see [`crate::pair`]).
pub(super) fn skip_reason(w: &WorkloadSpec) -> Option<String> {
    let why = |what: &str| {
        Some(format!(
            "`{}` and `{}` are poll-mode endpoints driven by one thread: {what}",
            w.from,
            w.to.join(", ")
        ))
    };
    let tcp_stream = w.kind == WorkloadKind::Stream && w.protocol != Some(Protocol::Udp);
    if (w.protocol != Some(Protocol::Udp) && !tcp_stream) || w.kind == WorkloadKind::Ping {
        return why("UDP rr, UDP stream and TCP stream only");
    }
    if w.to.len() != 1 || w.sessions.unwrap_or(1) != 1 {
        return why("one session to one target");
    }
    match w.kind {
        WorkloadKind::Rr if w.burst.unwrap_or(1) != 1 || w.rate.is_some() => {
            why("one request in flight, closed loop (no burst, no rate)")
        }
        WorkloadKind::Stream if w.rate.is_some() || w.reverse == Some(true) => {
            why("as fast as the switch forwards, one way (no rate, no reverse)")
        }
        WorkloadKind::Stream if tcp_stream && w.size.is_some() => {
            why("TCP streams of 1448-byte segments (no size)")
        }
        WorkloadKind::Stream if !tcp_stream && w.size.is_some_and(|s| s > MAX_PAYLOAD) => {
            why(&format!(
                "frames up to 1518 B (size at most {} B of payload)",
                MAX_PAYLOAD
            ))
        }
        _ => None,
    }
}
