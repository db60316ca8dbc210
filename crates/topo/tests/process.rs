//! Processes started in a namespace are journaled and never outlive the lab.

mod common;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use vnio_topo::{Entry, Netns, Process};

#[test]
fn process_is_killed_on_drop_and_by_clean() {
    if common::skip_unless_root("process_is_killed_on_drop_and_by_clean") {
        return;
    }
    let journal = common::journal("process");
    let (id, _) = vnio_topo::unique_id();
    let ns = Netns::create_with_journal(&format!("vnio-{id}-p"), &journal).expect("netns");

    // Normal path: dropping the guard kills and reaps the child.
    let mut cmd = ns.command("sleep");
    cmd.arg("30");
    let process = Process::spawn_with_journal(&mut cmd, &journal).expect("spawn");
    let pid = process.id();
    assert!(journal
        .entries()
        .expect("journal")
        .iter()
        .any(|e| matches!(e, Entry::Process { pid: p, .. } if *p == pid as i32)));
    // The child is in the namespace: same netns inode as ours for it.
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).expect("child netns");
    let expected = ns
        .run(|| std::fs::read_link("/proc/thread-self/ns/net"))
        .expect("run")
        .expect("link");
    assert_eq!(theirs, expected);
    drop(process);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "child {pid} survived drop"
    );

    // Crash path: the guard is leaked, clean() kills the child.
    let mut cmd = ns.command("sleep");
    cmd.arg("30");
    let process = Process::spawn_with_journal(&mut cmd, &journal).expect("spawn");
    let pid = process.id() as i32;
    std::mem::forget(process);
    let report = journal.clean().expect("clean");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(report
        .removed
        .iter()
        .any(|e| matches!(e, Entry::Process { pid: p, .. } if *p == pid)));
    // We are its parent, so it is ours to reap; it must have died of SIGKILL.
    match waitpid(Pid::from_raw(pid), None).expect("waitpid") {
        WaitStatus::Signaled(_, signal, _) => assert_eq!(signal, nix::sys::signal::Signal::SIGKILL),
        other => panic!("child ended with {other:?}"),
    }
    // clean() also removed the namespace it listed.
    assert!(!vnio_topo::netns_exists(ns.name()));
    drop(ns);
    assert!(journal.entries().expect("journal").is_empty());
    let _ = std::fs::remove_dir_all(common::journal_dir(&journal));
}
