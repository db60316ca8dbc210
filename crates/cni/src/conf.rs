//! What a runtime hands the plugin: the CNI_* environment and the network
//! configuration on stdin (spec 1.1.0, "Parameters" and "Network
//! configuration"), with this plugin's own keys.

use crate::error::{CniError, INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV};
use serde::Deserialize;
use std::path::PathBuf;
use vnio_switch::socket_access::{Principal, SocketAccess};

/// The spec versions whose configurations and results this plugin speaks
/// (1.0.0 and 1.1.0 share the result format; GC and STATUS are 1.1.0's).
pub const SUPPORTED_VERSIONS: [&str; 2] = ["1.0.0", "1.1.0"];

/// The operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach it.
    Del,
    /// Is the attachment as ADD left it?
    Check,
    /// Remove what is not in `cni.dev/valid-attachments`.
    Gc,
    /// Can the plugin serve ADDs?
    Status,
    /// Which versions it speaks.
    Version,
}

/// The CNI_* environment.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// CNI_COMMAND.
    pub command: Option<Command>,
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_NETNS.
    pub netns: String,
    /// CNI_IFNAME.
    pub ifname: String,
    /// CNI_ARGS (`K=V;K=V`).
    pub args: String,
    /// CNI_PATH (where delegated plugins are).
    pub path: String,
}

impl Env {
    /// Reads the variables through `var` (the process's environment, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let get = |k: &str| var(k).unwrap_or_default();
        let command = match get("CNI_COMMAND").as_str() {
            "ADD" => Some(Command::Add),
            "DEL" => Some(Command::Del),
            "CHECK" => Some(Command::Check),
            "GC" => Some(Command::Gc),
            "STATUS" => Some(Command::Status),
            "VERSION" => Some(Command::Version),
            "" => None,
            other => {
                return Err(CniError::new(
                    INVALID_ENV,
                    format!("unknown CNI_COMMAND {other}"),
                ))
            }
        };
        Ok(Self {
            command,
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            args: get("CNI_ARGS"),
            path: get("CNI_PATH"),
        })
    }

    /// The variables an attachment command needs: present and sane.
    pub fn require_attachment(&self, netns_needed: bool) -> Result<(), CniError> {
        let bad = |m: &str| Err(CniError::new(INVALID_ENV, m));
        if self.container_id.is_empty() {
            return bad("CNI_CONTAINERID is required");
        }
        if self.ifname.is_empty()
            || self.ifname.len() > 15
            || self.ifname.contains(['/', ' ', '\0', ':'])
        {
            return bad("CNI_IFNAME must be an interface name of 1-15 characters");
        }
        if netns_needed && self.netns.is_empty() {
            return bad("CNI_NETNS is required");
        }
        Ok(())
    }

    /// One CNI_ARGS value.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// What the port is.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A tap interface in the pod's namespace.
    #[default]
    Tap,
    /// A vhost-user socket in a directory shared with the pod.
    VhostUser,
}

/// Who listens on a vhost-user socket: the switch (server) or the pod's VMM.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The switch listens; the pod connects.
    #[default]
    Server,
    /// The pod listens; the switch connects (and reconnects).
    Client,
}

/// Capabilities the runtime fills in (`runtimeConfig`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuntimeConfig {
    /// Where to write the device-info file (k8snetworkplumbingwg device-info spec).
    #[serde(rename = "CNIDeviceInfoFile", default)]
    pub device_info_file: Option<PathBuf>,
    /// The interface's MAC (the `mac` capability).
    #[serde(default)]
    pub mac: Option<String>,
}

/// One entry of `cni.dev/valid-attachments`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Attachment {
    /// The container.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Its interface.
    pub ifname: String,
}

/// The network configuration on stdin (unknown keys are allowed: runtimes add their own).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    /// The spec version of this configuration.
    pub cni_version: String,
    /// The network's name.
    #[serde(default)]
    pub name: String,
    /// The switch's control socket.
    #[serde(default = "default_control")]
    pub control: PathBuf,
    /// tap or vhost-user.
    #[serde(default)]
    pub kind: Kind,
    /// tap: the interface's MTU.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// The interface's MAC (the runtime's `mac` capability wins).
    #[serde(default)]
    pub mac: Option<String>,
    /// Access VLAN of the port.
    #[serde(default)]
    pub vlan: Option<u16>,
    /// vhost-user: queue pairs.
    #[serde(default)]
    pub queues: Option<std::num::NonZeroUsize>,
    /// vhost-user: who listens (the switch's side).
    #[serde(default)]
    pub mode: Mode,
    /// vhost-user: under which each pod gets its own directory (default:
    /// `pods` beside the control socket, inside the switch's socket_dir).
    #[serde(default)]
    pub socket_dir: Option<PathBuf>,
    /// vhost-user: the user owning the socket and the pod's directory (a
    /// name or a uid), so that a VMM running as that user can connect.
    #[serde(default, alias = "socket_owner")]
    pub socket_owner: Option<Principal>,
    /// vhost-user: their group (a name or a gid).
    #[serde(default, alias = "socket_group")]
    pub socket_group: Option<Principal>,
    /// vhost-user: the socket's mode in octal ("0660"); the directory's
    /// follows it.
    #[serde(default, alias = "socket_mode")]
    pub socket_mode: Option<String>,
    /// Where the plugin keeps its attachment records (default /var/lib/cni/vnio).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The delegated IPAM plugin's section (its `type` names it).
    #[serde(default)]
    pub ipam: Option<serde_json::Value>,
    /// Capabilities filled in by the runtime.
    #[serde(default)]
    pub runtime_config: RuntimeConfig,
    /// GC: the attachments to keep.
    #[serde(rename = "cni.dev/valid-attachments", default)]
    pub valid_attachments: Option<Vec<Attachment>>,
    /// CHECK: the result of the ADD.
    #[serde(default)]
    pub prev_result: Option<serde_json::Value>,
}

