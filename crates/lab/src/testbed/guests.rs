//! Guests as hosts: launched together, their NICs on the wire, their
//! agents awaited.

use super::*;
use crate::guest::{Guest, BOOT_TIMEOUT};
use crate::scenario::{HostKind, WireKind};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use vnio_topo::unique_id;

impl Testbed {
    /// Launch a guest for every VM host, all at once (booting is most of
    /// the time: tens of seconds each under TCG), put its NIC on the wire,
    /// and wait until every guest's agent listens. Returns each guest's
    /// description by host name.
    pub(super) fn start_guests(
        &mut self,
        ctx: &BedContext,
        wire: WireKind,
        octet: u8,
    ) -> Result<Vec<(String, GuestDescription)>, BedError> {
        if !self.hosts.iter().any(|h| h.kind == HostKind::Vm) {
            return Ok(Vec::new());
        }
        let Some(kit) = &ctx.guests else {
            return Err(setup(
                "VM hosts",
                "the guest image and QEMU were not prepared for this run",
            ));
        };
        let root = self.scratch.path().join("vm");
        let mut launched = Vec::new();
        for (i, host) in self.hosts.iter_mut().enumerate() {
            if host.kind != HostKind::Vm {
                continue;
            }
            let what = format!("VM host {}", host.name);
            let (nic, place) = guest_nic(wire, host, i, octet)?;
            let nic = format!("{nic},ip={}/{PREFIX}", host.addr)
                .parse()
                .map_err(|e: String| setup(&what, e))?;
            let guest = Guest::launch(kit, &root, &host.name, nic, &ctx.journal, &ctx.stop)
                .map_err(|e| setup(&what, e))?;
            let tap = guest.host_ifname().map(str::to_owned);
            host.guest = Some(guest);
            if let (WireKind::Bridge, Some(tap), Some(wire_ns)) = (wire, tap, &self.wire_ns) {
                let mut root_ns = vnio_topo::Handle::root_with_journal(&ctx.journal)?;
                root_ns.move_to(&tap, wire_ns)?;
                let mut w = wire_ns.handle()?;
                w.set_controller(&tap, "br0")?;
                w.set_up(&tap)?;
            }
            launched.push((i, place));
        }
        let out = self.wait_guests(launched, ctx)?;
        self.check_agents_reach(ctx)?;
        self.description.notes.push(format!(
            "guests: accel {} ({})",
            kit.accel().accel,
            kit.accel().why
        ));
        Ok(out)
    }

    /// Each launched guest `(host index, its place on the wire)` booted,
    /// as described.
    fn wait_guests(
        &mut self,
        launched: Vec<(usize, String)>,
        ctx: &BedContext,
    ) -> Result<Vec<(String, GuestDescription)>, BedError> {
        let mut out = Vec::new();
        for (i, place) in launched {
            let host = &mut self.hosts[i];
            let Some(guest) = host.guest.as_mut() else {
                continue;
            };
            let ready = guest
                .wait_ready(BOOT_TIMEOUT, &ctx.stop)
                .map_err(|e| setup(format!("VM host {}", host.name), e))?;
            out.push((
                host.name.clone(),
                GuestDescription {
                    accel: guest.accel().to_string(),
                    nic: place,
                    ready_s: ready.as_secs_f64(),
                },
            ));
        }
        Ok(out)
    }

    /// The guests' agents answer over the wire, seen from a namespace host
    /// on it (guests on their own are checked by their first workload).
    fn check_agents_reach(&self, ctx: &BedContext) -> Result<(), BedError> {
        if let Some(ns) = self
            .hosts
            .iter()
            .find(|h| !h.remote && h.netns.is_some())
            .and_then(|h| h.netns.as_ref())
        {
            for host in self.hosts.iter().filter(|h| h.kind == HostKind::Vm) {
                let addr = host.agent_addr();
                let stop = ctx.stop.clone();
                let reached = ns.run(move || {
                    let deadline = Instant::now() + AGENT_REACH;
                    while Instant::now() < deadline
                        && !stop.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                            return true;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    false
                })?;
                if !reached {
                    return Err(setup(
                        format!("VM host {}", host.name),
                        format!(
                            "its agent at {addr} does not answer from {} within {} s",
                            ns.name(),
                            AGENT_REACH.as_secs()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Host `i`'s NIC for QEMU and where it is on the wire: a vhost-user
/// port of the switch, or a tap QEMU creates (in the root namespace,
/// where the launcher runs) that moves to the bridge once launched.
fn guest_nic(
    wire: WireKind,
    host: &BedHost,
    i: usize,
    octet: u8,
) -> Result<(String, String), BedError> {
    let what = format!("VM host {}", host.name);
    let mac = host_mac(octet, i);
    Ok(match wire {
        WireKind::Switch => {
            let Some((sock, _)) = &host.vhost_user else {
                return Err(setup(what, "no switch port was made for it"));
            };
            (
                format!("vhost-user:{},mac={mac}", sock.display()),
                format!("vhost-user port h{}", i + 1),
            )
        }
        WireKind::Bridge => {
            let (tap_id, _) = unique_id();
            let tap = format!("vnio{tap_id}v");
            (format!("tap:{tap},mac={mac}"), format!("tap {tap} on br0"))
        }
        WireKind::Veth | WireKind::OvsDpdk | WireKind::Testpmd => {
            return Err(setup(what, "a VM host needs wire = bridge or switch"))
        }
    })
}
