//! The scenarios shipped in `scenarios/`, compiled into the binary so
//! `vnio lab run NAME` works from any directory.

/// A shipped scenario or set.
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    /// Its name (the file's stem).
    pub name: &'static str,
    /// The file's text.
    pub text: &'static str,
}

impl Shipped {
    /// True for a set file (`[set]`).
    pub fn is_set(&self) -> bool {
        self.text.lines().any(|l| l.trim() == "[set]")
    }
}

macro_rules! shipped {
    ($($name:literal),* $(,)?) => {
        &[$(Shipped {
            name: $name,
            text: include_str!(concat!("../../../../scenarios/", $name, ".toml")),
        }),*]
    };
}

/// Every shipped scenario, in the order `vnio lab list` shows them.
pub const SHIPPED: &[Shipped] = shipped![
    "quick",
    "native-bridge-switch",
    "ping-sessions",
    "rr-burst",
    "rr-size",
    "stream-sessions",
    "cpu-contention",
    "bandwidth-contention",
    "latency-modes",
    "latency-shield",
    "latency-modes-open",
    "latency-high",
    "coalesce",
    "netqueue",
    "egress",
    "offload",
    "uplink-rate",
    "lro",
    "switch-anchors",
    "cni",
    "instrument",
    "vm-native",
    "vm-vm",
    "lro-guest",
    "across-machines",
];

/// The shipped scenario called `name`.
pub fn shipped(name: &str) -> Option<Shipped> {
    SHIPPED.iter().copied().find(|s| s.name == name)
}
