//! The VM's side of a vnio switch: which port serves a vhost-user socket,
//! and (when the switch build has it) the port's latency policy.

use std::path::Path;

use vnio_switch::control::{Client, Request};

use crate::error::{Context, Error, Result};

/// Whether this build's switch has a per-port latency policy. The switch
/// in this workspace does not (yet): `--latency high` lists "switch port
/// latency-high" as not honoured instead of pretending.
pub const HAS_LATENCY_POLICY: bool = false;

/// The name of the switch port whose vhost-user socket is `socket`.
pub fn port_for_socket(control: &Path, socket: &Path) -> Result<Option<String>> {
    let mut c = Client::connect(control)
        .ctx(|| format!("connecting to the switch at {}", control.display()))?;
    let list = c
        .request(&Request::PortList)
        .ctx(|| "listing the switch's ports".into())?;
    let want = socket.display().to_string();
    let ports = list
        .as_array()
        .ok_or_else(|| Error::Invalid(format!("switch port list is not a list: {list}")))?;
    Ok(ports
        .iter()
        .find(|p| p.get("socket").and_then(|s| s.as_str()) == Some(want.as_str()))
        .and_then(|p| p.get("name").and_then(|n| n.as_str()))
        .map(str::to_string))
}

/// Sets the port serving `socket` to latency-high.
pub fn set_latency_high(control: &Path, socket: &Path) -> Result<String> {
    let port = port_for_socket(control, socket)?.ok_or_else(|| {
        Error::Invalid(format!(
            "the switch at {} has no port on {}",
            control.display(),
            socket.display()
        ))
    })?;
    if !HAS_LATENCY_POLICY {
        return Err(Error::Missing(
            "switch port latency-high: not available in this switch build".into(),
        ));
    }
    Ok(port)
}
