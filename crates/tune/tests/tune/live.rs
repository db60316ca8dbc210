//! The live machine. The audit runs as whoever runs the tests; as root the
//! tests also audit as a plain user (uid/gid 65534 through `setpriv`) and
//! apply then revert every profile's runtime changes, which must leave the
//! audit identical. Changes are reverted even when an assertion fails, and
//! a journal left by a killed run is reverted first.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;
use vnio_tune::apply::{apply, revert};
use vnio_tune::audit::diff;
use vnio_tune::journal::EntryState;
use vnio_tune::{audit, Host, Profile, Status};

use crate::schema::assert_valid;

/// Live tests must not see each other's changes.
static LIVE: Mutex<()> = Mutex::new(());

const CHILD_ENV: &str = "VNIO_TUNE_TEST_CHILD_AUDIT";
const BEGIN: &str = "@@vnio-tune-audit-begin@@";
const END: &str = "@@vnio-tune-audit-end@@";

fn root() -> bool {
    vnio_tune::sys::euid() == 0
}

fn check_live(a: &vnio_tune::Audit) {
    assert_valid(&serde_json::to_value(a).expect("serialises"));
    assert_eq!(a.findings.len(), vnio_tune::knobs::catalogue().len());
    for f in &a.findings {
        assert!(
            !f.current.contains("internal error"),
            "{}: {}",
            f.id,
            f.current
        );
        match f.status {
            Status::NotVisible => assert!(
                f.current.starts_with("not visible from here: "),
                "{}: {}",
                f.id,
                f.current
            ),
            Status::Unreadable => assert!(
                f.current.starts_with("unreadable: "),
                "{}: {}",
                f.id,
                f.current
            ),
            _ => {}
        }
    }
}

#[test]
fn live_audit_validates_and_marks_what_it_cannot_see() {
    let _g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    for p in Profile::ALL {
        let a = audit(&Host::live(), p);
        check_live(&a);
        assert_eq!(a.euid, vnio_tune::sys::euid());
        assert_eq!(a.root, "/");
        assert!(a.kernel.is_some(), "kernel release readable by anyone");
    }
}

/// Helper run by `live_audit_as_a_plain_user` in a child process.
#[test]
#[ignore = "run by live_audit_as_a_plain_user in a child process"]
fn child_audit_json() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let a = audit(&Host::live(), Profile::Latency);
    println!(
        "{BEGIN}{}{END}",
        serde_json::to_string(&a).expect("serialises")
    );
}

fn find_tool(names: &[&str]) -> Option<PathBuf> {
    names
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .map(Path::to_path_buf)
}

