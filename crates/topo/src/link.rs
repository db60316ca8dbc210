//! Network interfaces: veth pairs, bridges, macvlans, macvtaps; up/down, MTU,
//! namespace moves, deletion; and the [`Link`] guard that deletes on drop.

use std::os::fd::AsRawFd;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoIpVlan, InfoKind, InfoMacVlan, InfoMacVtap, InfoVeth, IpVlanMode, LinkAttribute,
    LinkFlags, LinkInfo, LinkMessage, MacVlanMode,
};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::{Error, Result};
use crate::handle::{Handle, Place};
use crate::journal::{Entry, Journal};
use crate::names::check_ifname;
use crate::netns::Netns;

/// What the kernel reports about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    /// Interface index (unique within its namespace).
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Carrier present (IFF_LOWER_UP).
    pub lower_up: bool,
    /// MTU in bytes.
    pub mtu: u32,
    /// Kind from IFLA_LINKINFO (`veth`, `bridge`, ...), `None` for physical
    /// devices and loopback.
    pub kind: Option<String>,
    /// Index of the bridge (or other controller) this link is enslaved to.
    pub controller: Option<u32>,
    /// Its Ethernet address (IFLA_ADDRESS), when it has a 6-byte one.
    pub mac: Option<[u8; 6]>,
}

/// macvlan modes (how macvlans on one parent reach each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacvlanMode {
    /// No traffic between macvlans on the same parent.
    Private,
    /// Traffic between macvlans goes out to the adjacent switch and back.
    Vepa,
    /// Macvlans on the same parent switch traffic between themselves.
    Bridge,
    /// One macvlan takes over the parent.
    Passthru,
}

impl From<MacvlanMode> for MacVlanMode {
    fn from(m: MacvlanMode) -> Self {
        match m {
            MacvlanMode::Private => MacVlanMode::Private,
            MacvlanMode::Vepa => MacVlanMode::Vepa,
            MacvlanMode::Bridge => MacVlanMode::Bridge,
            MacvlanMode::Passthru => MacVlanMode::Passthrough,
        }
    }
}

/// ipvlan modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpvlanMode {
    /// Switching at layer 2 (shares the parent's MAC).
    L2,
    /// Routing at layer 3.
    L3,
    /// Layer 3 with netfilter/conntrack on the slave.
    L3s,
}

impl From<IpvlanMode> for IpVlanMode {
    fn from(m: IpvlanMode) -> Self {
        match m {
            IpvlanMode::L2 => IpVlanMode::L2,
            IpvlanMode::L3 => IpVlanMode::L3,
            IpvlanMode::L3s => IpVlanMode::L3S,
        }
    }
}

/// An interface this process created: deleted on drop (deleting one end of a
/// veth deletes both), unless [`Link::keep`] is called. Deleting a link that
/// is already gone (e.g. with its namespace) is not an error.
///
/// The guard remembers the namespace the link was created in; after
/// [`Handle::move_to`] it no longer finds the link, which then lives until
/// its new namespace is deleted.
#[derive(Debug)]
#[must_use = "dropping a Link deletes the interface"]
pub struct Link {
    name: String,
    /// A veth peer created in the same namespace (journaled with it).
    peer: Option<String>,
    place: Place,
    journal: Option<Journal>,
    armed: bool,
}

impl Link {
    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Keep the interface when the guard is dropped; returns its name. A
    /// root-namespace link stays in the journal, so `clean()` still finds it.
    pub fn keep(mut self) -> String {
        self.armed = false;
        std::mem::take(&mut self.name)
    }

    /// Delete the interface now and report failures.
    pub fn delete(mut self) -> Result<()> {
        self.armed = false;
        self.remove()
    }

    fn remove(&self) -> Result<()> {
        match Handle::open(self.place.clone()) {
            Ok(mut handle) => {
                handle.delete_if_exists(&self.name)?;
            }
            // Its namespace is gone, and the link with it.
            Err(e) if matches!(&self.place, Place::Named(_)) && is_enoent(&e) => {}
            Err(e) => return Err(e),
        }
        if let Some(journal) = &self.journal {
            let _ = journal.forget(&Entry::Link(self.name.clone()));
            if let Some(peer) = &self.peer {
                let _ = journal.forget(&Entry::Link(peer.clone()));
            }
        }
        Ok(())
    }
}

