//! A hand-driven vhost-user front-end, shared by the switch's integration
//! tests (`tests/common` re-exports it) and its examples (the soak's
//! `hostile_frontend`, `ring_cost`): every request sent explicitly
//! ([`raw`]), a packed ring's driver side ([`packed`]), and the hostile
//! cases a switch must survive ([`attacks`]). A crate of its own so tests
//! and examples share it without `#[path]`; not published.

pub mod attacks;
pub mod packed;
pub mod raw;

use vnio_switch::wire::EthernetAddress;

/// The test address of endpoint `n`.
pub fn mac(n: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, n])
}
