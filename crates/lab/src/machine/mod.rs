//! Hosts on other machines: a scenario's `[[machine]]` entries, reached
//! with the system's OpenSSH client, where the lab copies its `vnio` and
//! builds the far side of a configuration.
//!
//! How a configuration spans machines:
//!
//! - The network joining the machines (the one SSH goes over) is the
//!   "physical network". Each machine's interface on it is found from the
//!   SSH connection itself (`$SSH_CONNECTION` names both ends' addresses);
//!   the controller's is the one holding the client address.
//! - `wire = "veth"` becomes a plain wire: each host's namespace gets a
//!   macvlan (bridge mode) of its machine's interface, so the two hosts
//!   talk over the physical network with nothing in between.
//! - `wire = "switch"` becomes an overlay: each machine runs a vnio switch
//!   in a wire namespace whose VXLAN port (one VNI per configuration)
//!   sends from a lab-private VTEP address on a macvlan of the machine's
//!   interface, with every other machine's VTEP in its flood list; the
//!   hosts are tap (namespace) or vhost-user (poll-mode) ports of their
//!   machine's switch.
//!
//! Nothing on a machine's own interfaces, addresses or routes changes: the
//! lab adds macvlans and namespaces beside them. Both need the machines on
//! one L2 segment (macvlan frames carry their own MACs).
//!
//! Every remote effect is journalled locally before it is made
//! ([`journal`]: the machine and its scratch directory, before the first
//! command that creates it), and on the machine by the same journal the
//! local lab uses (each far side runs the copied `vnio` with its journal in
//! that scratch directory). `vnio lab clean` runs the far side's `vnio lab
//! clean --all` over SSH and removes the directory, then ends the SSH
//! connection master.
//!
//! Modules: [`spec`] (the scenario's entries and their checks, data of
//! the scenario: `crate::scenario::machines`; SSH itself is
//! `vnio_topo::ssh`), [`journal`] (the local record of remote effects),
//! [`clock`] (offsets between machines), [`side`] (what runs on a
//! machine), [`remote`] (the controller's handle on one machine during a
//! configuration). The controller's own half of a spanning configuration
//! is part of the testbed (`crate::testbed::span`), and machines and
//! clocks in the report are the report's (`crate::report`).

pub mod clock;
pub mod journal;
pub mod remote;
pub mod side;
pub use crate::scenario::machines as spec;

pub use clock::{ClockOffset, ClockSample};
pub use journal::MachineJournal;
pub use spec::MachineSpec;
