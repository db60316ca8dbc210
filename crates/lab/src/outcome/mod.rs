//! What a run measured, point by point: how each point ended, its
//! result document and the contention achieved around it; and what each
//! configuration was built as (`outcome/testbed.rs`). Data written by the runner
//! and read back from the store by judging and the reports, so it sits
//! below all of them.

use serde::{Deserialize, Serialize};
use vnio_measure::result::Document;

use crate::scenario::Point;

mod testbed;
pub use testbed::{BedDescription, GuestDescription, HostDescription, MachineDescription};

/// How a point ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    Ok,
    /// Measured in part: the run was stopped during it.
    Interrupted,
    /// Not measured: setup or the workload failed.
    Failed,
    /// Not measured: this build cannot (the reason is in `error`).
    Skipped,
}

impl Status {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Interrupted => "interrupted",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// Everything known about one point after it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointOutcome {
    /// The point as planned.
    pub point: Point,
    /// How it ended.
    pub status: Status,
    /// Why it failed or was skipped, or errors during measurement.
    pub error: Option<String>,
    /// The measurement engine's result (`vnio.result/2`).
    pub document: Option<Document>,
    /// What the contention achieved.
    pub contention: Option<ContentionReport>,
}

/// What the contention achieved during one point.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ContentionReport {
    /// Background loads.
    pub loads: Option<LoadsOutcome>,
    /// Neighbour flood.
    pub flood: Option<FloodOutcome>,
    /// Anything that went wrong with the generators (the point still counts:
    /// the achieved figures say how much contention there really was).
    pub errors: Vec<String>,
}

/// Background loads, asked and achieved.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadsOutcome {
    /// Load servers.
    pub count: u32,
    /// Requests per second asked for, all servers.
    pub requested_rate: f64,
    /// Requests per second answered, all servers.
    pub achieved_rate: f64,
    /// CPU the servers used, in % of one core (all servers).
    pub cpu_pct: f64,
}

/// Neighbour flood, asked and achieved.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FloodOutcome {
    /// Packets per second asked for.
    pub requested_pps: f64,
    /// Packets per second sent.
    pub sent_pps: f64,
    /// Packets per second the neighbour received.
    pub received_pps: f64,
    /// Payload bytes per packet.
    pub size: u32,
}

/// Documents of one point's repetitions as one: every iteration
/// (renumbered), every error, the median chosen again. None when empty.
pub fn merge_documents(docs: Vec<Document>) -> Option<Document> {
    let mut docs = docs.into_iter();
    let mut doc = docs.next()?;
    for d in docs {
        doc.iterations.extend(d.iterations);
        doc.errors.extend(d.errors);
        doc.interrupted |= d.interrupted;
    }
    for (i, it) in doc.iterations.iter_mut().enumerate() {
        it.index = i;
    }
    doc.conclude();
    Some(doc)
}
