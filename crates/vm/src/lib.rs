//! vnio guests: the image, the launcher and the latency-sensitivity levels.
//!
//! * [`image`]: a bootable guest built from Debian packages (the
//!   `linux-image-amd64` kernel extracted into the cache, never installed),
//!   an initramfs written here ([`cpio`]) with busybox, the NIC modules in
//!   the order the kernel's `modules.dep` gives ([`modules`]), a static
//!   `vnio` started as agent at boot, and the [`init`] script that reads
//!   its settings from the kernel command line ([`cmdline`]).
//! * [`spec`] is what the user asks for; [`host`] what the host offers;
//!   [`accel`] decides KVM or TCG (probing whether KVM really runs a stock
//!   guest); [`plan`] turns the three into a QEMU command line, host
//!   actions and the list of latency settings with whether each is
//!   honoured; [`libvirt`] renders the same plan as domain XML.
//! * [`launch`] runs the plan (QEMU paused, pinning via [`qmp`], tap and
//!   macvtap through netlink in [`hostnet`], then `cont`) and undoes all of
//!   it on failure, interrupt or stop; [`state`] keeps each VM's directory.
//! * [`migrate`] moves a running guest to a new QEMU (live migration
//!   through the switch).
//! * [`agent`] waits for a guest's agent; [`exec`] runs commands inside a
//!   guest over a virtio-serial channel; [`console`] attaches to its serial
//!   console.
//! * `testkit` (feature `testkit`) is what the guest tests share.
//!
//! Nothing here prints; the CLI renders what these functions return.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod accel;
pub mod addr;
pub mod agent;
pub mod cmdline;
pub mod console;
pub mod cpio;
pub mod debian;
pub mod elf;
mod error;
pub mod exec;
pub mod host;
pub mod hostnet;
pub mod image;
pub mod init;
pub mod launch;
pub mod libvirt;
pub mod migrate;
pub mod modules;
pub mod passthrough;
pub mod plan;
pub mod qmp;
pub mod reach;
pub mod spec;
pub mod state;
pub mod switchport;
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "testkit")]
pub mod testkit;

/// Inside a guest: turns on a multiqueue NIC's queue pairs (`ethtool -L DEV combined N`).
pub use sys::set_combined_channels;
mod tool;

pub use error::{Error, Result};
