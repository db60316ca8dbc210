//! Ports that outlive the switch process: every port added or changed over
//! the control socket is recorded in a state file, and a switch that
//! starts again (after a crash, a `shutdown` or an upgrade) adds them back
//! with their settings, as OVS keeps its ports in its database. `port del`
//! removes the record. The config file's own ports are the config's: they
//! are never recorded.
//!
//! The file is JSON (`{"version":2,"ports":[PortSpec...]}`), in the order
//! the ports were added (a cross-connected port names a peer added before
//! it), and written atomically: a temporary file beside it, fsynced,
//! renamed over it, the directory fsynced. A crash at any point leaves
//! either the old file or the new one, never a mix.

use crate::config::{PolicyUpdate, PortSpec};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The file format's version. Version 1 wrote `mode` (a vhost-user
/// port's key) on every port; version 2 writes each kind's own keys only.
pub const VERSION: u32 = 2;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm {
    version: u32,
    ports: Vec<PortSpec>,
}

/// The recorded ports and where they are kept.
#[derive(Debug)]
pub struct PortState {
    path: PathBuf,
    ports: Vec<PortSpec>,
}

/// Why a state file was not used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// It could not be read.
    #[error("cannot read the port state {0}")]
    Read(PathBuf, #[source] io::Error),
    /// It is not a state file this switch understands.
    #[error("port state {path} is unusable ({why}); starting with the config's ports only, the file kept as {bad}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// Where it was moved.
        bad: PathBuf,
    },
}

impl PortState {
    /// The state at `path`: empty when there is no file. A file that does
    /// not parse, or has another version, is moved aside to `PATH.bad`
    /// (nothing is lost) and the state starts empty; the error says so,
    /// and the caller logs it and goes on.
    pub fn load(path: &Path) -> (Self, Option<LoadError>) {
        let mut st = Self {
            path: path.to_owned(),
            ports: Vec::new(),
        };
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (st, None),
            Err(e) => return (st, Some(LoadError::Read(path.to_owned(), e))),
        };
        let why = match read(&text) {
            Ok(ports) => {
                st.ports = ports;
                return (st, None);
            }
            Err(why) => why,
        };
        let bad = bad_path(path);
        if let Err(e) = std::fs::rename(path, &bad) {
            return (st, Some(LoadError::Read(path.to_owned(), e)));
        }
        (
            st,
            Some(LoadError::Bad {
                path: path.to_owned(),
                why,
                bad,
            }),
        )
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The recorded ports, in the order they were added.
    pub fn ports(&self) -> &[PortSpec] {
        &self.ports
    }

    /// Records an added port (replacing a record of the same name).
    pub fn add(&mut self, spec: PortSpec) -> io::Result<()> {
        match self.ports.iter_mut().find(|p| p.name == spec.name) {
            Some(p) => *p = spec,
            None => self.ports.push(spec),
        }
        self.save()
    }

    /// Records a change of a port's policies; false (nothing written) when
    /// the port is not recorded.
    pub fn set(&mut self, name: &str, u: &PolicyUpdate) -> io::Result<bool> {
        let Some(p) = self.ports.iter_mut().find(|p| p.name == name) else {
            return Ok(false);
        };
        apply(p, u);
        self.save().map(|()| true)
    }

    /// Forgets a port; false (nothing written) when it was not recorded.
    pub fn remove(&mut self, name: &str) -> io::Result<bool> {
        let before = self.ports.len();
        self.ports.retain(|p| p.name != name);
        if self.ports.len() == before {
            return Ok(false);
        }
        self.save().map(|()| true)
    }

    /// Replaces the whole list (after a restore that dropped some).
    pub fn replace(&mut self, ports: Vec<PortSpec>) -> io::Result<()> {
        self.ports = ports;
        self.save()
    }

    /// Writes the file atomically: temporary file, fsync, rename, fsync of the directory.
    fn save(&self) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(&FileForm {
            version: VERSION,
            ports: self.ports.clone(),
        })?;
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir)?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = File::create(&tmp)?;
        f.write_all(&body)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &self.path)?;
        File::open(&dir)?.sync_all()
    }
}

/// `PATH.bad`.
fn bad_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".bad");
    PathBuf::from(p)
}

