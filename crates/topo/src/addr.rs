//! IP addresses on interfaces.

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::{Error, Result};
use crate::handle::Handle;

/// An address with its prefix length, e.g. 10.77.1.1/24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length (0-32 for IPv4, 0-128 for IPv6).
    pub prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Handle {
    fn address_message(&mut self, name: &str, addr: IpAddr, prefix: u8) -> Result<AddressMessage> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(Error::os(
                format!("adding {addr}/{prefix} to {name} in {}", self.place),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "prefix too long"),
            ));
        }
        let index = self.index(name)?;
        let mut message = AddressMessage::default();
        message.header.family = if addr.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        message.header.prefix_len = prefix;
        message.header.index = index;
        message.attributes.push(AddressAttribute::Address(addr));
        if addr.is_ipv4() {
            message.attributes.push(AddressAttribute::Local(addr));
        }
        Ok(message)
    }

    /// Add `addr/prefix` to the interface `name` (IPv4 or IPv6).
    pub fn add_address(&mut self, name: &str, addr: IpAddr, prefix: u8) -> Result<()> {
        let message = self.address_message(name, addr, prefix)?;
        self.rtnl
            .request(
                RouteNetlinkMessage::NewAddress(message),
                NLM_F_CREATE | NLM_F_EXCL,
            )
            .map(drop)
            .map_err(|e| {
                Error::os(
                    format!("adding {addr}/{prefix} to {name} in {}", self.place),
                    e,
                )
            })
    }

    /// Remove `addr/prefix` from the interface `name`.
    pub fn delete_address(&mut self, name: &str, addr: IpAddr, prefix: u8) -> Result<()> {
        let message = self.address_message(name, addr, prefix)?;
        self.rtnl
            .request(RouteNetlinkMessage::DelAddress(message), 0)
            .map(drop)
            .map_err(|e| {
                Error::os(
                    format!("removing {addr}/{prefix} from {name} in {}", self.place),
                    e,
                )
            })
    }

    /// The addresses on the interface `name`.
    pub fn addresses(&mut self, name: &str) -> Result<Vec<Cidr>> {
        let index = self.index(name)?;
        let replies = self
            .rtnl
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .map_err(|e| Error::os(format!("listing addresses in {}", self.place), e))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewAddress(message) = reply else {
                continue;
            };
            if message.header.index != index {
                continue;
            }
            let prefix = message.header.prefix_len;
            // IFA_LOCAL is the interface's own address where it differs from
            // IFA_ADDRESS (point-to-point); prefer it.
            let mut local = None;
            let mut address = None;
            for attribute in message.attributes {
                match attribute {
                    AddressAttribute::Local(a) => local = Some(a),
                    AddressAttribute::Address(a) => address = Some(a),
                    _ => {}
                }
            }
            if let Some(addr) = local.or(address) {
                out.push(Cidr { addr, prefix });
            }
        }
        Ok(out)
    }
}
