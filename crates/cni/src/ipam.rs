//! The delegated IPAM plugin (spec "Delegated plugins"): the executable
//! named by `ipam.type`, found in CNI_PATH, run with this plugin's own
//! environment (CNI_COMMAND as given) and the same configuration on stdin.
//! Its stdout is its result, or its error, which is passed through.

use crate::error::{CniError, IPAM_FAILED};
use crate::result::CniResult;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// One call of the IPAM plugin.
pub struct Ipam<'a> {
    /// Its type (the executable's name).
    pub plugin: String,
    /// CNI_PATH.
    pub path: &'a str,
    /// A file whose presence says the plugin speaks 1.0.0 but not 1.1.0
    /// (learned once, so that later calls do not pay a refused try).
    pub memo: Option<PathBuf>,
}

impl<'a> Ipam<'a> {
    /// The plugin the configuration's `ipam` section names, if any.
    pub fn from_conf(
        ipam: Option<&serde_json::Value>,
        path: &'a str,
        data_dir: &std::path::Path,
    ) -> Result<Option<Self>, CniError> {
        let Some(ipam) = ipam else { return Ok(None) };
        let plugin = ipam
            .get("type")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty() && !t.contains('/'))
            .ok_or_else(|| {
                CniError::new(
                    crate::error::INVALID_CONFIG,
                    "`ipam` needs a `type` (a plugin name)",
                )
            })?;
        Ok(Some(Self {
            plugin: plugin.to_string(),
            path,
            memo: Some(data_dir.join(format!(".ipam-{plugin}-speaks-1.0.0"))),
        }))
    }

    fn find(&self) -> Result<PathBuf, CniError> {
        self.path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(d).join(&self.plugin))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                CniError::new(
                    IPAM_FAILED,
                    format!(
                        "IPAM plugin {} not found in CNI_PATH ({})",
                        self.plugin, self.path
                    ),
                )
            })
    }

    /// Runs `command` (ADD, DEL, CHECK) with `env` overriding the
    /// process's CNI_* variables; the parsed result for ADD.
    ///
    /// An IPAM plugin that does not speak the configuration's 1.1.0 (the
    /// reference plugins before 1.5, as Debian 12 ships them) is asked
    /// again with the configuration marked 1.0.0: the two versions' IPAM
    /// configuration and result are the same, 1.1.0 adds only commands
    /// (GC, STATUS) that this plugin does not delegate.
    pub fn exec(
        &self,
        command: &str,
        env: &[(&str, &str)],
        stdin: &[u8],
    ) -> Result<Option<CniResult>, CniError> {
        let older = || -> Option<Vec<u8>> {
            let mut conf: serde_json::Value = serde_json::from_slice(stdin).ok()?;
            (conf["cniVersion"] == "1.1.0").then(|| {
                conf["cniVersion"] = "1.0.0".into();
                serde_json::to_vec(&conf).unwrap_or_default()
            })
        };
        let as_older = |conf: Vec<u8>| {
            let mut r = self.exec_as_is(command, env, &conf)?;
            if let Some(r) = &mut r {
                r.cni_version = "1.1.0".into();
            }
            Ok(r)
        };
        if let (Some(conf), true) = (older(), self.memo.as_ref().is_some_and(|m| m.exists())) {
            return as_older(conf);
        }
        match self.exec_as_is(command, env, stdin) {
            Err(e) if e.code == crate::error::INCOMPATIBLE_VERSION => {
                let conf = older().ok_or(e)?;
                let r = as_older(conf)?;
                if let Some(m) = &self.memo {
                    let _ = std::fs::write(m, b"");
                }
                Ok(r)
            }
            r => r,
        }
    }

    fn exec_as_is(
        &self,
        command: &str,
        env: &[(&str, &str)],
        stdin: &[u8],
    ) -> Result<Option<CniResult>, CniError> {
        let exe = self.find()?;
        let mut cmd = Command::new(&exe);
        cmd.env("CNI_COMMAND", command)
            .env("CNI_PATH", self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let what = format!("IPAM {} {command}", self.plugin);
        let mut child = cmd.spawn().map_err(|e| CniError::io(what.clone(), &e))?;
        if let Some(mut i) = child.stdin.take() {
            // A plugin that exits without reading closes the pipe: its exit says why.
            let _ = i.write_all(stdin);
        }
        let out = child
            .wait_with_output()
            .map_err(|e| CniError::io(what.clone(), &e))?;
        if !out.status.success() {
            // The plugin's own error result, when it printed one.
            #[derive(serde::Deserialize)]
            struct E {
                code: u32,
                msg: String,
                #[serde(default)]
                details: String,
            }
            return Err(match serde_json::from_slice::<E>(&out.stdout) {
                Ok(e) => CniError::new(e.code, format!("{what}: {}", e.msg)).details(e.details),
                Err(_) => CniError::new(IPAM_FAILED, format!("{what} failed ({})", out.status))
                    .details(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            });
        }
        if command != "ADD" {
            return Ok(None);
        }
        serde_json::from_slice(&out.stdout).map(Some).map_err(|e| {
            CniError::new(
                crate::error::DECODE,
                format!("{what}: cannot decode its result"),
            )
            .details(e.to_string())
        })
    }
}
