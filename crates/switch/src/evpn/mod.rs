//! BGP EVPN for VXLAN ports, through FRR (unchanged: vnio speaks no BGP).
//!
//! Per EVPN port, vnio keeps a shadow of the VNI in the kernel of its
//! network namespace ([`shadow`]): a bridge, a `vxlan` device with the
//! port's VNI and local address (on another UDP port, so the kernel never
//! takes vnio's datagrams) and an access port. FRR's zebra sees the VNI
//! and, with `advertise-all-vni`:
//! - advertises as type-2 routes the addresses in the bridge's FDB on the
//!   access port: vnio puts there, as `static` entries, the addresses it
//!   learned on its local ports, and takes them away when they leave
//!   (`announce.rs`);
//! - installs remote type-2 routes as FDB entries on the `vxlan` device
//!   (`dst` the VTEP) and type-3 routes as all-zero entries (the flood
//!   list). vnio follows them over netlink (`netlink.rs`) and hands them to
//!   the port's worker ([`Change`]): addresses pinned behind their VTEP,
//!   the flood list, the VTEPs the port hears.
//!
//! This runs on a control-plane thread per port ([`agent`]); the worker
//! applies changes between rounds. When it cannot follow (FRR gone, a
//! netlink overrun) it says so in one line, dumps again, and the port
//! keeps forwarding on what it last knew.

use crate::wire::EthernetAddress;
use std::net::Ipv4Addr;

pub mod agent;
mod announce;
mod netlink;
pub mod shadow;

/// One change to an EVPN port's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `mac` is behind `vtep` (a type-2 route, or a move).
    Pin {
        /// The address.
        mac: EthernetAddress,
        /// The VTEP.
        vtep: Ipv4Addr,
    },
    /// `mac` is no longer behind `vtep` (withdrawn).
    Unpin {
        /// The address.
        mac: EthernetAddress,
        /// The VTEP.
        vtep: Ipv4Addr,
    },
    /// The flood list (type-3 routes) and every VTEP EVPN knows.
    Vteps {
        /// VTEPs that get broadcast, multicast and unknown unicast.
        flood: Vec<Ipv4Addr>,
        /// Every VTEP with a route for the VNI: the only ones heard.
        known: Vec<Ipv4Addr>,
    },
}
