//! `vnio rr --via vhost-user:...`: the switch's poll-mode endpoint as the
//! client's UDP path, against a real `vnio switch` whose tap port carries
//! the host stack, where a real `vnio agent` answers. Needs root (tap).

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// The result document of a run that must have succeeded.
fn doc_of(out: std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what} never came");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn rr_through_the_poll_mode_endpoint() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: the switch's tap port needs root");
        return;
    }
    let n = (std::process::id() % 200) as u8 + 20;
    let tap = format!("vniovia{n}");
    let (host_ip, ep_ip) = (format!("10.232.{n}.1"), format!("10.232.{n}.5"));
    let (dir, _switch) = switch_with(
        "tap",
        "ep",
        &format!("name = \"host\"\nkind = \"tap\"\nifname = \"{tap}\""),
    );
    let mut h = vnio_lab::Handle::root().unwrap();
    wait_for("the switch's tap", || h.link(&tap).ok().flatten().is_some());
    h.add_address(&tap, host_ip.parse().unwrap(), 24).unwrap();
    h.set_up(&tap).unwrap();
    let listen = format!("{host_ip}:7700");
    let _agent = Reaped(
        Command::new(VNIO)
            .args(["agent", "--listen", &listen])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("the agent", || {
        std::net::TcpStream::connect(&listen).is_ok()
    });
    let via = format!("vhost-user:{}/ep.sock,ip={ep_ip}", dir.display());
    let rr = |extra: &[&str]| {
        let out = Command::new(VNIO)
            .args(["rr", "-t", &host_ip, "-p", "udp", "--via", &via])
            .args(["-d", "1s", "--warmup", "200ms", "--json"])
            .args(extra)
            .output()
            .unwrap();
        doc_of(out)
    };
    // Closed loop: every transaction crossed the switch both ways.
    let closed = rr(&[]);
    let m = &closed["iterations"][0]["merged"];
    assert!(m["ops"].as_u64().unwrap() > 100, "{m}");
    assert_eq!(m["lost"], 0, "{m}");
    assert!(m["latency"]["p50_ns"].as_u64().unwrap() > 0, "{m}");
    assert!(
        closed["params"]["rr"]["via"]
            .as_str()
            .unwrap()
            .contains("ep.sock"),
        "the document says which path was used"
    );
    // Open loop on a schedule.
    let open = rr(&["--rate", "500"]);
    let m = &open["iterations"][0]["merged"];
    let achieved = m["achieved_rate"].as_f64().unwrap();
    assert!((achieved - 500.0).abs() < 50.0, "{m}");
    // The switch counted the endpoint's frames on its port.
    let stats = Command::new(VNIO)
        .args(["switch", "port", "stats", "ep", "--json", "--control"])
        .arg(dir.join("ctl.sock"))
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.status.success() && s.contains("\"packets\""), "{s}");
    // Failures are one line: nothing on the socket; TCP asked of it.
    let missing = Command::new(VNIO)
        .args(["rr", "-t", &host_ip, "-p", "udp", "-d", "200ms", "--via"])
        .arg(format!("vhost-user:{}/none.sock,ip={ep_ip}", dir.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{err}");
    assert!(err.contains("none.sock"), "{err}");
    let tcp = Command::new(VNIO)
        .args(["rr", "-t", &host_ip, "--via", &via])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&tcp.stderr);
    assert_eq!(tcp.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A running switch with a vhost-user port on `first.sock` and a second
/// port (`second`, a TOML table body where `{dir}` is the test's
/// directory), its directory fresh for this test.
fn switch_with(tag: &str, first: &str, second: &str) -> (PathBuf, Reaped) {
    let dir = std::env::temp_dir().join(format!("vnio-via-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("switch.toml");
    let d = dir.display();
    let second = second.replace("{dir}", &d.to_string());
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/ctl.sock\"\n\
             [[port]]\nname = \"{first}\"\nkind = \"vhost-user\"\nsocket = \"{d}/{first}.sock\"\n\
             [[port]]\n{second}\n"
        ),
    )
    .unwrap();
    let switch = Reaped(
        Command::new(VNIO)
            .args(["switch", "--config"])
            .arg(&cfg)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    (dir, switch)
}

/// A switch with two vhost-user ports, a.sock and b.sock.
fn two_port_switch(tag: &str) -> (PathBuf, Reaped) {
    switch_with(
        tag,
        "a",
        "name = \"b\"\nkind = \"vhost-user\"\nsocket = \"{dir}/b.sock\"",
    )
}

/// Kernel-bypass on both ends, no root: the rr client's endpoint on one
/// vhost-user port, `vnio endpoint` echoing on another.
#[test]
fn rr_between_two_endpoints() {
    let (dir, _switch) = two_port_switch("two");
    // The responder sleeps on notifications: two busy pollers and the
    // switch would fight over this machine's two CPUs.
    let responder = Command::new(VNIO)
        .arg("endpoint")
        .arg(format!(
            "vhost-user:{}/b.sock,ip=10.233.0.9,wait",
            dir.display()
        ))
        .args(["-d", "20s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Command::new(VNIO)
        .args(["rr", "-p", "udp", "--echo-server", "-t", "10.233.0.9:7"])
        .arg("--via")
        .arg(format!("vhost-user:{}/a.sock,ip=10.233.0.5", dir.display()))
        .args(["-d", "1s", "--warmup", "200ms", "--burst", "2", "--json"])
        .output()
        .unwrap();
    let mut responder = Reaped(responder);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(responder.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let said = {
        let mut s = String::new();
        use std::io::Read;
        let _ = responder.0.stderr.take().unwrap().read_to_string(&mut s);
        s
    };
    let doc = doc_of(out);
    let m = &doc["iterations"][0]["merged"];
    let ops = m["ops"].as_u64().unwrap();
    assert!(ops > 100, "{m}");
    assert_eq!(m["lost"], 0, "{m}");
    assert!(m["agent_cost"].is_null(), "no agent: {m}");
    assert_eq!(doc["params"]["common"]["plain_echo"], true);
    // The responder answered at least every timed transaction and says so.
    let answers: u64 = said
        .split("sent ")
        .nth(1)
        .and_then(|s| s.split(" (").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no summary from the endpoint: {said}"));
    assert!(answers >= ops, "{answers} answers for {ops} transactions");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Both endpoints in the rr thread (`--via-echo`): no second process, no wake-up.
#[test]
fn rr_with_the_responder_in_the_same_thread() {
    let (dir, _switch) = two_port_switch("same");
    let out = Command::new(VNIO)
        .args(["rr", "-p", "udp", "--echo-server", "-t", "10.234.0.9:7"])
        .arg("--via")
        .arg(format!("vhost-user:{}/a.sock,ip=10.234.0.5", dir.display()))
        .arg("--via-echo")
        .arg(format!("vhost-user:{}/b.sock,ip=10.234.0.9", dir.display()))
        .args(["-d", "1s", "--warmup", "200ms", "--json"])
        .output()
        .unwrap();
    let doc = doc_of(out);
    let m = &doc["iterations"][0]["merged"];
    assert!(m["ops"].as_u64().unwrap() > 100, "{m}");
    assert_eq!(m["lost"], 0, "{m}");
    let via = doc["params"]["rr"]["via"].as_str().unwrap();
    assert!(via.contains("echo responder"), "{via}");
    // Without --echo-server the responder has nothing to answer: refused.
    let bad = Command::new(VNIO)
        .args(["rr", "-p", "udp", "-t", "10.234.0.9:7"])
        .arg("--via")
        .arg(format!("vhost-user:{}/a.sock,ip=10.234.0.5", dir.display()))
        .arg("--via-echo")
        .arg(format!("vhost-user:{}/b.sock,ip=10.234.0.9", dir.display()))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}