fn is_enoent(e: &Error) -> bool {
    e.os_error().and_then(|e| e.raw_os_error()) == Some(libc::ENOENT)
}

impl Drop for Link {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.armed = false;
        let _ = self.remove();
    }
}

impl Handle {
    fn what(&self, action: &str, name: &str) -> String {
        format!("{action} {name} in {}", self.place)
    }

    /// The journal to record root-namespace links in, if any.
    fn link_journal(&self) -> Option<&Journal> {
        match (&self.journal, &self.place) {
            (Some(journal), Place::Root) => Some(journal),
            _ => None,
        }
    }

    /// Create a link: journal `names` first (root namespace only), and
    /// forget them again if the kernel refuses, so `clean` never removes a
    /// same-named link that belongs to someone else.
    fn create_link(&mut self, what: String, message: LinkMessage, names: &[&str]) -> Result<()> {
        if let Some(journal) = self.link_journal() {
            for name in names {
                journal.record(&Entry::Link((*name).to_owned()))?;
            }
        }
        let created = self.new_link(what, message);
        if created.is_err() {
            if let Some(journal) = self.link_journal() {
                for name in names {
                    let _ = journal.forget(&Entry::Link((*name).to_owned()));
                }
            }
        }
        created
    }

    fn guard(&self, name: &str) -> Link {
        Link {
            name: name.to_owned(),
            peer: None,
            place: self.place.clone(),
            journal: self.journal.clone(),
            armed: true,
        }
    }

