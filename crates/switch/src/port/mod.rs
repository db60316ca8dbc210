//! Port kinds. Every kind has the same shape: construction from its config,
//! the descriptors the worker watches ([`Watch`]), event handling, the two
//! data-path halves (frames from the port: [`crate::datapath`] pops them; frames
//! to the port: `deliver`), and a reset that costs only this port.

pub mod tap;
pub mod uplink;
pub mod vhost_user;
pub mod vxlan;

use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;

/// What the worker watches for a port, and why (the epoll token's meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Watch {
    /// A listening socket: accept a front-end.
    Listener,
    /// The control connection: read messages.
    Connection,
    /// A queue's kick eventfd.
    Kick(u8),
}

impl Watch {
    /// Packs into the low byte of an epoll token.
    pub fn encode(self) -> u8 {
        match self {
            Watch::Listener => 0,
            Watch::Connection => 1,
            Watch::Kick(q) => 2 + q,
        }
    }

    /// Unpacks [`Watch::encode`].
    pub fn decode(b: u8) -> Self {
        match b {
            0 => Watch::Listener,
            1 => Watch::Connection,
            q => Watch::Kick(q - 2),
        }
    }
}

/// A (descriptor, purpose) pair the worker should poll.
pub type Watched = (RawFd, Watch);

/// How a vhost-user port uses its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SocketMode {
    /// The switch listens; the front-end (QEMU `server=off`, a poll-mode endpoint) connects.
    #[default]
    Server,
    /// The switch connects, and reconnects when the front-end restarts (QEMU `server=on`, DPDK `server=1`).
    Client,
}
