//! The steps of `vm_migrate_host`: machine m1 and the migrate command
//! ([`m1`]), the test bed of two guests ([`bed`]), the migrations that must
//! be refused ([`refused`]), the ones that happen ([`moved`]), the underlay
//! captured ([`underlay`]) and a guest's agent found without a route
//! ([`no_route`]).

pub mod bed;
pub mod m1;
pub mod moved;
pub mod no_route;
pub mod refused;
pub mod underlay;
