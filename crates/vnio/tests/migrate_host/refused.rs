//! The migrations to m1 that must be refused, each in one line, the guest
//! running on here and nothing left on m1: without certificates, into a
//! helper directory others can write (a binary planted under the copy's
//! name is replaced, never run), to an m1 without a switch, to an
//! unreachable m1, with certificates of another CA on either end, and when
//! the destination QEMU dies while the guest's memory arrives.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vnio_vm::state::State;
use vnio_vm::testkit::alive;

use super::bed::Bed;
use super::m1::{destination_qemu, finished, ports, set_mode, stream_open};
use crate::{text, M1, VNIO};

/// Refused: no certificates, and no --insecure. Nothing is tried. Then
/// the test's certificates are made.
pub fn without_certificates(bed: &Bed) {
    let (p, old_pid) = (&bed.p, bed.old_pid);
    let t = Instant::now();
    let mut cmd = bed.migrate();
    cmd.arg("--tls-dir").arg(&p.tls);
    let out = finished(cmd);
    let err = text(&out.stderr);
    println!(
        "no certificates, refused in {:?}: {}",
        t.elapsed(),
        err.trim()
    );
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("has no ca-cert.pem, client-cert.pem, client-key.pem"),
        "{err}"
    );
    assert!(
        err.contains(&format!("vnio vm tls init {}", p.tls.display())),
        "the fix: {err}"
    );
    assert!(err.contains("--insecure"), "{err}");
    assert!(alive(old_pid));
    assert!(!p.bin.exists(), "nothing was tried on m1");
    tls_init(&p.tls);
}

/// `vnio vm tls init DIR` for m1 (by name and address).
fn tls_init(dir: &Path) {
    let init = Command::new(VNIO)
        .args(["vm", "tls", "init"])
        .arg(dir)
        .args(["--host", "m1", "--host", M1])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init.stderr));
}

/// A binary planted under the name of vnio's copy on m1.
pub struct Planted {
    /// Where it is.
    copy: String,
    /// The SHA-256 of this vnio (what the copy must end up as).
    hash: String,
    /// What the planted binary would make if it ran.
    ran: PathBuf,
}

/// Refused: vnio's copy would go into a directory anyone can write. Then
/// the directory is private, but a binary is planted under the copy's
/// name: it is replaced by the next migration, and never runs.
pub fn into_a_writable_directory(bed: &Bed) -> Planted {
    let (p, old_pid) = (&bed.p, bed.old_pid);
    std::fs::create_dir(&p.bin).unwrap();
    set_mode(&p.bin, 0o777);
    let out = finished(bed.migrate_tls());
    let err = text(&out.stderr);
    println!("world-writable helper directory: {}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1: ") && err.contains("mode 0777"), "{err}");
    assert!(
        std::fs::read_dir(&p.bin).unwrap().next().is_none(),
        "nothing copied"
    );
    assert!(alive(old_pid));
    set_mode(&p.bin, 0o700);
    let hash = vnio_vm::migrate::helper::sha256_file(Path::new(VNIO)).unwrap();
    let copy = vnio_vm::migrate::helper::copy_path(&p.bin.display().to_string(), &hash);
    let ran = bed.work.join("planted-ran");
    std::fs::write(&copy, format!("#!/bin/sh\ntouch '{}'\n", ran.display())).unwrap();
    set_mode(Path::new(&copy), 0o700);
    Planted { copy, hash, ran }
}

/// Refused: m1 has no switch at that control socket. The guest runs on
/// here, nothing is made on m1; the planted binary was replaced, unrun.
pub fn without_a_switch_on_m1(bed: &Bed, planted: &Planted) {
    let (name, old_pid) = (&bed.name, bed.old_pid);
    let t = Instant::now();
    let out = finished(super::m1::tls_cmd(
        &bed.kit.root.0,
        name,
        &bed.remote_root,
        &bed.m1.join("none.sock"),
    ));
    let err = text(&out.stderr);
    println!("refused in {:?}: {}", t.elapsed(), err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("no switch control socket at"), "{err}");
    assert!(err.contains("m1"), "names the host: {err}");
    assert!(alive(old_pid), "the guest runs on here");
    assert_eq!(State::load(&bed.b).unwrap().pid, Some(old_pid));
    assert!(!bed.remote_root.join(name).exists(), "no state made on m1");
    assert_eq!(ports(&bed.m1_control), ["vx"]);
    bed.ping_b(2);
    assert!(!planted.ran.exists(), "the planted binary ran");
    assert_eq!(
        vnio_vm::migrate::helper::sha256_file(Path::new(&planted.copy)).unwrap(),
        planted.hash,
        "the planted binary was replaced by this vnio"
    );
}

