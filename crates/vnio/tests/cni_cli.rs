//! `vnio cni` and `vnio` installed as `vnio-cni`: the spec's JSON on
//! stdout and the exit code, for the calls that need no switch (VERSION,
//! bad environment, bad configuration, STATUS with no switch). No root.

use std::io::Write;
use std::process::{Command, Stdio};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// Runs `cmd` with CNI_COMMAND `op` (if any) and `stdin`: (exit code, stdout as JSON).
fn call(mut cmd: Command, op: Option<&str>, stdin: &str) -> (i32, serde_json::Value) {
    let mut c = cmd
        .env_remove("CNI_COMMAND")
        .envs(op.map(|o| ("CNI_COMMAND", o)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = c.stdin.take().unwrap().write_all(stdin.as_bytes());
    let o = c.wait_with_output().unwrap();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&o.stdout)));
    (o.status.code().unwrap(), v)
}

fn subcommand() -> Command {
    let mut c = Command::new(VNIO);
    c.arg("cni");
    c
}

#[test]
fn answers_in_the_specs_json_with_its_codes() {
    let (code, v) = call(subcommand(), Some("VERSION"), r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, 0);
    assert_eq!(
        v["supportedVersions"],
        serde_json::json!(["1.0.0", "1.1.0"])
    );
    let (code, v) = call(subcommand(), None, "");
    assert_eq!((code, v["code"].as_u64()), (1, Some(4)), "{v}");
    let (code, v) = call(
        subcommand(),
        Some("ADD"),
        r#"{"cniVersion":"0.3.1","name":"n"}"#,
    );
    assert_eq!((code, v["code"].as_u64()), (1, Some(1)), "{v}");
    let (code, v) = call(subcommand(), Some("ADD"), "{not json");
    assert_eq!((code, v["code"].as_u64()), (1, Some(6)), "{v}");
    let (code, v) = call(
        subcommand(),
        Some("STATUS"),
        r#"{"cniVersion":"1.1.0","name":"n","type":"vnio-cni","control":"/nonexistent/vnio.sock"}"#,
    );
    assert_eq!((code, v["code"].as_u64()), (1, Some(50)), "{v}");
}

#[test]
fn installed_as_vnio_cni_it_is_the_plugin() {
    let dir = std::env::temp_dir().join(format!("vnio-cni-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("vnio-cni");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(VNIO, &link).unwrap();
    let (code, v) = call(
        Command::new(&link),
        Some("VERSION"),
        r#"{"cniVersion":"1.1.0"}"#,
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0);
    assert_eq!(v["cniVersion"], "1.1.0");
}
