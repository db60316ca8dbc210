//! A finding as a scenario declares it (`[[finding]]`): which study claim
//! it tests, what is compared, by which statistic, against which threshold,
//! and the study's own number; and the checks made when the scenario is
//! loaded, so a finding that can never be judged is refused up front.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::model::Scenario;
pub use super::statistic::Statistic;

/// One study finding tested by a scenario over its own results.
///
/// ```toml
/// [[finding]]
/// id = "switch-adds-latency"
/// study = "Network I/O latency on vSphere 5"
/// claim = "a virtual path adds 15-20 us per round trip over native"
/// workload = "rr-tcp"
/// statistic = "p50"
/// subject = { configuration = "switch" }
/// against = { configuration = "native" }
/// quantity = "difference"    # subject - against (default with `against`)
/// expect = "above"
/// than = 0                   # default: 0 for a difference, 1 for a ratio
/// reference = [15, 20]       # the study's number(s), in the quantity's unit
/// ```
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FindingSpec {
    /// Lower-case letters, digits and '-', unique in the scenario.
    pub id: String,
    /// The study the claim comes from.
    pub study: String,
    /// The claim in words.
    pub claim: String,
    /// The workload whose points are compared.
    pub workload: String,
    /// What is read from each point.
    pub statistic: Statistic,
    /// The point the claim is about.
    pub subject: PointRef,
    /// The point it is compared with; none: the subject against `than`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<PointRef>,
    /// How subject and against combine (default: difference with
    /// `against`, value without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<Quantity>,
    /// On which side of `than` the study puts the quantity.
    pub expect: Expect,
    /// The threshold (default 0 for a difference, 1 for a ratio; required
    /// for a value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub than: Option<f64>,
    /// The study's number: one value or a [low, high] range, in the
    /// quantity's unit. Shown next to this run's, and marked on figures.
    #[serde(
        default,
        deserialize_with = "one_or_two",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub reference: Vec<f64>,
}

impl FindingSpec {
    /// The quantity, with its default filled in.
    pub fn quantity(&self) -> Quantity {
        self.quantity.unwrap_or(if self.against.is_some() {
            Quantity::Difference
        } else {
            Quantity::Value
        })
    }

    /// The threshold, with its default filled in (validation guarantees a
    /// value quantity has one).
    pub fn threshold(&self) -> f64 {
        self.than.unwrap_or(match self.quantity() {
            Quantity::Ratio => 1.0,
            _ => 0.0,
        })
    }
}

/// A point of the scenario: a configuration, and a sweep value when the
/// scenario sweeps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PointRef {
    /// Configuration name.
    pub configuration: String,
    /// Sweep value: a number, "first" or "last" (the ends survive `--quick`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<SweepRef>,
}

/// Which sweep value a finding reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepRef {
    /// This value.
    Value(u64),
    /// The first value of the scenario's sweep.
    First,
    /// The last value of the scenario's sweep.
    Last,
}

impl SweepRef {
    /// The value among the scenario's `values` (in run order).
    pub fn resolve(self, values: &[u64]) -> Option<u64> {
        match self {
            SweepRef::Value(v) => Some(v),
            SweepRef::First => values.first().copied(),
            SweepRef::Last => values.last().copied(),
        }
    }
}

impl Serialize for SweepRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SweepRef::Value(v) => s.serialize_u64(*v),
            SweepRef::First => s.serialize_str("first"),
            SweepRef::Last => s.serialize_str("last"),
        }
    }
}

