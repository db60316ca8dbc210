//! `vnio switch port add` against a running switch: the socket ownership
//! flags give a vhost-user socket its owner, group and mode, as a VMM
//! running as another user needs; an unknown user is a one-line refusal
//! and leaves no port and no socket behind.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use vnio_switch::config::{Config, SwitchConfig};
use vnio_switch::daemon::Switch;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `vnio switch port add NAME --socket SOCK ARGS` on control socket `ctl`.
fn add(ctl: &Path, name: &str, sock: &Path, args: &[&str]) -> Output {
    Command::new(VNIO)
        .args(["switch", "port", "add", name, "--socket"])
        .arg(sock)
        .args(args)
        .arg("--control")
        .arg(ctl)
        .output()
        .unwrap()
}

/// The names of the switch's ports, from `vnio switch port list --json`.
fn ports(ctl: &Path) -> Vec<String> {
    let out = Command::new(VNIO)
        .args(["switch", "port", "list", "--json", "--control"])
        .arg(ctl)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn socket_ownership_flags_reach_the_socket() {
    if !nix::unistd::geteuid().is_root() {
        println!("skip: giving a socket to another user needs root");
        return;
    }
    let dir = Tmp(std::env::temp_dir().join(format!("vnio-port-cli-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let ctl = dir.0.join("ctl.sock");
    let _sw = Switch::start(Config {
        switch: SwitchConfig {
            control: ctl.clone(),
            ..SwitchConfig::default()
        },
        ports: Vec::new(),
    })
    .unwrap();

    let sock = dir.0.join("vm1.sock");
    let flags = [
        "--socket-owner",
        "nobody",
        "--socket-group",
        "nogroup",
        "--socket-mode",
        "0660",
    ];
    let out = add(&ctl, "vm1", &sock, &flags);
    assert!(out.status.success(), "{out:?}");
    let m = std::fs::metadata(&sock).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (nobody.uid.as_raw(), nogroup.gid.as_raw())
    );
    assert_eq!(m.permissions().mode() & 0o7777, 0o660);

    // An unknown user: refused in one line, nothing made.
    let sock2 = dir.0.join("vm2.sock");
    let out = add(
        &ctl,
        "vm2",
        &sock2,
        &["--socket-owner", "no-such-user-vnio"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no-such-user-vnio"), "{err}");
    assert!(!sock2.exists());
    assert_eq!(ports(&ctl), ["vm1"]);
}
