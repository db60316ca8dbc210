//! `vnio-tune`: audit, explain, apply and revert the knobs that decide the
//! latency of a Linux/KVM host or guest, and measure their effect.
//!
//! The parts:
//! - [`host`]: every read and write of the machine, under a root-dir override
//!   so tests run on fake `/proc` and `/sys` trees;
//! - [`sys`]: the only module with `unsafe` (ethtool ioctl, clocks, cpuid);
//! - [`knob`] and [`knobs`]: the catalogue, one entry per knob, all of one shape;
//! - [`mod@audit`]: reads the catalogue against a profile into findings;
//! - [`journal`] and [`apply`]: journaled changes and their exact revert;
//! - [`pmqos`]: holding a PM QoS CPU latency request;
//! - [`measure`]: probes that turn a profile's effect into numbers.
//!
//! Nothing here prints: the CLI renders the values returned.

#![deny(unsafe_code)]

pub mod apply;
pub mod audit;
pub mod error;
pub mod host;
pub mod journal;
pub mod knob;
pub mod knobs;
pub mod measure;
pub mod pmqos;
pub mod stats;
pub mod sys;

pub use audit::{audit, Audit, Finding, Status};
pub use error::TuneError;
pub use host::Host;
pub use knob::{ApplyKind, Knob, Layer, Profile};