impl<'de> Deserialize<'de> for SweepRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SweepRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sweep value, \"first\" or \"last\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SweepRef, E> {
                Ok(SweepRef::Value(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SweepRef, E> {
                u64::try_from(v)
                    .map(SweepRef::Value)
                    .map_err(|_| E::custom(format!("sweep value {v} is negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SweepRef, E> {
                match v {
                    "first" => Ok(SweepRef::First),
                    "last" => Ok(SweepRef::Last),
                    _ => Err(E::custom(format!(
                        "sweep {v:?}: expected a number, \"first\" or \"last\""
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn one_or_two<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(f64),
        Many(Vec<f64>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(v) => vec![v],
        OneOrMany::Many(v) => v,
    })
}

/// How the subject's and the against point's statistic combine into the
/// number judged.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Quantity {
    /// The subject's statistic alone (against a bound).
    Value,
    /// Subject minus against.
    Difference,
    /// Subject over against.
    Ratio,
}

impl Quantity {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Quantity::Value => "value",
            Quantity::Difference => "difference",
            Quantity::Ratio => "ratio",
        }
    }
}

/// The side of the threshold the study puts the quantity on.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// Above `than`.
    Above,
    /// Below `than`.
    Below,
}

impl Expect {
    /// The name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Expect::Above => "above",
            Expect::Below => "below",
        }
    }
}

/// Checks the scenario's findings against the rest of it. `Err` is the
/// field (e.g. "finding `x`: subject") and what is wrong.
pub(crate) fn check(s: &Scenario) -> Result<(), (String, String)> {
    let mut ids: Vec<&str> = Vec::new();
    for f in &s.findings {
        let at = |field: &str| format!("finding `{}`: {field}", f.id);
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if f.id.is_empty() || f.id.len() > 40 || !f.id.chars().all(ok_char) {
            return Err((
                "finding: id".into(),
                format!(
                    "{:?} must be 1 to 40 lower-case letters, digits and '-'",
                    f.id
                ),
            ));
        }
        if ids.contains(&f.id.as_str()) {
            return Err((at("id"), "used twice".into()));
        }
        ids.push(&f.id);
        for (field, text) in [("study", &f.study), ("claim", &f.claim)] {
            if text.trim().is_empty() {
                return Err((at(field), "must say something".into()));
            }
        }
        let Some(w) = s.workloads.iter().find(|w| w.name == f.workload) else {
            let known: Vec<&str> = s.workloads.iter().map(|w| w.name.as_str()).collect();
            return Err((
                at("workload"),
                format!(
                    "no workload named {:?} (workloads: {})",
                    f.workload,
                    known.join(", ")
                ),
            ));
        };
        if !f.statistic.applies_to(w.kind) {
            return Err((
                at("statistic"),
                format!(
                    "{} does not apply to {} workloads",
                    f.statistic.as_str(),
                    w.kind.as_str()
                ),
            ));
        }
        let mut sides = vec![("subject", &f.subject)];
        sides.extend(f.against.as_ref().map(|a| ("against", a)));
        for (field, p) in &sides {
            check_point(s, p).map_err(|m| (at(field), m))?;
            if f.statistic.needs_testbed_cpu() && !testbed_cpu(s, &p.configuration) {
                return Err((
                    at(field),
                    format!(
                        "{} needs knobs.testbed_cpu = true in configuration `{}`",
                        f.statistic.as_str(),
                        p.configuration
                    ),
                ));
            }
        }
        match (f.quantity(), &f.against) {
            (Quantity::Value, Some(_)) => {
                return Err((
                    at("quantity"),
                    "a value is the subject alone: drop `against`, or use difference or ratio"
                        .into(),
                ))
            }
            (Quantity::Difference | Quantity::Ratio, None) => {
                return Err((
                    at("against"),
                    format!("a {} needs a point to compare with", f.quantity().as_str()),
                ))
            }
            (Quantity::Value, None) if f.than.is_none() => {
                return Err((
                    at("than"),
                    "a value needs a bound to be judged against".into(),
                ))
            }
            _ => {}
        }
        if let Some(a) = &f.against {
            if resolved(s, a) == resolved(s, &f.subject) {
                return Err((at("against"), "is the subject itself".into()));
            }
        }
        if f.reference.len() > 2 || f.reference.iter().any(|v| !v.is_finite()) {
            return Err((at("reference"), "one number or a [low, high] pair".into()));
        }
        if f.than.is_some_and(|t| !t.is_finite()) {
            return Err((at("than"), "must be a finite number".into()));
        }
    }
    Ok(())
}

/// Whether configuration `name` of `s` accounts the testbed's own CPU.
fn testbed_cpu(s: &Scenario, name: &str) -> bool {
    s.configurations
        .iter()
        .find(|c| c.name == name)
        .is_some_and(|c| s.knobs.layered(&c.knobs).testbed_cpu == Some(true))
}

fn check_point(s: &Scenario, p: &PointRef) -> Result<(), String> {
    if !s.configurations.iter().any(|c| c.name == p.configuration) {
        let known: Vec<&str> = s.configurations.iter().map(|c| c.name.as_str()).collect();
        return Err(format!(
            "no configuration named {:?} (configurations: {})",
            p.configuration,
            known.join(", ")
        ));
    }
    match (&s.sweep, p.sweep) {
        (None, Some(_)) => Err("sweep: the scenario has no sweep".into()),
        (Some(sw), None) => Err(format!(
            "needs a sweep value: the scenario sweeps {} over {:?} (a number, \"first\" or \"last\")",
            sw.parameter.as_str(),
            sw.values
        )),
        (Some(sw), Some(SweepRef::Value(v))) if !sw.values.contains(&v) => Err(format!(
            "sweep: {v} is not one of the {} values {:?}",
            sw.parameter.as_str(),
            sw.values
        )),
        _ => Ok(()),
    }
}

/// A point as (configuration, sweep value), for telling two apart.
fn resolved<'a>(s: &Scenario, p: &'a PointRef) -> (&'a str, Option<u64>) {
    let values = s
        .sweep
        .as_ref()
        .map(|sw| sw.values.as_slice())
        .unwrap_or(&[]);
    (
        p.configuration.as_str(),
        p.sweep.and_then(|r| r.resolve(values)),
    )
}
