//! The pure parts of a migration to another machine: the destination's
//! command line and state, its ports, the URIs, the probe, the `ready` and
//! `done` lines, and the destination's refusals (on a private directory,
//! before anything is made).

use std::io::Cursor;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::json;
use vnio_switch::config::Latency;

use super::destination_argv;
use super::incoming::{self, Done, Incoming, IncomingNic, Line, Ready};
use super::to_host::{incoming_script, parse_probe, probe_script};
use crate::accel::{Accel, AccelDecision};
use crate::spec::{Backend, VmSpec};
use crate::state::{Owned, Phase, State};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn source_argv() -> Vec<String> {
    s(&[
        "qemu-system-x86_64",
        "-kernel",
        "/var/cache/vnio/images/k1/vmlinuz",
        "-initrd",
        "/var/cache/vnio/images/k1/initrd.img",
        "-chardev",
        "socket,id=nic0c,path=/sw/p2.sock",
        "-qmp",
        "unix:/run/vnio/vm/b/qmp.sock,server=on,wait=off",
        "-pidfile",
        "/run/vnio/vm/b/qemu.pid",
        "-S",
    ])
}

fn description(control: &Path) -> Incoming {
    let mut spec = VmSpec::new("b");
    spec.nics = vec!["vhost-user:/sw/p2.sock,control=/sw/control.sock"
        .parse()
        .unwrap()];
    Incoming {
        name: "b".into(),
        source: "here".into(),
        argv: source_argv(),
        source_dir: PathBuf::from("/run/vnio/vm/b"),
        control: control.to_path_buf(),
        nics: vec![IncomingNic {
            index: 0,
            socket: PathBuf::from("/sw/p2.sock"),
            port: "p2".into(),
            switch_listens: true,
            latency: Latency::Normal,
            queues: 1,
        }],
        state: State {
            spec,
            phase: Phase::Running,
            pid: Some(41),
            accel: AccelDecision {
                accel: Accel::Tcg,
                why: "test".into(),
            },
            settings: Vec::new(),
            pinning: None,
            host_ifnames: vec![None],
            addrs: vec!["10.0.0.2".into()],
            agent_port: 0,
            agent_token: None,
            image: "k1".into(),
            owned: vec![
                Owned::Socket {
                    path: "/run/vnio/vm/b/extra.sock".into(),
                },
                Owned::SwitchPort {
                    control: "/sw/control.sock".into(),
                    port: "p2".into(),
                    latency: Latency::Normal,
                },
            ],
            launched_ns: 1,
            notes: Vec::new(),
        },
        listen: "10.99.0.2".parse().unwrap(),
        tls: None,
    }
}

#[test]
fn the_hosts_command_line_has_its_directory_and_sockets() {
    let d = description(Path::new("/m1/sw/control.sock"));
    let ports = incoming::new_ports(&d.nics, &d.control, s(&["p2-m1", "vx"]));
    assert_eq!(
        ports,
        vec![("p2-m2".to_string(), PathBuf::from("/m1/sw/p2-m2.sock"))]
    );
    let argv = destination_argv(
        &d.argv,
        &d.source_dir,
        Path::new("/tmp/m1root/b"),
        &[(d.nics[0].socket.clone(), ports[0].1.clone())],
    );
    assert_eq!(argv[6], "socket,id=nic0c,path=/m1/sw/p2-m2.sock");
    assert_eq!(argv[8], "unix:/tmp/m1root/b/qmp.sock,server=on,wait=off");
    assert_eq!(argv[10], "/tmp/m1root/b/qemu.pid");
    assert_eq!(argv[2], "/var/cache/vnio/images/k1/vmlinuz", "images stay");
    assert!(!argv.contains(&"-S".to_string()));
    assert_eq!(&argv[argv.len() - 2..], &s(&["-incoming", "defer"])[..]);
}

#[test]
fn two_nics_on_one_port_base_get_two_names() {
    let mut d = description(Path::new("/c/control.sock"));
    let mut second = d.nics[0].clone();
    second.index = 1;
    d.nics.push(second);
    let names: Vec<String> = incoming::new_ports(&d.nics, &d.control, Vec::new())
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, s(&["p2-m1", "p2-m2"]));
}