fn default_control() -> PathBuf {
    PathBuf::from("/run/vnio/switch.sock")
}

impl NetConf {
    /// Parses and checks stdin.
    pub fn parse(stdin: &[u8]) -> Result<Self, CniError> {
        let c: NetConf = serde_json::from_slice(stdin).map_err(|e| {
            CniError::new(
                crate::error::DECODE,
                "cannot decode the network configuration",
            )
            .details(e.to_string())
        })?;
        if !SUPPORTED_VERSIONS.contains(&c.cni_version.as_str()) {
            return Err(CniError::new(
                INCOMPATIBLE_VERSION,
                format!(
                    "cniVersion {} is not supported (supported: {})",
                    c.cni_version,
                    SUPPORTED_VERSIONS.join(", ")
                ),
            ));
        }
        if c.kind == Kind::Tap && (c.queues.is_some() || c.socket_dir.is_some()) {
            return Err(CniError::new(
                INVALID_CONFIG,
                "`queues` and `socketDir` are for kind vhost-user",
            ));
        }
        if c.kind == Kind::Tap && c.socket_access().is_some() {
            return Err(CniError::new(
                INVALID_CONFIG,
                "`socketOwner`, `socketGroup` and `socketMode` are for kind vhost-user",
            ));
        }
        if c.kind == Kind::VhostUser && c.mtu.is_some() {
            return Err(CniError::new(
                INVALID_CONFIG,
                "`mtu` is for kind tap (a VM sets its own)",
            ));
        }
        Ok(c)
    }

    /// The MAC to give the interface, when one is asked for.
    pub fn mac(&self) -> Result<Option<[u8; 6]>, CniError> {
        let Some(m) = self.runtime_config.mac.as_ref().or(self.mac.as_ref()) else {
            return Ok(None);
        };
        parse_mac(m)
            .map(Some)
            .ok_or_else(|| CniError::new(INVALID_CONFIG, format!("mac {m} is not a MAC address")))
    }

    /// The vhost-user socket's owner, group and mode, when any is asked for.
    pub fn socket_access(&self) -> Option<SocketAccess> {
        let a = SocketAccess {
            owner: self.socket_owner.clone(),
            group: self.socket_group.clone(),
            mode: self.socket_mode.clone(),
        };
        (a != SocketAccess::default()).then_some(a)
    }

    /// Where the attachment records are.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/cni/vnio"))
    }

    /// Under which the pods' socket directories are.
    pub fn socket_dir(&self) -> PathBuf {
        self.socket_dir.clone().unwrap_or_else(|| {
            self.control
                .parent()
                .unwrap_or(std::path::Path::new("/run/vnio"))
                .join("pods")
        })
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// The other way.
pub fn mac_text(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_and_are_checked() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"vnio-cni","kind":"vhost-user","queues":2,
                "mode":"client","runtimeConfig":{"CNIDeviceInfoFile":"/x/y.json"},"other":1}"#,
        )
        .unwrap();
        assert_eq!(c.kind, Kind::VhostUser);
        assert_eq!(c.mode, Mode::Client);
        assert_eq!(c.socket_dir(), PathBuf::from("/run/vnio/pods"));
        assert_eq!(
            c.runtime_config.device_info_file.as_deref(),
            Some(std::path::Path::new("/x/y.json"))
        );
        let e = NetConf::parse(br#"{"cniVersion":"0.2.0","name":"n"}"#).unwrap_err();
        assert_eq!(e.code, INCOMPATIBLE_VERSION);
        let e = NetConf::parse(br#"{"cniVersion":"1.0.0","kind":"tap","queues":2}"#).unwrap_err();
        assert_eq!(e.code, INVALID_CONFIG);
        let e = NetConf::parse(br#"{"cniVersion":"1.0.0","kind":"vhost-user","queues":0}"#)
            .unwrap_err();
        assert_eq!(e.code, crate::error::DECODE);
        assert!(e.details.contains("nonzero"), "{}", e.details);
        assert_eq!(NetConf::parse(b"{").unwrap_err().code, crate::error::DECODE);
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","mac":"02:00:00:00:00:01","runtimeConfig":{"mac":"02:aa:00:00:00:02"}}"#,
        )
        .unwrap();
        assert_eq!(c.mac().unwrap(), Some([2, 0xaa, 0, 0, 0, 2]));
        assert_eq!(mac_text([2, 0xaa, 0, 0, 0, 2]), "02:aa:00:00:00:02");
        assert_eq!(parse_mac("02:00:00:00:00"), None);
    }

    #[test]
    fn env_is_read_and_checked() {
        let vars = |k: &str| match k {
            "CNI_COMMAND" => Some("ADD".to_string()),
            "CNI_CONTAINERID" => Some("abc".into()),
            "CNI_IFNAME" => Some("eth0".into()),
            "CNI_ARGS" => Some("IgnoreUnknown=1;K8S_POD_UID=u1".into()),
            _ => None,
        };
        let e = Env::from_vars(vars).unwrap();
        assert_eq!(e.command, Some(Command::Add));
        assert_eq!(e.arg("K8S_POD_UID"), Some("u1"));
        assert!(e.require_attachment(false).is_ok());
        assert_eq!(e.require_attachment(true).unwrap_err().code, INVALID_ENV);
        let bad = Env::from_vars(|k| (k == "CNI_COMMAND").then(|| "FOO".into())).unwrap_err();
        assert_eq!(bad.code, INVALID_ENV);
    }
}
