//! The only place with `unsafe`: thin, audited wrappers over the system
//! calls the switch needs that neither std nor the rust-vmm crates cover,
//! and the lock-free ring that carries frames between workers.

#![allow(unsafe_code)]

pub mod affinity;
pub mod copy_batch;
pub mod cpu_time;
pub mod eventfd;
pub mod events_io;
pub mod memfd;
pub mod memlock;
pub mod netlink;
pub mod packet;
pub mod peer;
pub mod prefetch;
pub mod regions;
pub mod ring_mem;
pub mod scm;
pub mod sigbus;
pub mod span;
pub mod spsc;
pub mod tsc;
pub mod tun;
pub mod udp;
pub mod wait;
pub mod watchdog;
