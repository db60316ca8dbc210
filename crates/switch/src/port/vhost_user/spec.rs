//! A vhost-user port's keys (`kind = "vhost-user"`): the socket and who
//! listens on it, the queue pairs and offloads offered to the front-end,
//! and the two unswitched modes; their checks; the opening of the port.

use super::VhostUserPort;
use crate::config::{Latency, PortSpec, SwitchConfig, MAX_QUEUE_PAIRS};
use crate::port::spec::{is_yes, queues, yes, KindKeys};
use crate::port::{Port, SocketMode};
use crate::socket_access::SocketAccess;
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;
use std::path::PathBuf;

/// The keys of a vhost-user port.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VhostUserSpec {
    /// The socket's path.
    pub socket: PathBuf,
    /// Who listens: the switch (server, the default) or the front-end.
    #[serde(default)]
    pub mode: SocketMode,
    /// Server mode: the socket's owner, group and mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_access: Option<SocketAccess>,
    /// Queue pairs offered to the front-end (1-8; more than one is a
    /// multiqueue vNIC).
    #[serde(
        default = "queues::one",
        skip_serializing_if = "queues::is_one",
        deserialize_with = "queues::nonzero"
    )]
    pub queues: NonZeroUsize,
    /// Offer checksum and TSO offloads. Off, the front-end sends and takes
    /// MTU-sized, fully checksummed frames.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub offloads: bool,
    /// Direct mode: bound 1:1 to a receive queue of this uplink port, with
    /// no switching, VLAN or QoS (needs `mac`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<String>,
    /// Cross-connected with this other vhost-user port (added before it):
    /// every frame either sends goes to the other as it is, with no
    /// learning, lookup, flooding, VLAN or QoS (OVS's port-to-port flows,
    /// VPP's L2 cross-connect); the pair lasts while both exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_connect: Option<String>,
}

impl VhostUserSpec {
    /// A port on `socket`, the other keys at their defaults.
    pub fn new(socket: impl Into<PathBuf>, mode: SocketMode) -> Self {
        Self {
            socket: socket.into(),
            mode,
            socket_access: None,
            queues: queues::one(),
            offloads: true,
            direct: None,
            cross_connect: None,
        }
    }

    fn check_direct(&self, port: &PortSpec) -> Result<(), &'static str> {
        if self.direct.is_none() {
            return Ok(());
        }
        if port.mac.is_none() {
            return Err("`direct` needs `mac` (its uplink queue takes frames for it)");
        }
        if port.uplink_queue.is_some() || port.egress.is_set() {
            return Err(
                "a `direct` port takes its own uplink queue and has no share, limit or reservation",
            );
        }
        if port.latency == Latency::High {
            // The uplink it is bound to lives on the shared worker.
            return Err("a `direct` port cannot be latency = \"high\"");
        }
        Ok(())
    }

    fn check_cross_connect(&self, port: &PortSpec) -> Result<(), &'static str> {
        let Some(peer) = &self.cross_connect else {
            return Ok(());
        };
        if *peer == port.name {
            return Err("`cross_connect` names another port");
        }
        if self.direct.is_some()
            || port.vlan.is_some()
            || !port.trunk.is_empty()
            || port.native_vlan.is_some()
            || port.egress.is_set()
        {
            return Err(
                "a `cross_connect` port is not switched: no `direct`, VLAN, share, limit or reservation",
            );
        }
        if port.latency == Latency::High || self.queues.get() > 1 {
            // Both ends must stay on one worker: the shared one.
            return Err("a `cross_connect` port has one queue pair and ordinary latency");
        }
        Ok(())
    }
}

impl KindKeys for VhostUserSpec {
    const NAME: &'static str = "vhost-user";

    fn check(&self, port: &PortSpec) -> Result<(), String> {
        if let Some(a) = &self.socket_access {
            if self.mode != SocketMode::Server {
                return Err("`socket_access` applies to server-mode vhost-user ports (in client mode the front-end makes the socket)".into());
            }
            a.resolve().map_err(|e| format!("socket_access: {e}"))?;
        }
        if self.queues.get() > MAX_QUEUE_PAIRS {
            return Err("`queues` (queue pairs) must be between 1 and 8".into());
        }
        self.check_direct(port)?;
        self.check_cross_connect(port)?;
        Ok(())
    }

    fn open(&self, _port: &PortSpec, sw: &SwitchConfig) -> Result<Port, String> {
        let chain = |e: &dyn std::error::Error| crate::error_chain(e);
        let mut p = VhostUserPort::with_offloads(&self.socket, self.mode, self.offloads)
            .map_err(|e| chain(&e))?;
        if let Some(a) = &self.socket_access {
            // Checked with the spec; a failure drops the port, which
            // removes its socket.
            a.resolve()?
                .apply(&self.socket)
                .map_err(|e| format!("socket_access of {}: {e}", self.socket.display()))?;
        }
        p.set_max_memory(sw.max_guest_memory());
        p.set_queue_pairs(self.queues.get());
        Ok(Port::VhostUser(p))
    }

    fn queues(&self) -> NonZeroUsize {
        self.queues
    }

    fn is_vnic(&self) -> bool {
        true
    }
}
