//! The lab's layers: which top-level module of `crates/lab/src` may refer
//! to which (`use crate::x`, `crate::x::` paths), read from the sources.
//!
//! Every module is declared after the modules it may use, so the graph has
//! no cycle by construction; the test fails when a file refers to a module
//! its layer does not allow, naming the file. `scripts/lab-layers` prints
//! the same graph (and any cycle) without building anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom to top: each module and what it may refer to (only modules
/// declared before it).
const LAYERS: &[(&str, &[&str])] = &[
    // Data: the scenario file (parse, validate, describe, plan) and the
    // guest image's settings.
    ("scenario", &[]),
    ("guest", &[]),
    // What a run measured, point by point.
    // What this machine has installed (capabilities).
    ("probe", &["scenario"]),
    // Processes on this machine: spawn, logs, pinning, scratch.
    ("host", &["guest"]),
    // Parts of a testbed.
    ("anchor_switch", &["scenario", "probe", "host"]),
    ("machine", &["scenario", "host"]),
    // What a run measured and built, as stored (a machine's clock offset
    // is part of it).
    ("outcome", &["scenario", "machine"]),
    (
        "testbed",
        &[
            "scenario",
            "guest",
            "outcome",
            "probe",
            "host",
            "anchor_switch",
            "machine",
        ],
    ),
    // What runs in a testbed around and as a point.
    ("contention", &["scenario", "outcome", "host", "testbed"]),
    ("pair", &["scenario", "host", "anchor_switch", "testbed"]),
    ("tools", &["scenario", "probe", "host", "testbed"]),
    // Stored runs, judging them, and their reports: stored data only (the
    // testbed's description is part of a stored run).
    ("store", &["scenario", "guest", "outcome", "testbed"]),
    ("findings", &["scenario", "outcome", "store"]),
    (
        "report",
        &["scenario", "outcome", "store", "findings", "testbed"],
    ),
    ("export", &["scenario", "outcome", "store", "report"]),
    // Running a plan.
    (
        "runner",
        &[
            "scenario",
            "guest",
            "outcome",
            "probe",
            "host",
            "machine",
            "testbed",
            "contention",
            "pair",
            "tools",
            "findings",
        ],
    ),
    // The API the command line drives.
    (
        "session",
        &[
            "scenario", "guest", "outcome", "probe", "host", "machine", "testbed", "store",
            "findings", "report", "export", "runner",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`lib` for lib.rs).
fn top_module(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_owned()
}

/// The source without comments (doc text names modules freely).
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names `text` refers to through `crate::`.
fn references(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        if text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `vnio_lab::...` is not this crate's path
        }
        let after = &text[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `crate::{a::X, b}`: the first name of each item at depth 0.
            let (mut depth, mut start) = (0, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        out.insert(ident(&group[j..]).to_owned());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(after).to_owned());
        }
    }
    out
}

/// Module -> module -> the files making that edge.
fn graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| top_module(f)).collect();
    let mut g: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let here = top_module(f);
        if here == "lib" {
            continue;
        }
        g.entry(here.clone()).or_default();
        for there in references(&code(&fs::read_to_string(f).unwrap())) {
            if there != here && modules.contains(&there) && there != "lib" {
                let rel = f.strip_prefix(src()).unwrap().display().to_string();
                g.entry(here.clone())
                    .or_default()
                    .entry(there)
                    .or_default()
                    .insert(rel);
            }
        }
    }
    g
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let declared: Vec<&str> = LAYERS.iter().map(|(m, _)| *m).collect();
    for (i, (m, allowed)) in LAYERS.iter().enumerate() {
        for a in *allowed {
            assert!(
                declared[..i].contains(a),
                "LAYERS: `{m}` may use `{a}`, which is not declared below it"
            );
        }
    }
    let g = graph();
    let mut wrong = Vec::new();
    for (m, uses) in &g {
        let Some((_, allowed)) = LAYERS.iter().find(|(n, _)| n == m) else {
            wrong.push(format!("`{m}` is in no layer: add it to LAYERS"));
            continue;
        };
        for (there, files) in uses {
            if !allowed.contains(&there.as_str()) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                wrong.push(format!("`{m}` uses `{there}` ({})", files.join(", ")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "layer order broken:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scenario_is_data_and_imports_nothing_of_the_lab() {
    let g = graph();
    assert_eq!(
        g.get("scenario").map(BTreeMap::len),
        Some(0),
        "{:?}",
        g["scenario"]
    );
}

#[test]
fn references_are_read_from_paths_and_groups() {
    let text = code(
        "use crate::scenario::{A, B};\nuse crate::{host::spawn, store};\n\
         // crate::report in a comment\nlet x = crate::probe::which(\"a\");\nvnio_lab::runner::X;",
    );
    let got: Vec<String> = references(&text).into_iter().collect();
    assert_eq!(got, ["host", "probe", "scenario", "store"]);
}
