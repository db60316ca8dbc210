//! What vnio's switch did in each second of a measured window, from its
//! workers' own counters (the lab reads them beside rate workloads on
//! vnio's switch): whether the switch bounds the rate (its workers busy
//! nearly all the time) or its endpoints do (the workers idle between
//! their frames).

use serde::{Deserialize, Serialize};

/// One second of the switch's workers, summed over those that forwarded
/// frames in it (a worker without frames in that second, such as a shared
/// one asleep in epoll, has nothing to do with the rate; when none did,
/// over all of them).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SwitchSecond {
    /// Cycles in polling rounds that moved frames over all cycles: near 1,
    /// the switch's own time per frame sets the rate; well below, it
    /// waited for frames.
    pub busy: f64,
    /// Frames forwarded or dropped.
    pub frames: u64,
    /// Frames per polling round that moved frames; none without such a round.
    pub frames_per_busy_round: Option<f64>,
    /// Busy nanoseconds per frame; none without frames.
    pub busy_ns_per_frame: Option<f64>,
}
