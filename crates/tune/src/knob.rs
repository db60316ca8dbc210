//! The shape every knob of the catalogue has: what it is, who controls it,
//! what each profile wants and why, what it costs, how to change and undo
//! it, and a function that reads it on a [`Host`].

use serde::{Deserialize, Serialize};

use crate::host::{Host, Unread, UnreadKind};

/// What the machine is tuned for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Lowest and steadiest latency, at the price of power and CPU.
    Latency,
    /// Most work per CPU and per watt; latency may wait for batches.
    Throughput,
    /// The kernel's defaults, mostly: good enough for both.
    Balanced,
}

impl Profile {
    /// All profiles.
    pub const ALL: [Profile; 3] = [Profile::Latency, Profile::Throughput, Profile::Balanced];

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Latency => "latency",
            Profile::Throughput => "throughput",
            Profile::Balanced => "balanced",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latency" => Ok(Profile::Latency),
            "throughput" => Ok(Profile::Throughput),
            "balanced" => Ok(Profile::Balanced),
            _ => Err(format!(
                "unknown profile {s:?} (latency, throughput or balanced)"
            )),
        }
    }
}

/// Who controls a knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Firmware setup of the physical machine.
    Bios,
    /// The kernel of the machine that owns the physical CPUs and NICs.
    Host,
    /// The hypervisor (KVM/QEMU configuration of the VM).
    Hypervisor,
    /// The kernel of the VM (or the host kernel for its own workloads).
    Guest,
}

impl Layer {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Bios => "bios",
            Layer::Host => "host",
            Layer::Hypervisor => "hypervisor",
            Layer::Guest => "guest",
        }
    }
}

/// How a knob is changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyKind {
    /// `vnio tune apply` writes it at runtime and journals it.
    Runtime,
    /// Kernel command line or module option: reported, never applied.
    Reboot,
    /// Needs a process to hold it (PM QoS): `vnio tune hold-pm-qos`.
    Process,
    /// Changed by hand (BIOS, hypervisor, services, NICs): reported, with how.
    Manual,
    /// Nothing to change: a measurement or a fact.
    None,
}

/// What each profile wants, as text for people.
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    /// For [`Profile::Latency`].
    pub latency: &'static str,
    /// For [`Profile::Throughput`].
    pub throughput: &'static str,
    /// For [`Profile::Balanced`].
    pub balanced: &'static str,
}

impl Targets {
    /// The text for `profile`.
    pub fn get(&self, profile: Profile) -> &'static str {
        match profile {
            Profile::Latency => self.latency,
            Profile::Throughput => self.throughput,
            Profile::Balanced => self.balanced,
        }
    }
}

/// One entry of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// Stable id, `area.name`.
    pub id: &'static str,
    /// One line for people.
    pub title: &'static str,
    /// Who controls it.
    pub layer: Layer,
    /// Where the value is read from.
    pub reads: &'static str,
    /// What each profile wants.
    pub targets: Targets,
    /// Why it matters for latency.
    pub why: &'static str,
    /// What the latency setting costs.
    pub tradeoff: &'static str,
    /// How it is changed.
    pub apply: ApplyKind,
    /// How to change it (command, file or setting).
    pub how: &'static str,
    /// How to undo it.
    pub revert: &'static str,
    /// The reading changes by itself (counters, measurements): left out of
    /// the before/after comparison of `revert`.
    pub volatile: bool,
    /// Reads the knob and judges it against a profile.
    pub assess: fn(&Host, Profile) -> Result<Assessment, Unread>,
}

/// How a reading compares with the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// As the profile wants.
    Ok,
    /// Not as the profile wants.
    Differs,
    /// A fact with no right value (node count, ...).
    Info,
    /// Hidden from this machine (a VM does not see the host's knobs).
    NotVisible,
    /// There, but could not be read (permissions, garbage).
    Unreadable,
}

impl Status {
    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Differs => "differs",
            Status::Info => "info",
            Status::NotVisible => "not_visible",
            Status::Unreadable => "unreadable",
        }
    }
}

/// One runtime write that brings a knob to the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Logical path of the file.
    pub path: String,
    /// Text to write.
    pub to: String,
    /// Text to write back to undo it.
    pub restore: String,
}

/// What reading one knob found.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// Verdict.
    pub status: Status,
    /// The current value, as text.
    pub current: String,
    /// Details (per CPU, per interface, what could not be seen).
    pub notes: Vec<String>,
    /// Runtime writes that would bring it to the profile.
    pub changes: Vec<Change>,
}

impl Assessment {
    /// A verdict on a value.
    pub fn new(status: Status, current: impl Into<String>) -> Self {
        Assessment {
            status,
            current: current.into(),
            notes: Vec::new(),
            changes: Vec::new(),
        }
    }
    /// As the profile wants.
    pub fn ok(current: impl Into<String>) -> Self {
        Self::new(Status::Ok, current)
    }
    /// Not as the profile wants.
    pub fn differs(current: impl Into<String>) -> Self {
        Self::new(Status::Differs, current)
    }
    /// A fact.
    pub fn info(current: impl Into<String>) -> Self {
        Self::new(Status::Info, current)
    }
    /// Ok when `good`, else differs.
    pub fn judge(good: bool, current: impl Into<String>) -> Self {
        Self::new(if good { Status::Ok } else { Status::Differs }, current)
    }
    /// Hidden from here, and why.
    pub fn not_visible(why: impl Into<String>) -> Self {
        Self::new(
            Status::NotVisible,
            format!("not visible from here: {}", why.into()),
        )
    }
    /// Adds a note.
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }
    /// Adds a runtime change (only kept while the status differs).
    pub fn change(mut self, c: Change) -> Self {
        self.changes.push(c);
        self
    }
    /// What a failed read means: absent is "not visible from here",
    /// anything else is "unreadable".
    pub fn from_unread(u: &Unread) -> Self {
        match u.kind {
            UnreadKind::Missing => Self::not_visible(u.to_string()),
            _ => Self::new(Status::Unreadable, format!("unreadable: {u}")),
        }
    }
}
