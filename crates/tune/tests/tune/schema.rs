//! The audit JSON against `docs/tune-audit.schema.json`, with a small
//! validator for the part of JSON Schema that file uses (type, const, enum,
//! required, properties, additionalProperties, items, minimum, $ref).

use serde_json::Value;
use vnio_tune::{audit, Profile};

use crate::fake::Fake;

fn load(name: &str) -> Value {
    let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).expect("the schema is JSON")
}

pub fn schema() -> Value {
    load("tune-audit.schema.json")
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("schema uses type {other}, unknown to this validator"),
    }
}

const KNOWN: &[&str] = &[
    "$schema",
    "$id",
    "$defs",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "minimum",
    "$ref",
];

/// Errors of `v` against `s`, each with its JSON pointer.
pub fn validate(root: &Value, s: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
    let obj = s.as_object().expect("schema nodes are objects");
    for k in obj.keys() {
        assert!(
            KNOWN.contains(&k.as_str()),
            "schema keyword {k} unknown to this validator"
        );
    }
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").expect("local $defs refs only");
        validate(root, &root["$defs"][name], v, at, errs);
    }
    if let Some(t) = obj.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts
                .iter()
                .any(|t| type_ok(t.as_str().expect("type names"), v)),
            _ => panic!("bad type keyword"),
        };
        if !ok {
            errs.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(c) = obj.get("const") {
        if c != v {
            errs.push(format!("{at}: {v} != const {c}"));
        }
    }
    if let Some(e) = obj.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errs.push(format!("{at}: {v} not in enum {e:?}"));
        }
    }
    if let Some(m) = obj.get("minimum").and_then(Value::as_f64) {
        if v.as_f64().is_some_and(|x| x < m) {
            errs.push(format!("{at}: {v} < minimum {m}"));
        }
    }
    if let Some(o) = v.as_object() {
        let props = obj.get("properties").and_then(Value::as_object);
        for r in obj
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().expect("required names");
            if !o.contains_key(r) {
                errs.push(format!("{at}: missing required {r}"));
            }
        }
        for (k, val) in o {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(root, ps, val, &format!("{at}/{k}"), errs),
                None if obj.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    errs.push(format!("{at}: unexpected property {k}"))
                }
                None => {}
            }
        }
    }
    if let (Some(a), Some(items)) = (v.as_array(), obj.get("items")) {
        for (i, item) in a.iter().enumerate() {
            validate(root, items, item, &format!("{at}/{i}"), errs);
        }
    }
}

/// Asserts that a JSON audit validates.
pub fn assert_valid(doc: &Value) {
    let s = schema();
    let mut errs = Vec::new();
    validate(&s, &s, doc, "", &mut errs);
    assert!(
        errs.is_empty(),
        "audit JSON does not validate:\n{}",
        errs.join("\n")
    );
}

#[test]
fn fake_audits_validate_for_every_profile() {
    for fake in [Fake::kvm_guest(), Fake::bare_metal()] {
        for p in Profile::ALL {
            let a = audit(&fake.host(), p);
            let doc = serde_json::to_value(&a).expect("audit serialises");
            assert_valid(&doc);
            assert_eq!(
                doc["findings"].as_array().map(Vec::len),
                Some(vnio_tune::knobs::catalogue().len())
            );
        }
    }
}

#[test]
fn validator_rejects_what_the_schema_forbids() {
    let fake = Fake::kvm_guest();
    let mut doc = serde_json::to_value(audit(&fake.host(), Profile::Latency)).expect("serialises");
    doc["findings"][0]["status"] = Value::from("fine");
    doc["findings"][1]
        .as_object_mut()
        .expect("object")
        .remove("layer");
    doc["summary"]["ok"] = Value::from(-1);
    doc["extra"] = Value::from(1);
    let s = schema();
    let mut errs = Vec::new();
    validate(&s, &s, &doc, "", &mut errs);
    let joined = errs.join("\n");
    assert!(joined.contains("/findings/0/status"), "{joined}");
    assert!(
        joined.contains("/findings/1: missing required layer"),
        "{joined}"
    );
    assert!(joined.contains("/summary/ok"), "{joined}");
    assert!(joined.contains("unexpected property extra"), "{joined}");
}

#[test]
fn audit_json_round_trips() {
    let fake = Fake::bare_metal();
    let a = audit(&fake.host(), Profile::Throughput);
    let text = serde_json::to_string(&a).expect("serialises");
    let back: vnio_tune::Audit = serde_json::from_str(&text).expect("parses back");
    assert_eq!(a, back);
}

#[test]
fn measure_json_validates() {
    let opts = vnio_tune::measure::MeasureOptions {
        duration: std::time::Duration::from_millis(100),
        interval: std::time::Duration::from_millis(2),
        size: 32,
        fifo: None,
    };
    let m = vnio_tune::measure::measure(opts).expect("measure");
    let doc = serde_json::to_value(&m).expect("serialises");
    let s = load("tune-measure.schema.json");
    let mut errs = Vec::new();
    validate(&s, &s, &doc, "", &mut errs);
    assert!(
        errs.is_empty(),
        "measure JSON does not validate:\n{}",
        errs.join("\n")
    );
    assert_eq!(doc["wakeup"]["fifo_priority"], Value::Null);
    assert_eq!(doc["udp_rr"]["size"], 32);
}