    fn new_link(&mut self, what: String, message: LinkMessage) -> Result<()> {
        let kind = message.attributes.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
                LinkInfo::Kind(kind) => Some(kind.to_string()),
                _ => None,
            }),
            _ => None,
        });
        match self.rtnl.request(
            RouteNetlinkMessage::NewLink(message),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(_) => Ok(()),
            // "Unknown device type": the kind is not built into this kernel.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Err(Error::os(
                what,
                std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!(
                        "link kind {} is not available in this kernel",
                        kind.unwrap_or_default()
                    ),
                ),
            )),
            Err(e) => Err(Error::os(what, e)),
        }
    }

    fn set_link(&mut self, what: String, message: LinkMessage) -> Result<()> {
        self.rtnl
            .request(RouteNetlinkMessage::SetLink(message), 0)
            .map(drop)
            .map_err(|e| Error::os(what, e))
    }

    /// The state of the interface `name`, `None` if there is none.
    pub fn link(&mut self, name: &str) -> Result<Option<LinkState>> {
        check_ifname(name)?;
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        match self.rtnl.request(RouteNetlinkMessage::GetLink(message), 0) {
            Ok(replies) => Ok(replies.into_iter().find_map(link_state)),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(Error::os(self.what("looking up link", name), e)),
        }
    }

    /// The index of the interface `name`; an error if it does not exist.
    pub fn index(&mut self, name: &str) -> Result<u32> {
        match self.link(name)? {
            Some(state) => Ok(state.index),
            None => Err(Error::NotFound {
                what: self.what("link", name),
            }),
        }
    }

    /// Every interface in this namespace.
    pub fn links(&mut self) -> Result<Vec<LinkState>> {
        let replies = self
            .rtnl
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .map_err(|e| Error::os(format!("listing links in {}", self.place), e))?;
        Ok(replies.into_iter().filter_map(link_state).collect())
    }

    /// Create a veth pair `name` <-> `peer`. `name` is created in this
    /// handle's namespace; `peer` too, or directly inside `peer_netns`.
    pub fn add_veth(&mut self, name: &str, peer: &str, peer_netns: Option<&Netns>) -> Result<Link> {
        check_ifname(name)?;
        check_ifname(peer)?;
        let mut peer_message = LinkMessage::default();
        peer_message
            .attributes
            .push(LinkAttribute::IfName(peer.to_owned()));
        if let Some(ns) = peer_netns {
            peer_message
                .attributes
                .push(LinkAttribute::NetNsFd(ns.fd().as_raw_fd()));
        }
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
        ]));
        let what = match peer_netns {
            Some(ns) => format!(
                "creating veth {name} in {} with peer {peer} in netns {}",
                self.place,
                ns.name()
            ),
            None => format!("creating veth {name}/{peer} in {}", self.place),
        };
        let names: &[&str] = if peer_netns.is_none() {
            &[name, peer]
        } else {
            &[name]
        };
        self.create_link(what, message, names)?;
        let mut link = self.guard(name);
        if peer_netns.is_none() {
            link.peer = Some(peer.to_owned());
        }
        Ok(link)
    }

    /// Create a Linux bridge `name` (down; bring it up with [`Handle::set_up`]).
    pub fn add_bridge(&mut self, name: &str) -> Result<Link> {
        check_ifname(name)?;
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        message
            .attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Bridge,
            )]));
        let what = self.what("creating bridge", name);
        self.create_link(what, message, &[name])?;
        Ok(self.guard(name))
    }

    /// Create a macvlan `name` on `parent` (both in this namespace).
    pub fn add_macvlan(&mut self, name: &str, parent: &str, mode: MacvlanMode) -> Result<Link> {
        let info = vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(mode.into())])),
        ];
        self.add_on_parent("macvlan", name, parent, None, info)
    }

    /// Create a macvtap `name` on `parent` (both in this namespace) with
    /// MAC `mac` (the guest's: in bridge mode macvtap only takes frames for
    /// its own address). Its character device is `/dev/tapIFINDEX`.
    pub fn add_macvtap(
        &mut self,
        name: &str,
        parent: &str,
        mode: MacvlanMode,
        mac: Option<[u8; 6]>,
    ) -> Result<Link> {
        let info = vec![
            LinkInfo::Kind(InfoKind::MacVtap),
            LinkInfo::Data(InfoData::MacVtap(vec![InfoMacVtap::Mode(mode.into())])),
        ];
        self.add_on_parent("macvtap", name, parent, mac, info)
    }

    /// Create an ipvlan `name` on `parent` (both in this namespace).
    pub fn add_ipvlan(&mut self, name: &str, parent: &str, mode: IpvlanMode) -> Result<Link> {
        let info = vec![
            LinkInfo::Kind(InfoKind::IpVlan),
            LinkInfo::Data(InfoData::IpVlan(vec![InfoIpVlan::Mode(mode.into())])),
        ];
        self.add_on_parent("ipvlan", name, parent, None, info)
    }

    /// Creates a link of `kind` (described by `info`) stacked on `parent`,
    /// optionally with its own MAC: macvlan, macvtap and ipvlan differ only
    /// in their link info.
    fn add_on_parent(
        &mut self,
        kind: &str,
        name: &str,
        parent: &str,
        mac: Option<[u8; 6]>,
        info: Vec<LinkInfo>,
    ) -> Result<Link> {
        check_ifname(name)?;
        let parent_index = self.index(parent)?;
        let mut message = LinkMessage::default();
        message
            .attributes
            .push(LinkAttribute::IfName(name.to_owned()));
        message.attributes.push(LinkAttribute::Link(parent_index));
        if let Some(mac) = mac {
            message
                .attributes
                .push(LinkAttribute::Address(mac.to_vec()));
        }
        message.attributes.push(LinkAttribute::LinkInfo(info));
        let what = format!("creating {kind} {name} on {parent} in {}", self.place);
        self.create_link(what, message, &[name])?;
        Ok(self.guard(name))
    }

    fn set_flags(&mut self, name: &str, up: bool) -> Result<()> {
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message.header.change_mask = LinkFlags::Up;
        if up {
            message.header.flags = LinkFlags::Up;
        }
        let action = if up { "setting up" } else { "setting down" };
        self.set_link(self.what(action, name), message)
    }

    /// Bring `name` up.
    pub fn set_up(&mut self, name: &str) -> Result<()> {
        self.set_flags(name, true)
    }

    /// Bring `name` down.
    pub fn set_down(&mut self, name: &str) -> Result<()> {
        self.set_flags(name, false)
    }

    /// Set the MTU of `name`.
    pub fn set_mtu(&mut self, name: &str, mtu: u32) -> Result<()> {
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message.attributes.push(LinkAttribute::Mtu(mtu));
        self.set_link(self.what(&format!("setting mtu {mtu} on"), name), message)
    }

    /// Set the Ethernet address of `name`.
    pub fn set_mac(&mut self, name: &str, mac: [u8; 6]) -> Result<()> {
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message
            .attributes
            .push(LinkAttribute::Address(mac.to_vec()));
        let m = mac.map(|b| format!("{b:02x}")).join(":");
        self.set_link(self.what(&format!("setting address {m} on"), name), message)
    }

    /// Enslave `name` to the bridge `bridge` (both in this namespace).
    pub fn set_controller(&mut self, name: &str, bridge: &str) -> Result<()> {
        let bridge_index = self.index(bridge)?;
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message
            .attributes
            .push(LinkAttribute::Controller(bridge_index));
        self.set_link(
            self.what(&format!("attaching to bridge {bridge}:"), name),
            message,
        )
    }

    /// Release `name` from its bridge.
    pub fn clear_controller(&mut self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message.attributes.push(LinkAttribute::Controller(0));
        self.set_link(self.what("detaching from its bridge:", name), message)
    }

    /// Move `name` from this namespace into `netns`.
    pub fn move_to(&mut self, name: &str, netns: &Netns) -> Result<()> {
        let index = self.index(name)?;
        let mut message = LinkMessage::default();
        message.header.index = index;
        message
            .attributes
            .push(LinkAttribute::NetNsFd(netns.fd().as_raw_fd()));
        let what = format!(
            "moving {name} from {} to netns {}",
            self.place,
            netns.name()
        );
        self.set_link(what, message)
    }

    /// Delete `name`; an error if it does not exist.
    pub fn delete_link(&mut self, name: &str) -> Result<()> {
        if self.delete_if_exists(name)? {
            Ok(())
        } else {
            Err(Error::NotFound {
                what: self.what("link", name),
            })
        }
    }

    /// Delete `name` if it exists; returns whether it did.
    pub fn delete_if_exists(&mut self, name: &str) -> Result<bool> {
        let Some(state) = self.link(name)? else {
            return Ok(false);
        };
        let mut message = LinkMessage::default();
        message.header.index = state.index;
        match self.rtnl.request(RouteNetlinkMessage::DelLink(message), 0) {
            Ok(_) => Ok(true),
            // Raced with its namespace or its veth peer going away.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(false),
            Err(e) => Err(Error::os(self.what("deleting link", name), e)),
        }
    }
}

fn link_state(message: RouteNetlinkMessage) -> Option<LinkState> {
    let RouteNetlinkMessage::NewLink(link) = message else {
        return None;
    };
    let mut state = LinkState {
        index: link.header.index,
        name: String::new(),
        up: link.header.flags.contains(LinkFlags::Up),
        lower_up: link.header.flags.contains(LinkFlags::LowerUp),
        mtu: 0,
        kind: None,
        controller: None,
        mac: None,
    };
    for attribute in link.attributes {
        match attribute {
            LinkAttribute::IfName(name) => state.name = name,
            LinkAttribute::Mtu(mtu) => state.mtu = mtu,
            LinkAttribute::Address(a) if a.len() == 6 => {
                let mut m = [0u8; 6];
                m.copy_from_slice(&a);
                state.mac = Some(m);
            }
            LinkAttribute::Controller(index) if index != 0 => state.controller = Some(index),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::Kind(kind) = info {
                        state.kind = Some(kind.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    Some(state)
}

/// Delete a root-namespace link by name if it exists (used by `clean`).
pub(crate) fn remove_root_link(name: &str) -> Result<bool> {
    Handle::open(Place::Root)?.delete_if_exists(name)
}
