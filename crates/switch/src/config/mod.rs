//! The switch's configuration: the TOML file of `vnio switch --config`,
//! and the port specification shared with the control socket's `port_add`.
//!
//! A port's specification is in `config/port.rs` (its kind's own keys in
//! the kind's module, `port/*/spec.rs`), its latency policies in
//! `config/policies.rs`, its egress settings in `config/egress.rs`.

use crate::datapath::ReadAheadMode;
use crate::vlan::BadVid;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

mod egress;
mod policies;
mod port;

pub use crate::port::tap::TapSpec;
pub use crate::port::uplink::UplinkSpec;
pub use crate::port::vhost_user::VhostUserSpec;
pub use crate::port::vxlan::VxlanSpec;
pub use crate::port::KindSpec;
pub use egress::EgressSettings;
pub use policies::{Latency, Policies, PolicyUpdate};
pub use port::PortSpec;

/// Why a configuration is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// File.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse or has unknown keys.
    #[error("invalid configuration")]
    Parse(#[from] toml::de::Error),
    /// `workers` is out of range.
    #[error("workers = {0}: the switch runs 1 to {MAX_WORKERS} shared workers")]
    Workers(usize),
    /// A port is inconsistent.
    #[error("port {name}: {what}")]
    Port {
        /// Port name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// A VLAN id is out of range.
    #[error("port {name}")]
    Vlan {
        /// Port name.
        name: String,
        /// Why.
        #[source]
        source: BadVid,
    },
}

/// The whole file.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Switch-wide settings.
    #[serde(default)]
    pub switch: SwitchConfig,
    /// Ports present at start.
    #[serde(default, rename = "port")]
    pub ports: Vec<PortSpec>,
}

/// Most shared workers (`[switch] workers`): one per queue pair of the
/// largest multiqueue vNIC.
pub const MAX_WORKERS: usize = crate::vhost_user::device::MAX_QUEUE_PAIRS;

/// Switch-wide settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchConfig {
    /// Control socket path.
    pub control: PathBuf,
    /// The group (name or number) whose members may also use the control
    /// socket (mode 0660); only root and the switch's own user when absent (0600).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_group: Option<String>,
    /// The directory the sockets of ports added over the control socket
    /// must be in (default: the control socket's directory). The config
    /// file's own ports may be anywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_dir: Option<PathBuf>,
    /// Where the ports added or changed over the control socket are
    /// recorded, to be restored when the switch starts again (default: the
    /// control socket's path with the extension `.state`, see [`crate::state`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<PathBuf>,
    /// FDB capacity.
    pub fdb_capacity: usize,
    /// Addresses a port may have learned in its worker's FDB unless the
    /// port sets `fdb_limit` (see [`crate::fdb`]).
    pub fdb_port_limit: u32,
    /// FDB aging time in seconds.
    pub aging_secs: u64,
    /// An address another port is still sending from (seen within this
    /// many milliseconds) does not move on a frame (see
    /// [`crate::fdb::moves`]); 0: every frame moves its source, as on a
    /// Linux bridge. Written out only when not the default, as every
    /// setting added later is, so that a configuration written by this
    /// build still starts an older one (the lab's `switch_binary`).
    #[serde(skip_serializing_if = "is_default_move_quiet")]
    pub mac_move_quiet_ms: u64,
    /// How long a flapping address stays with its holder, in seconds
    /// (written out only when not the default).
    #[serde(skip_serializing_if = "is_default_flap_hold")]
    pub mac_flap_hold_secs: u64,
    /// Frames taken from one queue per polling round.
    pub budget: usize,
    /// Empty polling rounds before the worker sleeps on kicks (0: sleep at once).
    pub idle_polls: u32,
    /// Run latency-high ports' dedicated workers under SCHED_FIFO at this
    /// priority (1-99): a busy-polling thread time-sliced with other
    /// processes on its core waits for its slice, which costs more latency
    /// than a sleeping worker's wake-up. Off when absent (keep other
    /// processes off dedicated cores instead, e.g. with cpusets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedicated_rt_priority: Option<u8>,
    /// Serve the counters in Prometheus text format over HTTP on this
    /// address (e.g. "127.0.0.1:9469"); off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Most guest memory one vhost-user front-end may have the switch map,
    /// in MiB (default 1 TiB), its dirty log included: a memory table or a
    /// log above it is refused and the port reset.
    pub max_guest_memory_mib: u64,
    /// Shared workers (1-8, default 1). Ports live on the first; with more
    /// than one, a multiqueue vhost-user port on it serves its queue pair k
    /// on shared worker k mod `workers` (docs/switch.md "Multiqueue vNICs").
    /// Written out only when not 1 (a default file stays as before).
    #[serde(skip_serializing_if = "is_one")]
    pub workers: usize,
    /// Whether a transmit burst's buffers are prefetched as they are
    /// popped: "auto" (default: each worker measures both and keeps the
    /// cheaper, `datapath/read_ahead.rs`), "on" or "off". Written out only
    /// when not "auto".
    #[serde(skip_serializing_if = "is_auto")]
    pub read_ahead: ReadAheadMode,
    /// Drops of one reason per second on one port above which `vnio
    /// switch events` says so (once, and again when they fall back;
    /// checked once a second from the counters); 0: never. Written out
    /// only when not the default.
    #[serde(skip_serializing_if = "is_default_drop_rate")]
    pub drop_event_rate: u64,
    /// Record how long frames stay in the switch, per destination port
    /// (default true; `crate::dwell`): off, only to measure what recording
    /// costs. Written out only when off.
    #[serde(skip_serializing_if = "is_true")]
    pub time_in_switch: bool,
    /// Lock the switch's pages into memory when `vnio switch` starts
    /// (default true; `daemon::lock_memory`): its workers then never wait
    /// on the disk for a page of code dropped under memory pressure.
    /// Written out only when off.
    #[serde(skip_serializing_if = "is_true")]
    pub lock_memory: bool,
}

