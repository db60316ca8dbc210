//! The measurement commands as a user runs them: the real binary, a real
//! agent process, loopback. Exit codes, one-line errors, Ctrl-C.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// An agent process on a free loopback port, killed on drop.
struct AgentProc {
    child: Child,
    port: u16,
}

impl AgentProc {
    fn start() -> AgentProc {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(VNIO)
            .args(["agent", "--listen", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        AgentProc { child, port }
    }
    fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn rr_json_document_is_complete() {
    let agent = AgentProc::start();
    let out = Command::new(VNIO)
        .args([
            "rr",
            "-t",
            &agent.target(),
            "-d",
            "500ms",
            "--warmup",
            "100ms",
            "-p",
            "udp",
            "--burst",
            "2",
            "--cpu",
            "0",
            "--agent-cpu",
            "0-1",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema"], "vnio.result/2");
    assert_eq!(doc["workload"], "rr");
    assert_eq!(doc["params"]["rr"]["burst"], 2);
    let it = &doc["iterations"][0];
    assert!(it["merged"]["ops"].as_u64().unwrap() > 100);
    assert!(
        it["merged"]["histogram"]["hdr_v2_deflate_b64"]
            .as_str()
            .unwrap()
            .len()
            > 10
    );
    assert!(it["merged"]["latency"]["p9999_ns"].as_u64().unwrap() > 0);
    // Every percentile has its interval next to it: bounds around the
    // estimate where the samples allow, "too few samples" where not.
    let lat = &it["merged"]["latency"];
    let n = lat["count"].as_u64().unwrap();
    let p50 = lat["p50_ns"].as_u64().unwrap();
    let ci = &lat["ci"]["p50"];
    assert_eq!(ci["confidence"], 0.95, "{lat}");
    assert!(ci["lo_ns"].as_u64().unwrap() <= p50, "{lat}");
    assert!(ci["hi_ns"].as_u64().unwrap() >= p50, "{lat}");
    let [j, k] = [&ci["ranks"][0], &ci["ranks"][1]].map(|r| r.as_u64().unwrap());
    assert!(j < n / 2 + 1 && k > n / 2, "{ci} of {n}");
    if n < 36_887 {
        let tail = &lat["ci"]["p9999"];
        assert!(tail["lo_ns"].is_null(), "{tail}");
        assert!(
            tail["too_few"]
                .as_str()
                .unwrap()
                .starts_with("too few samples"),
            "{tail}"
        );
    }
    assert!(doc["environment"]["clocksource"].is_string());
    // Placement asked for and obtained, for both sides.
    let placement = it["placement"].as_array().unwrap();
    let client = placement
        .iter()
        .find(|p| p["role"].as_str().unwrap().starts_with("client"))
        .unwrap();
    assert_eq!(client["requested_cpu"], 0, "{placement:?}");
    assert_eq!(client["pinned"], true);
    assert_eq!(client["ran_on"], 0);
    let agent_side = placement
        .iter()
        .find(|p| p["role"].as_str().unwrap().starts_with("agent"))
        .unwrap();
    assert_eq!(agent_side["requested_cpu"], 0);
}

/// `--ci` measures in rounds until the percentile's interval is narrow
/// enough, or until `--max-duration`, and says which.
#[test]
fn ci_goal_rounds_until_met_or_max_duration() {
    let agent = AgentProc::start();
    let run = |ci: &str, max: &str| -> serde_json::Value {
        let out = Command::new(VNIO)
            .args([
                "rr",
                "-t",
                &agent.target(),
                "-d",
                "300ms",
                "--warmup",
                "50ms",
            ])
            .args(["--ci", ci, "--max-duration", max, "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The median within ±50% over loopback: the first round does it.
    let doc = run("50:50%", "3s");
    let g = &doc["ci_goal"];
    assert_eq!(g["verdict"], "met", "{g}");
    assert_eq!(g["rounds"], 1, "{g}");
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 1);
    assert!(g["relative_half_width"].as_f64().unwrap() <= 0.5, "{g}");
    // p99.99 within ±0.01% is out of reach: three rounds of 300 ms fill
    // the 900 ms, and the result says the goal was not met.
    let doc = run("99.99:0.01%", "900ms");
    let g = &doc["ci_goal"];
    assert_eq!(g["verdict"], "not met at max duration", "{g}");
    assert_eq!(g["met"], false);
    assert_eq!(g["rounds"], 3, "{g}");
    let seconds = g["seconds"].as_f64().unwrap();
    assert!((0.8..=0.95).contains(&seconds), "{g}");
    // A malformed goal is one line, before anything runs.
    let out = Command::new(VNIO)
        .args(["rr", "-t", &agent.target(), "--ci", "99"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected PERCENTILE:WIDTH"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn unreachable_agent_says_one_line_and_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = Command::new(VNIO)
        .args(["rr", "-t", &format!("127.0.0.1:{port}"), "-d", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("cannot reach agent") && lines[0].contains("vnio agent"),
        "{err}"
    );
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    for (args, needle) in [
        (
            vec!["rr", "-t", "127.0.0.1", "--duration", "fast"],
            "not a duration",
        ),
        (vec!["rr", "-t", "127.0.0.1", "-p", "sctp"], "tcp or udp"),
        (
            vec!["rr", "-t", "127.0.0.1", "-p", "udp", "--size", "8"],
            "16-byte header",
        ),
        (
            vec!["stream", "-t", "127.0.0.1", "--rate", "1000"],
            "paces UDP",
        ),
        (
            vec!["agent", "--listen", busy_addr.as_str()],
            "another agent already listens",
        ),
    ] {
        let out = Command::new(VNIO).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// A long rr run against `agent` saving to `out`, already measuring on return.
fn long_rr(agent: &AgentProc, out: &std::path::Path) -> Child {
    let child = Command::new(VNIO)
        .args([
            "rr",
            "-t",
            &agent.target(),
            "-d",
            "30s",
            "--warmup",
            "100ms",
            "-o",
        ])
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child
}

#[test]
fn ctrl_c_prints_and_saves_what_was_measured() {
    let agent = AgentProc::start();
    let out_file = std::env::temp_dir().join(format!("vnio-ctrlc-{}.json", std::process::id()));
    let child = long_rr(&agent, &out_file);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("INTERRUPTED")
            && table.contains("p99.99")
            && table.contains("95% ci all: p50 "),
        "{table}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    std::fs::remove_file(&out_file).unwrap();
    assert_eq!(doc["interrupted"], true);
    assert!(doc["iterations"][0]["merged"]["ops"].as_u64().unwrap() > 0);
}

#[test]
fn agent_process_killed_mid_run_keeps_partial_results() {
    let mut agent = AgentProc::start();
    let out_file = std::env::temp_dir().join(format!("vnio-killed-{}.json", std::process::id()));
    let child = long_rr(&agent, &out_file);
    agent.child.kill().unwrap(); // SIGKILL: no goodbye on any socket
    let _ = agent.child.wait();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("closed"), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("p99.99"),
        "partial results are printed: {table}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    std::fs::remove_file(&out_file).unwrap();
    assert!(doc["iterations"][0]["merged"]["ops"].as_u64().unwrap() > 0);
}

#[test]
fn ping_without_icmp_permission_says_what_to_do() {
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range").unwrap_or_default();
    let unprivileged_ping_allowed = range
        .split_whitespace()
        .map(|v| v.parse::<i64>().unwrap_or(0))
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w[0] <= 65534 && 65534 <= w[1]);
    if !nix::unistd::geteuid().is_root() || !setpriv.exists() || unprivileged_ping_allowed {
        eprintln!("skipped: needs root, setpriv, and ping_group_range excluding gid 65534 (have {range:?})");
        return;
    }
    let out = Command::new(setpriv)
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            VNIO,
            "ping",
            "-t",
            "127.0.0.1",
            "-d",
            "200ms",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no permission for ICMP") && err.contains("ping_group_range"),
        "{err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("error")).count(),
        1,
        "{err}"
    );
}
