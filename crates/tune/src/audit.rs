//! Reads every knob of the catalogue against a profile. Read-only.

use serde::{Deserialize, Serialize};

use crate::host::Host;
pub use crate::knob::Status;
use crate::knob::{ApplyKind, Assessment, Change, Knob, Layer, Profile};

/// Schema id of [`Audit`] documents (`docs/tune-audit.schema.json`).
pub const AUDIT_SCHEMA: &str = "vnio.tune.audit/1";

/// How the value of a `not_visible` finding starts.
pub const NOT_VISIBLE: &str = "not visible from here: ";
/// How the value of an `unreadable` finding starts.
pub const UNREADABLE: &str = "unreadable: ";

/// How to change one knob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyInfo {
    /// Runtime, reboot, process, manual or none.
    pub kind: ApplyKind,
    /// How to change it.
    pub how: String,
    /// How to undo it.
    pub revert: String,
}

/// One knob read and judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Knob id.
    pub id: String,
    /// Knob title.
    pub title: String,
    /// Who controls it.
    pub layer: Layer,
    /// Verdict against the profile.
    pub status: Status,
    /// Current value.
    pub current: String,
    /// What the profile wants.
    pub recommended: String,
    /// Why it matters.
    pub why: String,
    /// What it costs.
    pub tradeoff: String,
    /// How to change it.
    pub apply: ApplyInfo,
    /// Details.
    pub notes: Vec<String>,
    /// Runtime writes `vnio tune apply` would make (empty unless the
    /// status is `differs` and the knob is changed at runtime).
    pub changes: Vec<Change>,
    /// Whether the value changes by itself (left out of revert's check).
    pub volatile: bool,
}

/// Counts per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// As the profile wants.
    pub ok: usize,
    /// Not as the profile wants.
    pub differs: usize,
    /// Facts.
    pub info: usize,
    /// Hidden from here.
    pub not_visible: usize,
    /// Could not be read.
    pub unreadable: usize,
}

/// A full audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    /// [`AUDIT_SCHEMA`].
    pub schema: String,
    /// The profile judged against.
    pub profile: Profile,
    /// Root directory read (`/` on a live machine).
    pub root: String,
    /// Effective user id of the reader (not root: some knobs unreadable).
    pub euid: u32,
    /// Kernel release, if readable.
    pub kernel: Option<String>,
    /// Whether the CPU says a hypervisor runs this machine.
    pub virtualized: Option<bool>,
    /// Counts per status.
    pub summary: Summary,
    /// One per knob, in catalogue order.
    pub findings: Vec<Finding>,
}

impl Audit {
    /// CI exit code: 0 when nothing visible differs from the profile, 2
    /// when something does (1 is left for errors).
    pub fn exit_code(&self) -> i32 {
        if self.summary.differs > 0 {
            2
        } else {
            0
        }
    }

    /// The runtime changes that would bring this machine to the profile.
    pub fn planned_changes(&self) -> Vec<(String, Change)> {
        self.findings
            .iter()
            .flat_map(|f| f.changes.iter().map(move |c| (f.id.clone(), c.clone())))
            .collect()
    }
}

/// Reads one knob; a panic in a knob (a bug) becomes an `unreadable`
/// finding rather than ending the audit.
pub fn assess_knob(host: &Host, knob: &Knob, profile: Profile) -> Finding {
    let run = std::panic::AssertUnwindSafe(|| (knob.assess)(host, profile));
    let a = match std::panic::catch_unwind(run) {
        Ok(Ok(a)) => a,
        Ok(Err(u)) => Assessment::from_unread(&u),
        Err(_) => Assessment::new(
            Status::Unreadable,
            "unreadable: internal error while reading this knob (a bug)",
        ),
    };
    // The documented invariant: these two statuses say so first.
    let current = match a.status {
        Status::NotVisible if !a.current.starts_with(NOT_VISIBLE) => {
            format!("{NOT_VISIBLE}{}", a.current)
        }
        Status::Unreadable if !a.current.starts_with(UNREADABLE) => {
            format!("{UNREADABLE}{}", a.current)
        }
        _ => a.current,
    };
    let mut notes = a.notes;
    let mut changes = Vec::new();
    if a.status == Status::Differs && knob.apply == ApplyKind::Runtime {
        for c in a.changes {
            match host.writable(&c.path) {
                Ok(()) => changes.push(c),
                Err(why) => notes.push(format!(
                    "{} is read-only here ({why}): cannot be applied",
                    c.path
                )),
            }
        }
    }
    Finding {
        id: knob.id.to_string(),
        title: knob.title.to_string(),
        layer: knob.layer,
        status: a.status,
        current,
        recommended: knob.targets.get(profile).to_string(),
        why: knob.why.to_string(),
        tradeoff: knob.tradeoff.to_string(),
        apply: ApplyInfo {
            kind: knob.apply,
            how: knob.how.to_string(),
            revert: knob.revert.to_string(),
        },
        notes,
        changes,
        volatile: knob.volatile,
    }
}

/// Audits the whole catalogue.
pub fn audit(host: &Host, profile: Profile) -> Audit {
    audit_skipping(host, profile, &[])
}

/// Audits the catalogue but the knobs whose ids are in `skip` (they are
/// neither read nor counted: for what a CI machine cannot change).
pub fn audit_skipping(host: &Host, profile: Profile, skip: &[String]) -> Audit {
    let findings: Vec<Finding> = crate::knobs::catalogue()
        .iter()
        .filter(|k| !skip.iter().any(|s| s == k.id))
        .map(|k| assess_knob(host, k, profile))
        .collect();
    let mut summary = Summary::default();
    for f in &findings {
        match f.status {
            Status::Ok => summary.ok += 1,
            Status::Differs => summary.differs += 1,
            Status::Info => summary.info += 1,
            Status::NotVisible => summary.not_visible += 1,
            Status::Unreadable => summary.unreadable += 1,
        }
    }
    let virtualized = host
        .read("/proc/cpuinfo")
        .ok()
        .map(|c| crate::knobs::virt::cpuinfo_has_flag(&c, "hypervisor"));
    Audit {
        schema: AUDIT_SCHEMA.to_string(),
        profile,
        root: host.root().display().to_string(),
        euid: host.probe().euid(),
        kernel: host.read("/proc/sys/kernel/osrelease").ok(),
        virtualized,
        summary,
        findings,
    }
}

/// The differences between two audits of the same machine, leaving out
/// volatile knobs: one line per knob whose status or value changed.
pub fn diff(before: &Audit, after: &Audit) -> Vec<String> {
    let mut out = Vec::new();
    for b in before.findings.iter().filter(|f| !f.volatile) {
        match after.findings.iter().find(|a| a.id == b.id) {
            None => out.push(format!("{}: missing after", b.id)),
            Some(a) if a.current != b.current || a.status != b.status => out.push(format!(
                "{}: {} ({}) -> {} ({})",
                b.id,
                b.current,
                b.status.name(),
                a.current,
                a.status.name()
            )),
            Some(_) => {}
        }
    }
    out
}
