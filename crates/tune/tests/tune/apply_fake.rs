//! Apply and revert on fake machines: the journal is written before each
//! change, revert restores every file exactly, and says what it could not.

use std::collections::BTreeMap;

use vnio_tune::apply::{apply, revert, RevertAction};
use vnio_tune::journal::{reverted_path, EntryState, Journal};
use vnio_tune::{audit, Profile, Status, TuneError};

use crate::audit_fake::find;
use crate::fake::{Fake, TempDir};

/// Every file of the tree and its bytes.
fn snapshot(fake: &Fake) -> BTreeMap<String, Vec<u8>> {
    fake.files()
        .into_iter()
        .map(|f| (f.clone(), std::fs::read(fake.path(&f)).expect("read")))
        .collect()
}

/// A guest whose THP choice files already suit the latency profile (a
/// plain file cannot mimic sysfs `[choice]` files on write).
fn guest() -> Fake {
    let f = Fake::kvm_guest();
    f.put(
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    )
    .put(
        "/sys/kernel/mm/transparent_hugepage/defrag",
        "always defer defer+madvise madvise [never]\n",
    );
    f
}

#[test]
fn apply_then_revert_restores_every_file_exactly() {
    let fake = guest();
    let jdir = TempDir::new("journal");
    let journal = jdir.0.join("sub/journal.json");
    let host = fake.host();
    let before_files = snapshot(&fake);
    let before = audit(&host, Profile::Latency);

    let rep = apply(&host, Profile::Latency, &journal, false).expect("apply");
    assert_eq!(rep.failures(), 0);
    assert_eq!(rep.journal.as_deref(), Some(journal.as_path()));
    let changed: Vec<&str> = rep.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        changed,
        vec![
            "/sys/module/haltpoll/parameters/guest_halt_poll_ns",
            "/proc/sys/kernel/nmi_watchdog",
            "/proc/sys/kernel/timer_migration",
            "/proc/sys/vm/stat_interval",
            "/proc/sys/net/core/busy_poll",
            "/proc/sys/net/core/busy_read",
            "/proc/sys/net/ipv4/tcp_fastopen",
            "/sys/kernel/mm/ksm/run",
            "/proc/sys/vm/swappiness",
            "/proc/sys/vm/dirty_ratio",
            "/proc/sys/vm/dirty_background_ratio",
        ]
    );
    assert!(rep
        .entries
        .iter()
        .all(|e| matches!(&e.state, EntryState::Applied { read_back } if *read_back == e.to)));
    assert_eq!(fake.read("/proc/sys/net/core/busy_poll"), "50");
    assert_eq!(fake.read("/sys/kernel/mm/ksm/run"), "0");
    let not_applied: Vec<&str> = rep.not_applied.iter().map(|n| n.knob.as_str()).collect();
    assert!(
        not_applied.contains(&"mem.balloon") && not_applied.contains(&"virt.hypervisor"),
        "{not_applied:?}"
    );

    // The journal holds every old value and the baseline audit.
    let j = Journal::load(&journal).expect("journal");
    assert_eq!(j.entries.len(), 11);
    assert_eq!(j.baseline, before);
    assert_eq!(j.entries[4].before, "0\n");

    let mid = audit(&host, Profile::Latency);
    for id in [
        "idle.haltpoll",
        "net.busy-poll",
        "mem.ksm",
        "mem.vm-sysctls",
    ] {
        assert_eq!(find(&mid, id).status, Status::Ok, "{id} after apply");
    }
    assert!(!vnio_tune::audit::diff(&before, &mid).is_empty());

    // A second apply must not overwrite the journal of the first.
    match apply(&host, Profile::Latency, &journal, false) {
        Err(TuneError::JournalExists(p)) => assert_eq!(p, journal),
        other => panic!("second apply: {other:?}"),
    }

    let r = revert(&host, &journal).expect("revert");
    assert!(r.clean(), "{:?}", r.remaining);
    assert!(r.entries.iter().all(|(_, a)| *a == RevertAction::Restored));
    assert_eq!(
        snapshot(&fake),
        before_files,
        "every file byte for byte as before"
    );
    assert!(vnio_tune::audit::diff(&before, &r.after).is_empty());
    assert!(!journal.exists());
    assert_eq!(r.archived, Some(reverted_path(&journal)));
    assert!(reverted_path(&journal).exists());

    match revert(&host, &journal) {
        Err(TuneError::NoJournal(_)) => {}
        other => panic!("revert without journal: {other:?}"),
    }
}

