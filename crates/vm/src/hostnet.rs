//! Host interfaces of a VM's NICs, through netlink (crates/topo): macvtaps
//! the launcher creates, taps QEMU creates (up, and enslaved to a bridge,
//! which is created when missing). The kernel removes a QEMU tap with the
//! process; macvtaps and bridges the launcher made are deleted on stop.

use std::fs::File;
use std::path::Path;

use vnio_topo::{Handle, Journal, MacvlanMode};

use crate::addr::{Cidr, Mac};
use crate::error::{Context, Result};
use crate::spec::MacvtapMode;

/// A netlink handle in the root namespace whose link journal lives in the
/// VM's state directory (the state's `owned` list is what stop reads; the
/// journal only satisfies lab's create-then-record discipline).
pub fn handle(state_dir: &Path) -> Result<Handle> {
    Handle::root_with_journal(&Journal::at(state_dir.join("netlink.journal")))
        .ctx(|| "opening a netlink socket".into())
}

fn mode(m: MacvtapMode) -> MacvlanMode {
    match m {
        MacvtapMode::Bridge => MacvlanMode::Bridge,
        MacvtapMode::Vepa => MacvlanMode::Vepa,
        MacvtapMode::Private => MacvlanMode::Private,
        MacvtapMode::Passthru => MacvlanMode::Passthru,
    }
}

/// Creates macvtap `name` on `parent` with the guest's MAC, brings it up
/// and opens its character device for QEMU.
pub fn create_macvtap(
    h: &mut Handle,
    name: &str,
    parent: &str,
    m: MacvtapMode,
    mac: Mac,
) -> Result<File> {
    let link = h
        .add_macvtap(name, parent, mode(m), Some(mac.0))
        .ctx(|| format!("creating macvtap {name} on {parent}"))?;
    // From here the state's `owned` entry is responsible for deletion.
    let name = link.keep();
    h.set_up(&name).ctx(|| format!("bringing {name} up"))?;
    let index = h.index(&name).ctx(|| format!("looking up {name}"))?;
    let dev = format!("/dev/tap{index}");
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev)
        .ctx(|| format!("opening {dev} (macvtap {name})"))
}

/// Whether interface `name` exists.
pub fn exists(h: &mut Handle, name: &str) -> Result<bool> {
    Ok(h.link(name).ctx(|| format!("looking up {name}"))?.is_some())
}

/// Creates bridge `name` (up).
pub fn create_bridge(h: &mut Handle, name: &str) -> Result<()> {
    let link = h
        .add_bridge(name)
        .ctx(|| format!("creating bridge {name}"))?;
    let name = link.keep();
    h.set_up(&name).ctx(|| format!("bringing {name} up"))
}

/// Brings QEMU's tap up, enslaved to `bridge` or with `host_ip` if given.
pub fn attach_tap(
    h: &mut Handle,
    tap: &str,
    bridge: Option<&str>,
    host_ip: Option<Cidr>,
) -> Result<()> {
    if let Some(b) = bridge {
        h.set_controller(tap, b)
            .ctx(|| format!("enslaving {tap} to bridge {b}"))?;
    }
    if let Some(c) = host_ip {
        h.add_address(tap, c.addr, c.prefix)
            .ctx(|| format!("adding {c} to {tap}"))?;
    }
    h.set_up(tap).ctx(|| format!("bringing {tap} up"))
}

/// Deletes `name` if it exists.
pub fn delete(h: &mut Handle, name: &str) -> Result<bool> {
    h.delete_if_exists(name).ctx(|| format!("deleting {name}"))
}
