//! The instrument across two network namespaces joined by a veth that the
//! test creates (vnio-lab, netlink) and always removes. Needs root.

use std::process::{Command, Stdio};
use std::time::Duration;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

fn run_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn rr_ping_stream_across_a_veth() {
    if !vnio_lab::is_root() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let pair = vnio_lab::Pair::new().unwrap();
    let names = (
        pair.a().netns().name().to_string(),
        pair.b().netns().name().to_string(),
    );
    let server = pair.b().addr().to_string();
    let mut agent = pair
        .b()
        .command(VNIO)
        .args(["agent", "--listen", &format!("{server}:7700")])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the agent inside its namespace.
    let probe = format!("{server}:7700");
    let ready = pair
        .a()
        .run(move || {
            (0..100).any(|_| {
                std::net::TcpStream::connect(&probe).is_ok() || {
                    std::thread::sleep(Duration::from_millis(20));
                    false
                }
            })
        })
        .unwrap();
    assert!(ready, "agent did not come up in {}", names.1);
    let rr = run_json(pair.a().command(VNIO).args([
        "rr",
        "-t",
        &server,
        "-d",
        "500ms",
        "--warmup",
        "100ms",
        "--sessions",
        "2",
        "--json",
    ]));
    let m = &rr["iterations"][0]["merged"];
    assert!(m["ops"].as_u64().unwrap() > 100, "{m}");
    let udp = run_json(pair.a().command(VNIO).args([
        "rr", "-t", &server, "-p", "udp", "-d", "500ms", "--warmup", "100ms", "--json",
    ]));
    assert!(udp["iterations"][0]["merged"]["ops"].as_u64().unwrap() > 100);
    let ping = run_json(pair.a().command(VNIO).args([
        "ping", "-t", &server, "-d", "500ms", "--warmup", "100ms", "--json",
    ]));
    let pm = &ping["iterations"][0]["merged"];
    assert!(pm["ops"].as_u64().unwrap() > 300, "{pm}");
    assert_eq!(pm["lost"], 0);
    let st = run_json(pair.a().command(VNIO).args([
        "stream", "-t", &server, "-d", "500ms", "--warmup", "100ms", "-R", "--json",
    ]));
    assert!(st["iterations"][0]["merged"]["gbps"].as_f64().unwrap() > 0.01);
    let _ = agent.kill();
    let _ = agent.wait();
    pair.delete().unwrap();
    assert!(
        !vnio_lab::netns_exists(&names.0) && !vnio_lab::netns_exists(&names.1),
        "namespaces removed"
    );
}
