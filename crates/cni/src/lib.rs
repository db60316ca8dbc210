//! vnio's CNI plugin (CNI spec 1.1.0): a pod's interface as a port of the
//! vnio switch, made and removed over the switch's control socket.
//!
//! - `"kind": "tap"`: a tap port created inside CNI_NETNS as CNI_IFNAME
//!   (persistent, so it keeps its addresses across a switch restart), with
//!   the MTU, MAC and VLAN asked for and the addresses and routes of the
//!   delegated IPAM plugin.
//! - `"kind": "vhost-user"`: a vhost-user port whose socket is in a
//!   directory of the pod's own, and the device-info file a VM launcher in
//!   the pod reads.
//!
//! [`run`] takes the CNI_* environment and stdin and returns what to print
//! and the exit code; `vnio cni` (or `vnio` installed as `vnio-cni`) does
//! only that. docs/cluster.md describes the configuration.

pub mod attach;
pub mod conf;
pub mod error;
pub mod ipam;
pub mod netns;
pub mod record;
pub mod result;
pub mod switch;

use conf::{Command, Env, NetConf, SUPPORTED_VERSIONS};
use error::CniError;

/// What the plugin prints on stdout, and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// 0 on success, 1 with an error result on stdout.
    pub code: i32,
    /// The result, the error result, or nothing (DEL, CHECK, GC, STATUS).
    pub stdout: String,
}

/// Runs one command.
pub fn run(env: Result<Env, CniError>, stdin: &[u8]) -> Outcome {
    // The error's version is the configuration's when it says one.
    let version = serde_json::from_slice::<serde_json::Value>(stdin)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .filter(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".into());
    match env.and_then(|e| dispatch(&e, stdin)) {
        Ok(out) => Outcome {
            code: 0,
            stdout: out,
        },
        Err(e) => {
            let mut v = serde_json::to_value(&e).unwrap_or_default();
            v["cniVersion"] = version.into();
            Outcome {
                code: 1,
                stdout: v.to_string(),
            }
        }
    }
}

fn dispatch(env: &Env, stdin: &[u8]) -> Result<String, CniError> {
    let Some(cmd) = env.command else {
        return Err(CniError::new(
            error::INVALID_ENV,
            "CNI_COMMAND is not set: this is a CNI plugin, run by a container runtime",
        ));
    };
    if cmd == Command::Version {
        return Ok(serde_json::json!({
            "cniVersion": "1.1.0",
            "supportedVersions": SUPPORTED_VERSIONS,
        })
        .to_string());
    }
    let conf = NetConf::parse(stdin)?;
    if matches!(cmd, Command::Gc | Command::Status) && conf.cni_version != "1.1.0" {
        return Err(CniError::new(
            error::INCOMPATIBLE_VERSION,
            "GC and STATUS need cniVersion 1.1.0",
        ));
    }
    match cmd {
        Command::Add => {
            let r = attach::add(env, &conf, stdin)?;
            serde_json::to_string(&r).map_err(|e| CniError::io("encoding the result", &e))
        }
        Command::Del => attach::del(env, &conf, stdin).map(|()| String::new()),
        Command::Check => attach::check(env, &conf, stdin).map(|()| String::new()),
        Command::Gc => attach::gc(&conf).map(|()| String::new()),
        Command::Status => switch::answers(&conf.control).map(|()| String::new()),
        Command::Version => unreachable!("answered above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(cmd: &str) -> Result<Env, CniError> {
        let cmd = cmd.to_string();
        Env::from_vars(move |k| (k == "CNI_COMMAND").then(|| cmd.clone()))
    }

    #[test]
    fn version_and_errors_are_the_specs_json() {
        let o = run(env("VERSION"), br#"{"cniVersion":"1.0.0"}"#);
        assert_eq!(o.code, 0);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(
            v["supportedVersions"],
            serde_json::json!(["1.0.0", "1.1.0"])
        );
        let o = run(env("ADD"), br#"{"cniVersion":"1.0.0","name":"n"}"#);
        assert_eq!(o.code, 1);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["code"], error::INVALID_ENV);
        assert_eq!(v["cniVersion"], "1.0.0");
        let o = run(
            env("STATUS"),
            br#"{"cniVersion":"1.1.0","name":"n","control":"/nonexistent/x.sock"}"#,
        );
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!((o.code, v["code"].as_u64()), (1, Some(50)), "{v}");
        let o = run(env(""), b"{}");
        assert_eq!(o.code, 1);
        let o = run(env("GC"), br#"{"cniVersion":"1.0.0","name":"n"}"#);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["code"], error::INCOMPATIBLE_VERSION);
    }
}