#[test]
fn dry_run_changes_nothing_and_writes_no_journal() {
    let fake = Fake::bare_metal();
    let jdir = TempDir::new("dry");
    let journal = jdir.0.join("journal.json");
    let before = snapshot(&fake);
    let rep = apply(&fake.host(), Profile::Latency, &journal, true).expect("dry run");
    assert!(rep.dry_run);
    assert!(rep.journal.is_none());
    assert!(rep.entries.iter().all(|e| e.state == EntryState::Pending));
    assert!(rep
        .entries
        .iter()
        .any(|e| e.path == "/sys/devices/system/cpu/cpu1/cpuidle/state3/disable"));
    assert!(rep
        .not_applied
        .iter()
        .any(|n| n.knob == "idle.pm-qos" && n.kind == vnio_tune::ApplyKind::Process));
    assert_eq!(snapshot(&fake), before);
    assert!(!journal.exists());
}

#[test]
fn bare_metal_apply_and_revert() {
    let fake = Fake::bare_metal();
    fake.put(
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    )
    .put(
        "/sys/kernel/mm/transparent_hugepage/defrag",
        "always defer defer+madvise madvise [never]\n",
    );
    let jdir = TempDir::new("metal");
    let journal = jdir.0.join("journal.json");
    let before = snapshot(&fake);
    let rep = apply(&fake.host(), Profile::Latency, &journal, false).expect("apply");
    assert_eq!(rep.failures(), 0);
    assert_eq!(
        fake.read("/sys/devices/system/cpu/cpufreq/policy0/scaling_governor"),
        "performance"
    );
    assert_eq!(
        fake.read("/sys/devices/system/cpu/cpu0/cpuidle/state3/disable"),
        "1"
    );
    assert_eq!(
        fake.read("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable"),
        "0\n",
        "C1 (2 us) stays enabled"
    );
    let r = revert(&fake.host(), &journal).expect("revert");
    assert!(r.clean(), "{:?}", r.remaining);
    assert_eq!(snapshot(&fake), before);
}

#[test]
fn revert_after_a_crash_mid_apply_restores_pending_entries() {
    let fake = guest();
    let jdir = TempDir::new("crash");
    let journal = jdir.0.join("journal.json");
    let before = snapshot(&fake);
    apply(&fake.host(), Profile::Latency, &journal, false).expect("apply");
    // As if the process died after journaling entries 2.. but before
    // recording their writes: one was written, the others not.
    let mut j = Journal::load(&journal).expect("journal");
    for e in j.entries.iter_mut().skip(2) {
        e.state = EntryState::Pending;
    }
    let unwritten = j.entries[3].path.clone();
    let restore = j.entries[3].before.clone();
    j.save(&journal).expect("save");
    fake.put(&unwritten, restore);
    let r = revert(&fake.host(), &journal).expect("revert");
    assert!(r.clean(), "{:?}", r.remaining);
    let unchanged: Vec<&str> = r
        .entries
        .iter()
        .filter(|(_, a)| *a == RevertAction::Unchanged)
        .map(|(e, _)| e.path.as_str())
        .collect();
    assert_eq!(unchanged, vec![unwritten.as_str()]);
    assert_eq!(snapshot(&fake), before);
}

#[test]
fn revert_reports_what_it_cannot_restore_and_keeps_the_journal() {
    let fake = guest();
    let jdir = TempDir::new("stuck");
    let journal = jdir.0.join("journal.json");
    apply(&fake.host(), Profile::Latency, &journal, false).expect("apply");
    // Someone else changed busy_read meanwhile: revert still restores it.
    fake.put("/proc/sys/net/core/busy_read", "7\n");
    // And ksm/run became impossible to write.
    let ksm = fake.path("/sys/kernel/mm/ksm/run");
    std::fs::remove_file(&ksm).expect("rm");
    std::fs::create_dir(&ksm).expect("dir in place of the knob");
    let r = revert(&fake.host(), &journal).expect("revert runs");
    assert!(!r.clean());
    assert!(
        r.remaining
            .iter()
            .any(|l| l.starts_with("mem.ksm /sys/kernel/mm/ksm/run: cannot write \"1\\n\"")),
        "{:?}",
        r.remaining
    );
    assert!(
        r.remaining
            .iter()
            .any(|l| l.starts_with("mem.ksm: run=1 (running) (differs) -> unreadable")),
        "{:?}",
        r.remaining
    );
    assert_eq!(fake.read("/proc/sys/net/core/busy_read"), "0\n");
    assert!(journal.exists(), "kept for another try");
    // Fixed by hand, a second revert finishes the job.
    std::fs::remove_dir(&ksm).expect("rmdir");
    fake.put("/sys/kernel/mm/ksm/run", "0\n");
    let r = revert(&fake.host(), &journal).expect("second revert");
    assert!(r.clean(), "{:?}", r.remaining);
    assert_eq!(fake.read("/sys/kernel/mm/ksm/run"), "1\n");
}

