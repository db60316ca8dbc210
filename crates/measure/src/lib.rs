//! vnio's measurement engine: the agent, the workloads (request-response,
//! ping, stream), statistics, CPU accounting and the result document.
//!
//! Nothing here prints: the CLI renders what these functions return.

pub mod agent;
pub mod arrivals;
pub mod budget;
pub mod checks;
pub mod client;
pub mod clock;
pub mod cookie;
pub mod cpu;
pub mod env;
pub mod goal;
pub mod interval;
pub mod moments;
pub mod pace;
pub mod path;
pub mod pin;
pub mod ping;
pub mod placement;
pub mod proto;
pub mod result;
pub mod rr;
pub mod run;
pub mod session;
pub mod stats;
pub mod stream;
pub mod switch_seconds;
mod sys;
