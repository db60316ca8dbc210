//! vnio lab: the studies' experiments as scenarios, built from real parts.
//!
//! A [`scenario`] file names hosts, the configurations compared side by
//! side, knobs, [`contention`], workloads and a sweep; [`runner`] builds
//! each configuration as a [`testbed`] (namespaces, veth, Linux bridge, the
//! vnio switch, poll-mode endpoints and QEMU guests through the vm crate),
//! runs the workloads with the measurement library, and tears it down;
//! [`store`] keeps every run in one SQLite file, [`findings`] judges the
//! studies' findings a scenario declares, and [`report`] renders it all;
//! [`session`] is the API the command line drives all of it through.
//!
//! Layers, bottom up (a module uses only those below it; the order is
//! `tests/layers.rs`): [`scenario`] (data) and [`guest`]; [`probe`] and
//! [`host`]; [`anchor_switch`] and [`machine`]; [`outcome`] (what a run
//! measured and built, as stored); [`testbed`];
//! [`contention`], [`pair`] and [`tools`]; [`store`], [`findings`],
//! [`report`] and [`export`] (stored data only); [`runner`]; [`session`].
//!
//! The kernel topology layer (namespaces, links, tc, the crash journal)
//! is the `vnio-topo` crate, re-exported here.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod anchor_switch;
pub mod contention;
pub mod export;
pub mod findings;
pub mod guest;
pub mod host;
pub mod machine;
pub mod outcome;
pub mod pair;
pub mod probe;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod session;
pub mod store;
pub mod testbed;
pub mod tools;

pub use vnio_topo::{
    check_ifname, clean, is_root, netns_exists, unique_id, Bridged, Cidr, CleanReport, Entry,
    Error, Handle, Host, IpvlanMode, Journal, Link, LinkState, MacvlanMode, Netem, Netns, Owner,
    Pair, Process, QdiscState, RateLimit, Result, RouteState, BRIDGED_MAX_HOSTS, DEFAULT_JOURNAL,
    IFNAME_MAX, JOURNAL_ENV, NETNS_RUN_DIR, PAIR_PREFIX, SCRATCH_PREFIX,
};