#[test]
fn nothing_to_apply_writes_no_journal() {
    let fake = guest();
    let jdir = TempDir::new("noop");
    let journal = jdir.0.join("journal.json");
    let rep = apply(&fake.host(), Profile::Balanced, &journal, false).expect("apply");
    assert!(rep.entries.is_empty());
    assert!(rep.journal.is_none());
    assert!(!journal.exists());
}

#[test]
fn revert_refuses_a_journal_made_under_another_root() {
    let fake = guest();
    let other = guest();
    let jdir = TempDir::new("otherroot");
    let journal = jdir.0.join("journal.json");
    apply(&fake.host(), Profile::Latency, &journal, false).expect("apply");
    match revert(&other.host(), &journal) {
        Err(TuneError::JournalRoot { journal_root, .. }) => {
            assert_eq!(journal_root, fake.root().display().to_string())
        }
        other => panic!("revert under another root: {other:?}"),
    }
    assert!(revert(&fake.host(), &journal).expect("revert").clean());
}

#[test]
fn a_corrupt_journal_is_an_error_with_its_cause() {
    let fake = guest();
    let jdir = TempDir::new("corrupt");
    let journal = jdir.0.join("journal.json");
    std::fs::write(&journal, "{ not json").expect("write");
    let e = revert(&fake.host(), &journal).expect_err("corrupt journal");
    let chain = vnio_tune::apply::error_chain(&e);
    assert!(
        chain.starts_with(&format!("journal {}: cannot parse: ", journal.display())),
        "{chain}"
    );
    match apply(&fake.host(), Profile::Latency, &journal, false) {
        Err(TuneError::JournalExists(_)) => {}
        other => panic!("apply over a corrupt journal: {other:?}"),
    }
}

#[test]
fn skipped_knobs_are_neither_read_nor_changed() {
    let fake = guest();
    let jdir = TempDir::new("skip");
    let journal = jdir.0.join("journal.json");
    let skip = vec!["net.busy-poll".to_string(), "mem.ksm".to_string()];
    let a = vnio_tune::audit::audit_skipping(&fake.host(), Profile::Latency, &skip);
    assert_eq!(a.findings.len(), vnio_tune::knobs::catalogue().len() - 2);
    assert!(!a.findings.iter().any(|f| skip.contains(&f.id)));
    let s = a.summary;
    assert_eq!(
        s.ok + s.differs + s.info + s.not_visible + s.unreadable,
        a.findings.len()
    );
    let rep =
        vnio_tune::apply::apply_skipping(&fake.host(), Profile::Latency, &journal, false, &skip)
            .expect("apply");
    assert!(rep
        .entries
        .iter()
        .all(|e| e.knob != "net.busy-poll" && e.knob != "mem.ksm"));
    assert_eq!(fake.read("/proc/sys/net/core/busy_poll"), "0\n");
    assert_eq!(fake.read("/sys/kernel/mm/ksm/run"), "1\n");
    assert_eq!(Journal::load(&journal).expect("journal").skipped, skip);
    let r = revert(&fake.host(), &journal).expect("revert");
    assert!(r.clean(), "{:?}", r.remaining);
    assert!(
        !r.after.findings.iter().any(|f| skip.contains(&f.id)),
        "re-audit with the same selection"
    );
    assert_eq!(vnio_tune::knobs::check_ids(&skip), Ok(()));
    assert!(vnio_tune::knobs::check_ids(&["net.busy_poll".to_string()])
        .expect_err("typo")
        .starts_with("no knob \"net.busy_poll\"; knobs: bios.power, "));
}