/// A policy change, written into the port's spec (so that a restored port
/// has its latest settings).
fn apply(p: &mut PortSpec, u: &PolicyUpdate) {
    if let Some(c) = u.coalesce {
        p.coalesce = Some(c);
    }
    if let Some(l) = u.lro {
        p.lro = Some(l);
    }
    if let Some(l) = u.latency {
        p.latency = l;
    }
    if u.core.is_some() {
        p.core = u.core;
    }
    if let Some(t) = u.tx_poll_budget {
        p.tx_poll_budget = Some(t);
    }
    p.egress = p.egress.updated(&u.egress);
    if let Some(l) = u.fdb_limit {
        p.fdb_limit = Some(l);
    }
}

/// The ports of a state file's `text`, or why it cannot be used.
fn read(text: &[u8]) -> Result<Vec<PortSpec>, String> {
    let mut v: serde_json::Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
    match v.get("version").and_then(serde_json::Value::as_u64) {
        Some(1) => upgrade_v1(&mut v),
        Some(n) if n == u64::from(VERSION) => {}
        Some(n) => return Err(format!("version {n}, this switch reads version {VERSION}")),
        None => return Err("no `version`".into()),
    }
    serde_json::from_value::<FileForm>(v)
        .map(|f| f.ports)
        .map_err(|e| e.to_string())
}

/// A version 1 file as version 2: `mode` leaves the ports that are not
/// vhost-user (version 1 wrote it on every port, "server").
fn upgrade_v1(v: &mut serde_json::Value) {
    v["version"] = VERSION.into();
    let ports = v.get_mut("ports").and_then(serde_json::Value::as_array_mut);
    for p in ports.into_iter().flatten() {
        if let Some(p) = p.as_object_mut() {
            if p.get("kind").and_then(serde_json::Value::as_str) != Some("vhost-user") {
                p.remove("mode");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::SocketMode;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vnio-state-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn records_survive_a_reload_in_order_with_their_changes() {
        let d = dir("order");
        let path = d.join("switch.state");
        let (mut st, e) = PortState::load(&path);
        assert!(e.is_none() && st.ports().is_empty());
        st.add(PortSpec::tap("b", "tb")).unwrap();
        st.add(PortSpec::vhost_user(
            "a",
            d.join("a.sock"),
            SocketMode::Client,
        ))
        .unwrap();
        let u = PolicyUpdate {
            lro: Some(false),
            egress: crate::config::EgressSettings {
                share: Some(7),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(st.set("a", &u).unwrap());
        assert!(!st.set("zz", &u).unwrap());
        let (st2, e) = PortState::load(&path);
        assert!(e.is_none());
        let names: Vec<_> = st2.ports().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(st2.ports()[1].lro, Some(false));
        assert_eq!(st2.ports()[1].egress.share, Some(7));
        let a = st2.ports()[1].kind.vhost_user().unwrap();
        assert_eq!(a.mode, SocketMode::Client);
        let mut st2 = st2;
        assert!(st2.remove("b").unwrap());
        assert!(!st2.remove("b").unwrap());
        assert_eq!(PortState::load(&path).0.ports().len(), 1);
        assert!(!d.join("switch.state.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_bad_file_is_kept_aside_and_the_state_starts_empty() {
        let d = dir("bad");
        let path = d.join("switch.state");
        for body in [&b"{not json"[..], br#"{"version":99,"ports":[]}"#] {
            std::fs::write(&path, body).unwrap();
            let (st, e) = PortState::load(&path);
            assert!(st.ports().is_empty());
            let msg = e.expect("an error").to_string();
            assert!(msg.contains("switch.state.bad"), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg}");
            assert_eq!(std::fs::read(d.join("switch.state.bad")).unwrap(), body);
            assert!(!path.exists());
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_version_1_file_still_loads() {
        // As version 1 wrote them: `mode` on every port.
        let v1 = br#"{"version":1,"ports":[
            {"name":"t","kind":"tap","ifname":"tt","mode":"server","spoof_guard":false},
            {"name":"v","kind":"vhost-user","socket":"/s","mode":"client","spoof_guard":false,"queues":2},
            {"name":"u","kind":"uplink","ifname":"eth9","mode":"server","spoof_guard":false}]}"#;
        let d = dir("v1");
        let path = d.join("switch.state");
        std::fs::write(&path, v1).unwrap();
        let (st, e) = PortState::load(&path);
        assert!(e.is_none(), "{e:?}");
        let kinds: Vec<_> = st.ports().iter().map(|p| p.kind.name()).collect();
        assert_eq!(kinds, ["tap", "vhost-user", "uplink"]);
        let v = st.ports()[1].kind.vhost_user().unwrap();
        assert_eq!((v.mode, v.queues.get()), (SocketMode::Client, 2));
        let _ = std::fs::remove_dir_all(&d);
    }
}
