//! The only place with `unsafe`: thin, audited wrappers over the system
//! calls the switch needs that neither std nor the rust-vmm crates cover.

#![allow(unsafe_code)]

pub mod memfd;
pub mod packet;
pub mod scm;
pub mod tun;
