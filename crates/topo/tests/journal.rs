//! Crash safety: what a run leaves behind is found through the journal and
//! removed by `clean`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use vnio_topo::{Entry, Handle, Journal, Netns, Pair};

const CHILD_ENV: &str = "VNIO_LAB_TEST_CHILD_JOURNAL";

#[test]
fn clean_removes_forgotten_objects() {
    if common::skip_unless_root("clean_removes_forgotten_objects") {
        return;
    }
    let journal = common::journal("forget");
    let (id, _) = vnio_topo::unique_id();
    let ns_name = format!("vnio-{id}-f");
    let (veth, peer, bridge) = (
        format!("vnio{id}r"),
        format!("vnio{id}s"),
        format!("vnio{id}q"),
    );

    let ns = Netns::create_with_journal(&ns_name, &journal).expect("netns");
    let mut root = Handle::root_with_journal(&journal).expect("root handle");
    let link = root.add_veth(&veth, &peer, None).expect("veth");
    let br = root.add_bridge(&bridge).expect("bridge");
    root.set_controller(&peer, &bridge).expect("enslave");
    std::mem::forget(ns);
    std::mem::forget(link);
    std::mem::forget(br);

    assert!(vnio_topo::netns_exists(&ns_name));
    let links = common::root_links();
    for name in [&veth, &peer, &bridge] {
        assert!(links.contains(name), "{name} missing before clean");
    }
    assert_eq!(journal.entries().expect("journal").len(), 4);

    let report = journal.clean().expect("clean");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(report.removed.contains(&Entry::Netns(ns_name.clone())));
    assert!(report.removed.contains(&Entry::Link(veth.clone())));
    assert!(report.removed.contains(&Entry::Link(bridge.clone())));
    assert!(!vnio_topo::netns_exists(&ns_name));
    assert!(!common::netns_files().contains(&ns_name));
    let links = common::root_links();
    for name in [&veth, &peer, &bridge] {
        assert!(!links.contains(name), "{name} left after clean");
    }
    assert!(journal.entries().expect("journal").is_empty());

    // Idempotent: nothing left to do.
    let again = journal.clean().expect("second clean");
    assert!(again.removed.is_empty() && again.failed.is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

/// Not a test on its own: the body of the child process that
/// `clean_after_sigkill` starts and kills.
#[test]
fn sigkill_child_helper() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let journal = Journal::at(path);
    let pair = Pair::with_journal(&journal).expect("child pair");
    let (id, _) = vnio_topo::unique_id();
    let bridge = format!("vnio{id}k");
    let mut root = Handle::root_with_journal(&journal).expect("child root handle");
    let br = root.add_bridge(&bridge).expect("child bridge");
    println!("NETNS {}", pair.a().netns().name());
    println!("NETNS {}", pair.b().netns().name());
    println!("LINK {}", br.name());
    println!("READY");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[test]
fn clean_after_sigkill() {
    if common::skip_unless_root("clean_after_sigkill") {
        return;
    }
    let journal = common::journal("sigkill");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "sigkill_child_helper",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, journal.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawning child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut netns = Vec::new();
    let mut links = Vec::new();
    let mut ready = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("reading child");
        // libtest's "test NAME ... " may precede the first line.
        if let Some((_, name)) = line.split_once("NETNS ") {
            netns.push(name.to_owned());
        } else if let Some((_, name)) = line.split_once("LINK ") {
            links.push(name.to_owned());
        } else if line.ends_with("READY") {
            ready = true;
            break;
        }
    }
    assert!(ready, "child did not get ready");
    child.kill().expect("SIGKILL child");
    let status = child.wait().expect("reaping child");
    assert!(!status.success());

    // The killed child ran no destructor: everything is still there.
    for name in &netns {
        assert!(
            vnio_topo::netns_exists(name),
            "{name} should survive the kill"
        );
    }
    for name in &links {
        assert!(
            common::root_links().contains(name),
            "{name} should survive the kill"
        );
    }

    let report = journal.clean().expect("clean");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.removed.len(), netns.len() + links.len());
    for name in &netns {
        assert!(!vnio_topo::netns_exists(name), "{name} left after clean");
    }
    let root = common::root_links();
    for name in &links {
        assert!(!root.contains(name), "{name} left after clean");
    }
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}

#[test]
fn root_links_are_journaled_and_dropped() {
    if common::skip_unless_root("root_links_are_journaled_and_dropped") {
        return;
    }
    let journal = common::journal("rootdrop");
    let (id, _) = vnio_topo::unique_id();
    let (veth, peer) = (format!("vnio{id}r"), format!("vnio{id}s"));
    let mut root = Handle::root_with_journal(&journal).expect("root handle");
    let link = root.add_veth(&veth, &peer, None).expect("veth");
    assert_eq!(
        journal.entries().expect("journal"),
        vec![Entry::Link(veth.clone()), Entry::Link(peer.clone())]
    );
    // A refused creation leaves no journal entry behind.
    let taken = root.add_bridge(&veth).expect_err("name taken");
    assert!(taken.to_string().contains("exists"), "{taken}");
    assert_eq!(journal.entries().expect("journal").len(), 2);

    drop(link);
    let links = common::root_links();
    assert!(!links.contains(&veth) && !links.contains(&peer));
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
