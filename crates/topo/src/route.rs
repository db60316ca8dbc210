//! Routes in the main routing table.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::addr::Cidr;
use crate::error::{Error, Result};
use crate::handle::Handle;

/// A route of the main table as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteState {
    /// Destination prefix (`0.0.0.0/0` or `::/0` for a default route).
    pub dest: Cidr,
    /// Next hop, if the route has one.
    pub via: Option<IpAddr>,
    /// Index of the outgoing interface.
    pub oif: Option<u32>,
}

/// The route the kernel picks for one address (`ip route get ADDR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTo {
    /// The address is one of this namespace's own (a `local` route).
    pub local: bool,
    /// The next hop, if the address is not on the link.
    pub via: Option<IpAddr>,
    /// The outgoing interface's name.
    pub dev: Option<String>,
}

impl Handle {
    /// The route the kernel would use to reach `addr`; an error when it has
    /// none (e.g. "Network is unreachable").
    pub fn route_to(&mut self, addr: IpAddr) -> Result<RouteTo> {
        let mut message = RouteMessage::default();
        message.header.address_family = if addr.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        message.header.destination_prefix_length = if addr.is_ipv4() { 32 } else { 128 };
        message
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::from(addr)));
        let replies = self
            .rtnl
            .request(RouteNetlinkMessage::GetRoute(message), 0)
            .map_err(|e| {
                Error::os(
                    format!("looking up the route to {addr} in {}", self.place),
                    e,
                )
            })?;
        let reply = replies
            .into_iter()
            .find_map(|r| match r {
                RouteNetlinkMessage::NewRoute(m) => Some(m),
                _ => None,
            })
            .ok_or_else(|| {
                Error::os(
                    format!("looking up the route to {addr} in {}", self.place),
                    std::io::Error::other("the kernel sent no route"),
                )
            })?;
        let mut out = RouteTo {
            local: reply.header.kind == RouteType::Local,
            via: None,
            dev: None,
        };
        for a in &reply.attributes {
            match a {
                RouteAttribute::Gateway(g) => out.via = ip_of(g),
                RouteAttribute::Oif(i) => {
                    out.dev = nix::net::if_::if_indextoname(*i)
                        .ok()
                        .map(|n| n.to_string_lossy().into_owned());
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn route_message(
        &mut self,
        dest: Cidr,
        via: Option<IpAddr>,
        dev: Option<&str>,
    ) -> Result<RouteMessage> {
        let mut message = RouteMessage::default();
        message.header.address_family = if dest.addr.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        message.header.destination_prefix_length = dest.prefix;
        message.header.table = RouteHeader::RT_TABLE_MAIN;
        message.header.protocol = RouteProtocol::Static;
        message.header.kind = RouteType::Unicast;
        // Without a gateway the destination is directly on the link.
        message.header.scope = if via.is_some() {
            RouteScope::Universe
        } else {
            RouteScope::Link
        };
        if dest.prefix > 0 {
            message
                .attributes
                .push(RouteAttribute::Destination(RouteAddress::from(dest.addr)));
        }
        if let Some(gateway) = via {
            message
                .attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(gateway)));
        }
        if let Some(name) = dev {
            let index = self.index(name)?;
            message.attributes.push(RouteAttribute::Oif(index));
        }
        Ok(message)
    }

    /// Add a route to `dest` through the gateway `via` and/or out of the
    /// interface `dev` (at least one of the two).
    pub fn add_route(&mut self, dest: Cidr, via: Option<IpAddr>, dev: Option<&str>) -> Result<()> {
        let what = match via {
            Some(gateway) => format!("adding route {dest} via {gateway} in {}", self.place),
            None => format!("adding route {dest} in {}", self.place),
        };
        if via.is_none() && dev.is_none() {
            return Err(Error::os(
                what,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a route needs a gateway or an interface",
                ),
            ));
        }
        let message = self.route_message(dest, via, dev)?;
        self.rtnl
            .request(
                RouteNetlinkMessage::NewRoute(message),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .map(drop)
            .map_err(|e| Error::os(what, e))
    }

    /// Add a default route through `via`.
    pub fn add_default_route(&mut self, via: IpAddr) -> Result<()> {
        let any = match via {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        self.add_route(
            Cidr {
                addr: any,
                prefix: 0,
            },
            Some(via),
            None,
        )
    }

    /// Delete the main-table route to `dest`.
    pub fn delete_route(&mut self, dest: Cidr) -> Result<()> {
        let mut message = self.route_message(dest, None, None)?;
        // Match any scope, protocol and type.
        message.header.scope = RouteScope::NoWhere;
        message.header.protocol = RouteProtocol::Unspec;
        message.header.kind = RouteType::Unspec;
        self.rtnl
            .request(RouteNetlinkMessage::DelRoute(message), 0)
            .map(drop)
            .map_err(|e| Error::os(format!("deleting route {dest} in {}", self.place), e))
    }

    /// The unicast routes of the main table (IPv4 and IPv6).
    pub fn routes(&mut self) -> Result<Vec<RouteState>> {
        let replies = self
            .rtnl
            .dump(RouteNetlinkMessage::GetRoute(RouteMessage::default()))
            .map_err(|e| Error::os(format!("listing routes in {}", self.place), e))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewRoute(message) = reply else {
                continue;
            };
            let header = &message.header;
            let table = message
                .attributes
                .iter()
                .find_map(|a| match a {
                    RouteAttribute::Table(t) => Some(*t),
                    _ => None,
                })
                .unwrap_or(u32::from(header.table));
            if table != u32::from(RouteHeader::RT_TABLE_MAIN) || header.kind != RouteType::Unicast {
                continue;
            }
            let any = match header.address_family {
                AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                _ => continue,
            };
            let mut state = RouteState {
                dest: Cidr {
                    addr: any,
                    prefix: header.destination_prefix_length,
                },
                via: None,
                oif: None,
            };
            for attribute in &message.attributes {
                match attribute {
                    RouteAttribute::Destination(a) => {
                        if let Some(ip) = ip_of(a) {
                            state.dest.addr = ip;
                        }
                    }
                    RouteAttribute::Gateway(a) => state.via = ip_of(a),
                    RouteAttribute::Oif(index) => state.oif = Some(*index),
                    _ => {}
                }
            }
            out.push(state);
        }
        Ok(out)
    }
}

fn ip_of(address: &RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}
