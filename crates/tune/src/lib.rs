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
//!
//! ```
//! use vnio_tune::{audit, Host, Profile, Status};
//!
//! // A machine with nothing in /proc and /sys: everything is "not visible
//! // from here" or a fact, nothing differs, and nothing panics.
//! let root = std::env::temp_dir().join(format!("vnio-tune-doctest-{}", std::process::id()));
//! std::fs::create_dir_all(&root).expect("temp dir");
//! let a = audit(&Host::with_root(&root), Profile::Latency);
//! assert_eq!(a.exit_code(), 0);
//! assert!(a.findings.iter().all(|f| f.status != Status::Differs));
//! let governor = a.findings.iter().find(|f| f.id == "cpu.governor").expect("in the catalogue");
//! assert!(governor.current.starts_with("not visible from here: "));
//! # std::fs::remove_dir_all(&root).ok();
//! ```

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
