//! Hosts on a Linux bridge: N namespaces wired to one bridge that lives in
//! its own switch namespace.

use std::net::{IpAddr, Ipv4Addr};

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::names::unique_id;
use crate::netns::Netns;
use crate::pair::{Host, PAIR_PREFIX};

/// Most hosts one [`Bridged`] takes (addresses .1 to .250 of its /24).
pub const BRIDGED_MAX_HOSTS: usize = 250;

/// A switch namespace `vnio-ID-sw` holding the bridge `br0` (up), and hosts
/// `vnio-ID-hI` (I from 1), each with `eth0` = 10.77.N.I/24 wired to the
/// bridge port `pI`. Dropping it deletes every namespace, which deletes the
/// bridge and the veths.
#[derive(Debug)]
pub struct Bridged {
    // Hosts first: they are dropped (deleted) before the switch.
    hosts: Vec<Host>,
    switch: Netns,
}

impl Bridged {
    /// `count` hosts on a bridge, journaled in the default journal.
    pub fn new(count: usize) -> Result<Bridged> {
        Bridged::with_journal(count, &Journal::default())
    }

    /// `count` hosts on a bridge, journaled in `journal`.
    pub fn with_journal(count: usize, journal: &Journal) -> Result<Bridged> {
        if count == 0 || count > BRIDGED_MAX_HOSTS {
            return Err(Error::os(
                format!("creating {count} bridged hosts"),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "between 1 and 250 hosts"),
            ));
        }
        let (id, n) = unique_id();
        let octet = (n % 256) as u8;
        let switch = Netns::create_with_journal(&format!("vnio-{id}-sw"), journal)?;
        let mut sw = switch.handle()?;
        let _ = sw.add_bridge("br0")?.keep();
        sw.set_up("br0")?;
        let mut hosts = Vec::with_capacity(count);
        for i in 1..=count {
            let netns = Netns::create_with_journal(&format!("vnio-{id}-h{i}"), journal)?;
            let port = format!("p{i}");
            let _ = sw.add_veth(&port, "eth0", Some(&netns))?.keep();
            sw.set_controller(&port, "br0")?;
            sw.set_up(&port)?;
            // i <= 250 by the check above.
            let addr = Ipv4Addr::new(10, 77, octet, i as u8);
            let mut h = netns.handle()?;
            h.add_address("eth0", IpAddr::V4(addr), PAIR_PREFIX)?;
            h.set_up("eth0")?;
            hosts.push(Host::new(netns, "eth0".to_owned(), addr));
        }
        Ok(Bridged { hosts, switch })
    }

    /// The hosts, in address order (.1 first).
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The switch namespace holding `br0` and the ports `p1`..`pN`.
    pub fn switch(&self) -> &Netns {
        &self.switch
    }

    /// Delete every namespace now, reporting the first failure.
    pub fn delete(self) -> Result<()> {
        let Bridged { hosts, switch } = self;
        let mut result = Ok(());
        for host in hosts {
            let deleted = host.into_netns().delete();
            if result.is_ok() {
                result = deleted;
            }
        }
        let deleted = switch.delete();
        result.and(deleted)
    }
}