/// Refused: m1 is not reachable (nothing listens on that SSH port).
pub fn to_an_unreachable_m1(bed: &Bed) {
    let mut cmd = bed.migrate_tls();
    cmd.args(["--ssh-option", "Port=2"]);
    let out = finished(cmd);
    let err = text(&out.stderr);
    println!("unreachable: {}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1: probing"), "{err}");
    assert!(alive(bed.old_pid));
}

/// Certificates of another CA, on either end: the handshake fails, in
/// one line; the guest runs on here, nothing is left on m1. First m1
/// shows a server certificate this host's CA did not sign; then this
/// host (trusting both CAs) shows a client certificate m1's CA did not
/// sign: m1 checks the source too (verify-peer).
pub fn with_another_ca(bed: &Bed) {
    let (p, name, old_pid) = (&bed.p, &bed.name, bed.old_pid);
    let other = bed.m1.join("tls-other");
    let mixed = bed.m1.join("tls-mixed");
    tls_init(&other);
    std::fs::create_dir(&mixed).unwrap();
    let both = [p.tls.join("ca-cert.pem"), other.join("ca-cert.pem")]
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<String>();
    std::fs::write(mixed.join("ca-cert.pem"), both).unwrap();
    for f in ["client-cert.pem", "client-key.pem"] {
        std::fs::copy(other.join(f), mixed.join(f)).unwrap();
    }
    for (here, there, what) in [
        (&p.tls, &other, "m1's certificate of another CA"),
        (&mixed, &p.tls, "a client certificate of another CA"),
    ] {
        let mut cmd = bed.migrate();
        cmd.arg("--tls-dir")
            .arg(here)
            .arg("--remote-tls-dir")
            .arg(there);
        let t = Instant::now();
        let out = finished(cmd);
        let err = text(&out.stderr);
        println!("{what}: refused in {:?}: {}", t.elapsed(), err.trim());
        assert!(!out.status.success(), "{what}: {}", text(&out.stdout));
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("m1"), "names the host: {err}");
        assert!(!err.contains("object-add"), "the credentials loaded: {err}");
        assert!(alive(old_pid), "the guest runs on here");
        assert_eq!(State::load(&bed.b).unwrap().pid, Some(old_pid));
        assert!(!bed.remote_root.join(name).exists(), "no state left on m1");
        assert_eq!(ports(&bed.m1_control), ["vx"], "no port left on m1");
    }
    bed.ping_b(2);
}

/// The destination QEMU dies mid-way: refused in one line, the guest
/// runs on here, nothing is left on m1. m1 gets its own image cache
/// (this file system is shared, so the same paths would do): the image
/// is copied there first, and kept (a cache, not the run's).
pub fn when_the_destination_dies(bed: &Bed) {
    let (name, old_pid) = (&bed.name, bed.old_pid);
    let t = Instant::now();
    let image = bed.cached_image();
    let mut cmd = bed.migrate_tls();
    cmd.arg("--remote-cache").arg(bed.cache());
    let run_it = std::thread::spawn(move || finished(cmd));
    let dst =
        destination_qemu(&bed.remote_root, Duration::from_secs(60)).expect("a destination QEMU");
    kill_once_memory_arrives(dst);
    let out = run_it.join().unwrap();
    let err = text(&out.stderr);
    println!(
        "destination killed, refused in {:?}: {}",
        t.elapsed(),
        err.trim()
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1"), "names the host: {err}");
    assert!(err.contains("QEMU"), "says QEMU failed: {err}");
    assert!(alive(old_pid), "the guest runs on here");
    assert_eq!(State::load(&bed.b).unwrap().pid, Some(old_pid));
    assert!(!bed.remote_root.join(name).exists(), "no state left on m1");
    assert_eq!(ports(&bed.m1_control), ["vx"], "no port left on m1");
    assert_eq!(ports(&bed.control), ["p1", "p2", "vx"]);
    for f in ["vmlinuz", "initrd.img", "manifest.json"] {
        assert_eq!(
            std::fs::read(image.join(f)).unwrap(),
            std::fs::read(bed.kit.image.dir.join(f)).unwrap(),
            "{f} copied whole"
        );
    }
    bed.ping_b(2);
}

/// Once the migration stream to destination QEMU `dst` is open, the
/// guest's memory is arriving: freezes the destination there (the
/// transfer takes about a second at least), then kills it.
fn kill_once_memory_arrives(dst: u32) {
    let end = Instant::now() + Duration::from_secs(60);
    while !stream_open(dst) {
        assert!(Instant::now() < end, "no migration stream to {dst}");
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = nix::unistd::Pid::from_raw(dst as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
}
