//! Helpers shared by the root-only integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use vnio_topo::{Handle, Journal};

/// True (after printing a skip line) when the test cannot run here.
pub fn skip_unless_root(test: &str) -> bool {
    if vnio_topo::is_root() {
        false
    } else {
        println!("skipping {test}: needs root (network namespaces, netlink)");
        true
    }
}

/// A fresh journal private to this test, so tests never clean each other's
/// objects.
pub fn journal(tag: &str) -> Journal {
    let dir = std::env::temp_dir().join(format!("vnio-lab-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Journal::at(dir.join("journal"))
}

/// Names of the interfaces in the root namespace.
pub fn root_links() -> Vec<String> {
    let mut handle = Handle::root_with_journal(&journal("root-links")).expect("root handle");
    handle
        .links()
        .expect("listing root links")
        .into_iter()
        .map(|l| l.name)
        .collect()
}

/// The namespace files under /run/netns.
pub fn netns_files() -> Vec<String> {
    std::fs::read_dir(vnio_topo::NETNS_RUN_DIR)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Wait up to two seconds for `cond` (namespace teardown is asynchronous
/// in the kernel: interfaces vanish shortly after the last reference).
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    cond()
}

pub fn journal_dir(journal: &Journal) -> PathBuf {
    journal.path().parent().expect("journal dir").to_path_buf()
}
