//! What the control plane asks of a worker, and each request's name (the
//! worker says which command held it long).

use super::{PortInfo, WorkerError};
use crate::config::{PolicyUpdate, PortSpec};
use crate::datapath::{Lent, Slot};
use crate::fdb::FdbEntry;
use crate::mesh::{PeerSetup, RemotePort, WorkerId};
use std::sync::mpsc::Sender;

/// Requests to the worker; each carries where to answer (a refusal as a
/// [`WorkerError`]).
// One per control request: the size of the largest variant (a port spec) does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Add a port with this identity.
    Add(
        PortSpec,
        crate::PortId,
        Sender<Result<PortInfo, WorkerError>>,
    ),
    /// Hand a port (with its connection and rings) over to the control plane.
    Detach(String, Sender<Result<Box<Slot>, WorkerError>>),
    /// Take over a port another worker detached.
    Attach(Box<Slot>, Sender<PortInfo>),
    /// Learn where another worker's port is.
    Remote(RemotePort),
    /// Forget another worker's port.
    Unremote(crate::PortId),
    /// Connect to another worker.
    AddPeer(PeerSetup),
    /// Disconnect from a worker that stopped.
    RemovePeer(WorkerId),
    /// Restrict this worker's thread to these CPUs.
    Pin(Vec<usize>, Sender<Result<(), WorkerError>>),
    /// Remove a port by name.
    Del(String, Sender<Result<(), WorkerError>>),
    /// Change a port's latency policies.
    Set(String, PolicyUpdate, Sender<Result<PortInfo, WorkerError>>),
    /// List ports.
    List(Sender<Vec<PortInfo>>),
    /// The FDB.
    Fdb(Sender<Vec<FdbEntry>>),
    /// Lend a vNIC's own uplink receive queues to the worker it runs on.
    Lend(
        crate::PortId,
        crate::netqueue::QueueRequest,
        crate::wire::EthernetAddress,
        Sender<Vec<Lent>>,
    ),
    /// Serve uplink queues another worker lent.
    Hold(Vec<Lent>, Sender<()>),
    /// Give back the lent queues held here (of one uplink, when set).
    Release(Option<crate::PortId>, Sender<Vec<Lent>>),
    /// Take back lent queues; the vNIC they were lent for may be leaving.
    Restore(Vec<Lent>, Option<crate::PortId>, Sender<()>),
    /// Give pair K of a port back to its owner.
    ReturnPair(crate::PortId, usize),
    /// Serve a multiqueue port's pairs on these workers (pair k on the
    /// k-th, None: this one, worker `home`).
    Spread(
        String,
        WorkerId,
        Vec<Option<crate::port::vhost_user::WorkerHandle>>,
        Sender<Result<(), WorkerError>>,
    ),
    /// What BGP EVPN says about a VXLAN port in EVPN mode (by name).
    Evpn(String, Vec<crate::evpn::Change>),
    /// Stop the worker.
    Stop,
}

impl Command {
    /// The request's name, as a log line says it.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Add(..) => "port add",
            Command::Detach(..) => "port detach",
            Command::Attach(..) => "port attach",
            Command::Remote(..) => "remote port",
            Command::Unremote(..) => "remote port removal",
            Command::AddPeer(..) => "peer add",
            Command::RemovePeer(..) => "peer removal",
            Command::Pin(..) => "pin",
            Command::Del(..) => "port del",
            Command::Set(..) => "port set",
            Command::List(..) => "port list",
            Command::Fdb(..) => "fdb read",
            Command::Lend(..) => "queue lending",
            Command::Hold(..) => "lent queues' hold",
            Command::Release(..) => "lent queues' release",
            Command::Restore(..) => "lent queues' return",
            Command::ReturnPair(..) => "queue pair return",
            Command::Spread(..) => "spread",
            Command::Evpn(..) => "evpn routes",
            Command::Stop => "stop",
        }
    }
}