#[test]
fn the_hosts_state_names_its_switch_ports_and_pid() {
    let d = description(Path::new("/m1/control.sock"));
    let ports = vec![("p2-m1".to_string(), PathBuf::from("/m1/p2-m1.sock"))];
    let st = incoming::host_state(&d, Path::new("/m1root/b"), &ports, 77, "here's QEMU 41");
    assert_eq!(st.pid, Some(77));
    assert_eq!(st.phase, Phase::Running);
    let Backend::VhostUser {
        socket, control, ..
    } = &st.spec.nics[0].backend
    else {
        panic!("a vhost-user NIC")
    };
    assert_eq!(socket, Path::new("/m1/p2-m1.sock"));
    assert_eq!(control.as_deref(), Some(Path::new("/m1/control.sock")));
    assert_eq!(
        st.owned,
        vec![
            Owned::Socket {
                path: "/m1root/b/extra.sock".into()
            },
            Owned::MadePort {
                control: "/m1/control.sock".into(),
                port: "p2-m1".into()
            },
        ],
        "the source's port stays with the source; the new one is the VM's"
    );
    assert!(st.notes.last().unwrap().contains("here's QEMU 41"));
}

#[test]
fn uris_and_the_listening_port() {
    let v4: IpAddr = "10.99.0.2".parse().unwrap();
    let v6: IpAddr = "fd00::2".parse().unwrap();
    assert_eq!(incoming::send_uri(v4, 4444), "tcp:10.99.0.2:4444");
    assert_eq!(incoming::send_uri(v6, 4444), "tcp:[fd00::2]:4444");
    // The destination listens on the address the source sends to only.
    assert_eq!(incoming::listen_uri(v4), "tcp:10.99.0.2:0");
    assert_eq!(incoming::listen_uri(v6), "tcp:[fd00::2]:0");
    // QEMU 7.2's answer while listening (the port is a string).
    let q = json!({"socket-address": [{"port": "36983", "ipv4": true, "host": "0.0.0.0", "type": "inet"}]});
    assert_eq!(incoming::listening_port(&q), Some(36983));
    assert_eq!(
        incoming::listening_port(&json!({"socket-address": [{"port": 5}]})),
        Some(5)
    );
    assert_eq!(incoming::listening_port(&json!({"status": "setup"})), None);
}

#[test]
fn needed_files_are_the_kernel_initrd_and_disks() {
    let mut argv = source_argv();
    argv.extend(s(&["-drive", "if=virtio,file=/d/disk.qcow2,format=qcow2"]));
    let files: Vec<PathBuf> = incoming::needed_files(&argv)
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(
        files,
        vec![
            PathBuf::from("/var/cache/vnio/images/k1/vmlinuz"),
            PathBuf::from("/var/cache/vnio/images/k1/initrd.img"),
            PathBuf::from("/d/disk.qcow2"),
        ]
    );
}

#[test]
fn ready_and_done_lines_round_trip() {
    let r = Line::Ready(Ready {
        pid: 9,
        port: 40000,
        ports: s(&["p2-m1"]),
    });
    assert_eq!(
        r.render(),
        r#"ready {"pid":9,"port":40000,"ports":["p2-m1"]}"#
    );
    assert_eq!(Line::parse(&r.render()), r);
    let d = Line::Done(Done {
        pid: 9,
        dir: "/r/b".into(),
    });
    assert_eq!(Line::parse(&format!("{}\n", d.render())), d);
    assert_eq!(
        Line::parse("ready {not json"),
        Line::Other("ready {not json".into())
    );
    assert_eq!(Line::parse("hello"), Line::Other("hello".into()));
}

#[test]
fn the_probe_reads_the_server_address_and_the_helpers_directory() {
    let out = "10.99.0.1 52144 10.99.0.2 22\nx86_64\n0\n0 700 directory\n0 755 directory\nnone\n";
    let p = parse_probe(out).unwrap();
    assert_eq!(p.addr, "10.99.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(p.arch, "x86_64");
    assert_eq!(p.survey.chain.len(), 2);
    assert_eq!(p.survey.file, None);
    let p = parse_probe("a 1 fd00::2 22\nx86_64\n0\nmissing\n").unwrap();
    assert_eq!(p.addr, "fd00::2".parse::<IpAddr>().unwrap());
    assert!(p.survey.chain.is_empty());
    assert!(parse_probe("\nx86_64\n0\nnone\n")
        .unwrap_err()
        .contains("SSH_CONNECTION"));
    assert!(parse_probe("x").is_err());
    let script = probe_script("/opt/it's/bin", "/opt/it's/bin/vnio-ab");
    assert!(script.contains(r"'/opt/it'\''s/bin'"), "{script}");
    let hash = "ab".repeat(32);
    let run = incoming_script("/v/vnio-x", &hash, Some(Path::new("/tmp/r d")));
    assert!(
        run.ends_with("exec '/v/vnio-x' vm --state-dir '/tmp/r d' incoming"),
        "{run}"
    );
    assert!(
        run.contains(&format!("[ \"$h\" = {hash} ]")),
        "hashed first: {run}"
    );
    assert!(incoming_script("/v/vnio-x", &hash, None).ends_with("exec '/v/vnio-x' vm incoming"));
}

/// A private directory, removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("vnio-incoming-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn serve(root: &Path, d: &Incoming) -> String {
    let input = Cursor::new(format!("{}\n", serde_json::to_string(d).unwrap()));
    let mut readied = false;
    let e = incoming::serve(root, input, |_| readied = true).unwrap_err();
    assert!(!readied);
    e.to_string()
}