/// The default [`SwitchConfig::mac_move_quiet_ms`].
pub const MAC_MOVE_QUIET_MS: u64 = 1000;
/// The default [`SwitchConfig::mac_flap_hold_secs`].
pub const MAC_FLAP_HOLD_SECS: u64 = 60;
/// The default [`SwitchConfig::drop_event_rate`].
pub const DROP_EVENT_RATE: u64 = 1000;

fn is_true(b: &bool) -> bool {
    *b
}

fn is_default_move_quiet(ms: &u64) -> bool {
    *ms == MAC_MOVE_QUIET_MS
}

fn is_default_flap_hold(secs: &u64) -> bool {
    *secs == MAC_FLAP_HOLD_SECS
}

fn is_default_drop_rate(n: &u64) -> bool {
    *n == DROP_EVENT_RATE
}

fn is_auto(m: &ReadAheadMode) -> bool {
    *m == ReadAheadMode::Auto
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl Default for SwitchConfig {
    fn default() -> Self {
        Self {
            control: PathBuf::from("/run/vnio/switch.sock"),
            control_group: None,
            socket_dir: None,
            state: None,
            fdb_capacity: 8192,
            fdb_port_limit: crate::fdb::DEFAULT_PORT_LIMIT,
            aging_secs: 300,
            mac_move_quiet_ms: MAC_MOVE_QUIET_MS,
            mac_flap_hold_secs: MAC_FLAP_HOLD_SECS,
            budget: 64,
            idle_polls: 64,
            dedicated_rt_priority: None,
            metrics_listen: None,
            max_guest_memory_mib: crate::vhost_user::memory::DEFAULT_MAX_MEMORY >> 20,
            workers: 1,
            read_ahead: ReadAheadMode::Auto,
            drop_event_rate: DROP_EVENT_RATE,
            time_in_switch: true,
            lock_memory: true,
        }
    }
}

impl SwitchConfig {
    /// The aging time.
    pub fn aging(&self) -> Duration {
        Duration::from_secs(self.aging_secs)
    }

    /// The FDB's rule for moves between ports.
    pub fn mobility(&self) -> crate::fdb::Mobility {
        crate::fdb::Mobility {
            quiet: Duration::from_millis(self.mac_move_quiet_ms),
            hold: Duration::from_secs(self.mac_flap_hold_secs),
        }
    }

    /// An empty FDB as this switch's workers have.
    pub fn fdb(&self) -> crate::fdb::Fdb {
        crate::fdb::Fdb::new(self.fdb_capacity, self.aging())
            .with_port_limit(self.fdb_port_limit)
            .with_mobility(self.mobility())
    }

    /// The cap on one front-end's mapped guest memory, in bytes.
    pub fn max_guest_memory(&self) -> u64 {
        self.max_guest_memory_mib.saturating_mul(1 << 20)
    }

    /// Where the control socket's ports are recorded.
    pub fn state_path(&self) -> PathBuf {
        self.state
            .clone()
            .unwrap_or_else(|| self.control.with_extension("state"))
    }

    /// Where control-socket clients may put ports' sockets.
    pub fn socket_dir(&self) -> PathBuf {
        self.socket_dir
            .clone()
            .unwrap_or_else(|| match self.control.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
                _ => PathBuf::from("."),
            })
    }
}

pub use crate::vhost_user::device::MAX_QUEUE_PAIRS;

/// Most receive queues an uplink may have.
pub const MAX_UPLINK_QUEUES: usize = 64;

impl Config {
    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let c: Config = toml::from_str(text)?;
        if !(1..=MAX_WORKERS).contains(&c.switch.workers) {
            return Err(ConfigError::Workers(c.switch.workers));
        }
        for p in &c.ports {
            p.policy()?;
        }
        Ok(c)
    }

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text)
    }
}

#[cfg(test)]
mod tests;