#[test]
fn live_audit_as_a_plain_user() {
    if !root() {
        eprintln!("skipped: not root (the audit already ran as this plain user in live_audit_validates_and_marks_what_it_cannot_see)");
        return;
    }
    let Some(setpriv) = find_tool(&["/usr/bin/setpriv", "/bin/setpriv"]) else {
        eprintln!("skipped: setpriv (util-linux) not installed");
        return;
    };
    let _g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    // A copy of this test binary that uid 65534 can execute.
    let dir = crate::fake::TempDir::new("nobody");
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod dir");
    let exe = dir.0.join("tune-test");
    std::fs::copy(std::env::current_exe().expect("current exe"), &exe).expect("copy test binary");
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args([
            "--ignored",
            "--exact",
            "live::child_audit_json",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .current_dir(&dir.0)
        .output()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let start = stdout.find(BEGIN).expect("child printed an audit") + BEGIN.len();
    let end = stdout[start..].find(END).expect("end marker") + start;
    let doc: Value = serde_json::from_str(&stdout[start..end]).expect("child audit is JSON");
    assert_valid(&doc);
    let user: vnio_tune::Audit = serde_json::from_value(doc).expect("parses as an Audit");
    check_live(&user);
    assert_eq!(user.euid, 65534);
    let qos = user
        .findings
        .iter()
        .find(|f| f.id == "idle.pm-qos")
        .expect("pm-qos finding");
    assert!(
        matches!(qos.status, Status::Unreadable | Status::NotVisible),
        "/dev/cpu_dma_latency is root-only: {}",
        qos.current
    );
    // What the plain user could read, it read as root does.
    let root_audit = audit(&Host::live(), Profile::Latency);
    for u in user
        .findings
        .iter()
        .filter(|f| !f.volatile && f.status != Status::Unreadable)
    {
        let r = root_audit
            .findings
            .iter()
            .find(|f| f.id == u.id)
            .expect("same catalogue");
        if r.status != Status::Unreadable {
            assert_eq!(
                (u.status, &u.current),
                (r.status, &r.current),
                "{} differs between root and a plain user",
                u.id
            );
        }
    }
}

/// Reverts the journal if it is still there when dropped (a failed
/// assertion between apply and revert).
struct RevertOnDrop(PathBuf);

impl Drop for RevertOnDrop {
    fn drop(&mut self) {
        if self.0.exists() {
            match revert(&Host::live(), &self.0) {
                Ok(r) if r.clean() => eprintln!("reverted {} after a failure", self.0.display()),
                Ok(r) => eprintln!(
                    "REVERT INCOMPLETE for {}: {:?}",
                    self.0.display(),
                    r.remaining
                ),
                Err(e) => eprintln!("REVERT FAILED for {}: {e}", self.0.display()),
            }
        }
    }
}

#[test]
fn live_apply_then_revert_leaves_the_audit_identical() {
    if !root() {
        eprintln!("skipped: apply needs root");
        return;
    }
    let _g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let host = Host::live();
    let journal = std::env::temp_dir().join("vnio-tune-live-test-journal.json");
    if journal.exists() {
        let r = revert(&host, &journal).expect("revert a journal left by an earlier run");
        assert!(
            r.clean(),
            "leftover journal could not be reverted: {:?}",
            r.remaining
        );
    }
    for p in Profile::ALL {
        let before = audit(&host, p);
        let guard = RevertOnDrop(journal.clone());
        let rep = apply(&host, p, &journal, false).expect("apply");
        // A kernel may refuse a write the permission bits allow (a sysctl
        // of another user namespace in a container): that is reported, and
        // revert must still leave everything as it was.
        let failed: Vec<&vnio_tune::journal::Entry> = rep
            .entries
            .iter()
            .filter(|e| matches!(e.state, EntryState::Failed { .. }))
            .collect();
        for e in &failed {
            eprintln!(
                "refused by this kernel: {} {}: {:?}",
                e.knob, e.path, e.state
            );
            let EntryState::Failed { error } = &e.state else {
                continue;
            };
            assert!(
                [
                    "Permission denied",
                    "Operation not permitted",
                    "Read-only file system",
                    "Invalid argument"
                ]
                .iter()
                .any(|w| error.contains(w)),
                "unexpected failure: {error}"
            );
        }
        if !rep.entries.is_empty() {
            let mid = audit(&host, p);
            let knobs_failed: Vec<&str> = failed.iter().map(|e| e.knob.as_str()).collect();
            for e in rep
                .entries
                .iter()
                .filter(|e| !knobs_failed.contains(&e.knob.as_str()))
            {
                let f = mid.findings.iter().find(|f| f.id == e.knob).expect("knob");
                assert_eq!(
                    f.status,
                    Status::Ok,
                    "{} after apply: {}",
                    e.knob,
                    f.current
                );
            }
            let r = revert(&host, &journal).expect("revert");
            assert!(r.clean(), "{}: left changed: {:?}", p.name(), r.remaining);
            assert!(!journal.exists());
            let _ = std::fs::remove_file(vnio_tune::journal::reverted_path(&journal));
        }
        let after = audit(&host, p);
        assert_eq!(
            diff(&before, &after),
            Vec::<String>::new(),
            "{}: audit changed",
            p.name()
        );
        drop(guard);
    }
}

#[test]
fn apply_on_the_live_machine_needs_root() {
    let probe = vnio_tune::host::FixedProbe {
        euid: 1000,
        clock_ns: 20.0,
        ..Default::default()
    };
    let host = Host::new("/", std::sync::Arc::new(probe));
    let dir = crate::fake::TempDir::new("needsroot");
    let journal = dir.0.join("journal.json");
    match apply(&host, Profile::Latency, &journal, false) {
        Err(vnio_tune::TuneError::NeedsRoot(1000)) => {}
        Ok(rep) => assert!(rep.entries.is_empty(), "nothing to change, nothing written"),
        Err(e) => panic!("unexpected: {e}"),
    }
    assert!(!journal.exists());
}

#[test]
fn holding_pm_qos_shows_in_the_audit_and_ends_with_the_hold() {
    if !root() {
        eprintln!("skipped: /dev/cpu_dma_latency is root-only");
        return;
    }
    let host = Host::live();
    if !host.exists(vnio_tune::pmqos::DEVICE) {
        eprintln!("skipped: no /dev/cpu_dma_latency");
        return;
    }
    let _g = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let before = vnio_tune::pmqos::current(&host).expect("readable as root");
    let hold = vnio_tune::pmqos::hold(&host, 1).expect("hold");
    let during = vnio_tune::pmqos::current(&host).expect("readable");
    let (holders, _) = vnio_tune::pmqos::holders(&host);
    drop(hold);
    let after = vnio_tune::pmqos::current(&host).expect("readable");
    assert!(
        during <= 1,
        "the aggregate request is the minimum of all requests: {during}"
    );
    let me = std::process::id();
    assert!(
        holders.iter().any(|(pid, _)| *pid == me),
        "this process holds it: {holders:?}"
    );
    assert_eq!(after, before, "the request ended with the hold");
}