#[test]
fn the_destination_refuses_what_it_cannot_run_and_leaves_nothing() {
    let t = Tmp::new("refuse");
    let root = t.0.join("vms");
    let mut d = description(&t.0.join("control.sock"));
    // The kernel is not on this host.
    let e = serve(&root, &d);
    assert!(
        e.contains("the guest's kernel /var/cache/vnio/images/k1/vmlinuz is not on this host"),
        "{e}"
    );
    // The files are; the switch is not.
    for (i, f) in ["vmlinuz", "initrd.img"].iter().enumerate() {
        let p = t.0.join(f);
        std::fs::write(&p, b"x").unwrap();
        d.argv[2 + 2 * i] = p.display().to_string();
    }
    // TLS, and this host has no server certificate: refused, with the fix.
    d.tls = Some(t.0.join("tls"));
    std::fs::create_dir_all(t.0.join("tls")).unwrap();
    std::fs::write(t.0.join("tls/ca-cert.pem"), b"x").unwrap();
    let e = serve(&root, &d);
    assert!(
        e.starts_with("no TLS certificates for the migration stream here: "),
        "{e}"
    );
    assert!(e.contains("server-cert.pem, server-key.pem"), "{e}");
    assert!(e.contains("vnio vm tls init"), "{e}");
    assert!(!root.exists(), "nothing made");
    d.tls = None;
    let e = serve(&root, &d);
    assert!(e.starts_with("no switch control socket at "), "{e}");
    assert!(!root.exists(), "nothing made");
    // The VM exists here already.
    std::fs::create_dir_all(root.join("b")).unwrap();
    assert!(serve(&root, &d).contains("VM b already exists here"));
    // Not a description.
    let e = incoming::serve(&root, Cursor::new("{}\n"), |_| {}).unwrap_err();
    assert!(
        e.to_string().starts_with("the destination's description"),
        "{e}"
    );
}

/// No QEMU on this host: refused in one line after the ports were made,
/// and they are gone again (a real switch, no root needed).
#[test]
fn a_destination_without_qemu_removes_its_ports() {
    use vnio_switch::config::{Config, SwitchConfig};
    use vnio_switch::control::{Client, Request};
    let t = Tmp::new("noqemu");
    let control = t.0.join("control.sock");
    let _sw = vnio_switch::daemon::Switch::start(Config {
        switch: SwitchConfig {
            control: control.clone(),
            ..SwitchConfig::default()
        },
        ports: Vec::new(),
    })
    .expect("a switch");
    let mut d = description(&control);
    d.argv[0] = t.0.join("no-qemu-system-x86_64").display().to_string();
    for (i, f) in ["vmlinuz", "initrd.img"].iter().enumerate() {
        let p = t.0.join(f);
        std::fs::write(&p, b"x").unwrap();
        d.argv[2 + 2 * i] = p.display().to_string();
    }
    let root = t.0.join("vms");
    let e = serve(&root, &d);
    assert!(e.starts_with("starting the destination "), "{e}");
    assert!(e.contains("no-qemu-system-x86_64"), "{e}");
    let ports = Client::connect(&control)
        .unwrap()
        .request(&Request::PortList)
        .unwrap();
    assert_eq!(ports, json!([]), "the port made is removed");
    assert!(!root.join("b").exists(), "the directory made is removed");
}

#[test]
fn the_image_directory_moves_to_hosts_cache() {
    use super::remote_image::{image_dir, rebased};
    let argv = source_argv();
    let dir = image_dir(&argv).unwrap();
    assert_eq!(dir, Path::new("/var/cache/vnio/images/k1"));
    let moved = rebased(&argv, &dir, Path::new("/m1/cache/images/k1"));
    assert_eq!(moved[2], "/m1/cache/images/k1/vmlinuz");
    assert_eq!(moved[4], "/m1/cache/images/k1/initrd.img");
    assert_eq!(moved[6], argv[6], "nothing else changes");
    assert_eq!(moved.len(), argv.len());
    // Files in two directories are not one image.
    let mut split = argv.clone();
    split[4] = "/elsewhere/initrd.img".into();
    assert!(image_dir(&split)
        .unwrap_err()
        .contains("not all in one image directory"));
    assert!(image_dir(&s(&["qemu"])).is_err());
}
