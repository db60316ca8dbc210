//! `vnio switch events` against a running switch: a port added and
//! removed shows as one line each (`--json`: the switch's JSON lines),
//! and Ctrl-C (SIGINT) ends the command.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::events::{Streamed, What};
use vnio_switch::port::SocketMode;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");
const T: Duration = Duration::from_secs(10);

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `vnio switch events` on `ctl`, its stdout lines on a channel.
fn events(ctl: &std::path::Path, json: bool) -> (Child, mpsc::Receiver<String>) {
    let mut cmd = Command::new(VNIO);
    cmd.args(["switch", "events", "--control"]).arg(ctl);
    if json {
        cmd.arg("--json");
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn events_are_printed_until_ctrl_c() {
    let dir = Tmp(std::env::temp_dir().join(format!("vnio-events-cli-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let ctl = dir.0.join("ctl.sock");
    let sw = Switch::start(Config {
        switch: SwitchConfig {
            control: ctl.clone(),
            ..SwitchConfig::default()
        },
        ports: Vec::new(),
    })
    .unwrap();
    let (mut human, human_lines) = events(&ctl, false);
    let (mut json, json_lines) = events(&ctl, true);
    // Ports come and go until both have subscribed and printed.
    let deadline = std::time::Instant::now() + T;
    let mut c = Client::connect(sw.control_path()).unwrap();
    let sock = dir.0.join("p9.sock");
    let (mut h, mut j) = (None, None);
    for n in 0.. {
        assert!(
            std::time::Instant::now() < deadline,
            "printed: {h:?}, {j:?}"
        );
        let name = format!("p{n}");
        let spec = PortSpec::vhost_user(&name, &sock, SocketMode::Server);
        c.request(&Request::PortAdd { port: spec }).unwrap();
        c.request(&Request::PortDel { name }).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        h = h.or_else(|| human_lines.try_recv().ok());
        j = j.or_else(|| json_lines.try_recv().ok());
        if h.is_some() && j.is_some() {
            break;
        }
    }
    let (h, j) = (h.unwrap(), j.unwrap());
    assert!(
        h.contains(": port added") || h.contains(": port removed"),
        "{h}"
    );
    let s: Streamed = serde_json::from_str(&j).unwrap();
    assert!(
        matches!(&s, Streamed::Event(e) if matches!(e.what, What::PortAdded | What::PortRemoved)),
        "{j}"
    );
    for child in [&mut human, &mut json] {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let deadline = std::time::Instant::now() + T;
        while child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "Ctrl-C did not end it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
