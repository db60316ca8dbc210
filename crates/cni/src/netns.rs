//! The pod's side of a tap attachment, through rtnetlink inside the pod's
//! namespace (vnio-topo): MTU, MAC, up, the IPAM plugin's addresses and
//! routes; what CHECK looks at; what DEL removes when the switch could not.

use crate::error::{CniError, CHECK_FAILED};
use crate::result::{parse_cidr, CniResult};
use std::net::IpAddr;
use std::path::Path;
use vnio_topo::Handle;

fn handle(netns: &str) -> Result<Handle, CniError> {
    Handle::in_netns_file(Path::new(netns))
        .map_err(|e| CniError::io(format!("entering {netns}"), &e))
}

/// Sets the interface up with what was asked and what IPAM gave; returns its MAC.
pub fn configure(
    netns: &str,
    ifname: &str,
    mtu: Option<u32>,
    mac: Option<[u8; 6]>,
    ipam: &CniResult,
) -> Result<Option<[u8; 6]>, CniError> {
    let mut h = handle(netns)?;
    let io = |what: &str, e: &dyn std::error::Error| {
        CniError::io(format!("{what} {ifname} in {netns}"), e)
    };
    if let Some(m) = mtu {
        h.set_mtu(ifname, m)
            .map_err(|e| io("setting the MTU of", &e))?;
    }
    if let Some(m) = mac {
        h.set_mac(ifname, m)
            .map_err(|e| io("setting the MAC of", &e))?;
    }
    h.set_up(ifname).map_err(|e| io("setting up", &e))?;
    let have = h
        .addresses(ifname)
        .map_err(|e| io("listing addresses of", &e))?;
    for ip in &ipam.ips {
        let c = parse_cidr(&ip.address).ok_or_else(|| {
            CniError::new(
                crate::error::DECODE,
                format!("IPAM address {} is not a CIDR", ip.address),
            )
        })?;
        if !have.contains(&c) {
            h.add_address(ifname, c.addr, c.prefix)
                .map_err(|e| io(&format!("adding {} to", ip.address), &e))?;
        }
    }
    for r in &ipam.routes {
        let dst = parse_cidr(&r.dst).ok_or_else(|| {
            CniError::new(
                crate::error::DECODE,
                format!("IPAM route {} is not a CIDR", r.dst),
            )
        })?;
        let gw = gateway(r.gw.as_deref(), dst.addr, ipam);
        let added = if dst.prefix == 0 && gw.is_some() {
            h.add_default_route(gw.unwrap_or(dst.addr))
        } else {
            h.add_route(dst, gw, Some(ifname))
        };
        // Already there (ADD repeated after a crash): fine.
        if let Err(e) = added {
            if !vnio_switch::error_chain(&e).contains("exists") {
                return Err(io(&format!("adding route {} via", r.dst), &e));
            }
        }
    }
    Ok(h.link(ifname)
        .map_err(|e| io("looking up", &e))?
        .and_then(|l| l.mac))
}

/// A route's next hop: its own, else the gateway of an address of the
/// destination's family (the spec: "a default gateway is assumed").
fn gateway(gw: Option<&str>, dst: IpAddr, ipam: &CniResult) -> Option<IpAddr> {
    if let Some(g) = gw.and_then(|g| g.parse().ok()) {
        return Some(g);
    }
    ipam.ips
        .iter()
        .filter_map(|i| i.gateway.as_deref()?.parse::<IpAddr>().ok())
        .find(|g| g.is_ipv4() == dst.is_ipv4())
}

/// CHECK: the interface is there, up, with the addresses of `prev`.
pub fn check(netns: &str, ifname: &str, prev: &CniResult) -> Result<(), CniError> {
    let mut h = handle(netns)?;
    let fail = |m: String| CniError::new(CHECK_FAILED, m);
    let link = h
        .link(ifname)
        .map_err(|e| CniError::io(format!("looking up {ifname}"), &e))?
        .ok_or_else(|| fail(format!("{ifname} is not in {netns}")))?;
    if !link.up {
        return Err(fail(format!("{ifname} in {netns} is down")));
    }
    let have = h
        .addresses(ifname)
        .map_err(|e| CniError::io(format!("listing addresses of {ifname}"), &e))?;
    for ip in &prev.ips {
        if !parse_cidr(&ip.address).is_some_and(|c| have.contains(&c)) {
            return Err(fail(format!("{ifname} in {netns} lacks {}", ip.address)));
        }
    }
    Ok(())
}

/// Removes a tap left in the namespace (one the switch no longer has);
/// anything else of that name is the pod's and stays. A namespace that is
/// gone took its interfaces with it.
pub fn remove_tap(netns: &str, ifname: &str) -> Result<(), CniError> {
    if netns.is_empty() || !Path::new(netns).exists() {
        return Ok(());
    }
    let Ok(mut h) = handle(netns) else {
        return Ok(());
    };
    match h.link(ifname) {
        Ok(Some(l)) if l.kind.as_deref() == Some("tun") => h
            .delete_link(ifname)
            .map_err(|e| CniError::io(format!("removing {ifname} from {netns}"), &e)),
        _ => Ok(()),
    }
}
