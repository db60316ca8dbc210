//! vhost-user virtio-net: the protocol, guest memory, descriptor-chain
//! validation, split and packed rings, and the device a front-end (QEMU, DPDK virtio-user, our
//! poll-mode endpoint) drives.

pub mod announce;
pub mod buffers;
pub mod chain;
pub mod conn;
pub mod device;
mod features;
pub mod log;
pub mod memory;
mod outcome;
mod packed;
mod popped;
pub mod protocol;
pub mod queue;
mod split;
