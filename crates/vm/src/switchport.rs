//! The VM's side of a vnio switch: which port serves a vhost-user socket,
//! and its latency policy (`port_set`), which the VM's `--latency high`
//! raises and `stop` puts back.

use std::path::Path;

use vnio_switch::config::{Latency, PolicyUpdate};
use vnio_switch::control::{Client, Request};

use crate::error::{Context, Error, Result};

/// A switch port: its name and latency policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Port name.
    pub name: String,
    /// Its latency policy now.
    pub latency: Latency,
    /// The core of its dedicated worker (latency high).
    pub core: Option<usize>,
}

/// The switch port whose vhost-user socket is `socket`.
pub fn port_for_socket(control: &Path, socket: &Path) -> Result<Port> {
    let mut c = Client::connect(control)
        .ctx(|| format!("connecting to the switch at {}", control.display()))?;
    let list = c
        .request(&Request::PortList)
        .ctx(|| "listing the switch's ports".into())?;
    let want = socket.display().to_string();
    let ports = list
        .as_array()
        .ok_or_else(|| Error::Invalid(format!("switch port list is not a list: {list}")))?;
    let port = ports
        .iter()
        .find(|p| p.get("socket").and_then(|s| s.as_str()) == Some(want.as_str()))
        .ok_or_else(|| {
            Error::Invalid(format!(
                "the switch at {} has no port on {}",
                control.display(),
                socket.display()
            ))
        })?;
    let name = port
        .get("name")
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string();
    let policy = port.get("policy");
    let latency = policy
        .and_then(|p| p.get("latency"))
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let core = policy
        .and_then(|p| p.get("core"))
        .and_then(|c| c.as_u64())
        .map(|c| c as usize);
    Ok(Port {
        name,
        latency,
        core,
    })
}

/// Sets port `port`'s latency policy.
pub fn set_latency(control: &Path, port: &str, latency: Latency) -> Result<()> {
    let mut c = Client::connect(control)
        .ctx(|| format!("connecting to the switch at {}", control.display()))?;
    c.request(&Request::PortSet {
        name: port.to_string(),
        set: PolicyUpdate {
            latency: Some(latency),
            ..PolicyUpdate::default()
        },
    })
    .ctx(|| format!("setting switch port {port} to latency {latency}"))?;
    Ok(())
}
