//! vnio topo: the kernel topology layer the lab and the VM launcher build on.
//!
//! Real kernel network topology built through rtnetlink (no `ip` commands):
//! named network namespaces ([`Netns`]), veth pairs, Linux bridges and
//! macvlans ([`Handle`], [`Link`]), addresses, routes, tc qdiscs, the
//! two-host [`Pair`] and hosts on a Linux bridge ([`Bridged`]); [`ssh`]
//! drives other machines with the system's OpenSSH client.
//! Every object is journaled before it is created, so [`clean`] can remove
//! what a crashed run left; the normal path cleans up on drop.
//!
//! Everything here needs root (CAP_SYS_ADMIN for the mounts under
//! `/run/netns`, CAP_NET_ADMIN for netlink); without it calls return an
//! error whose message ends in "(run as root)" and
//! [`Error::is_permission_denied`] is true.
//!
//! ```
//! use std::net::{SocketAddr, UdpSocket};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # if !vnio_topo::is_root() { return Ok(()); }
//! // Two namespaces joined by a veth: 10.77.N.1/24 <-> 10.77.N.2/24.
//! let pair = vnio_topo::Pair::new()?;
//! let server_addr = SocketAddr::from((pair.b().addr(), 7777));
//!
//! // Sockets opened in a closure belong to that namespace for good.
//! let server = pair.b().run(move || UdpSocket::bind(server_addr))??;
//! let client = pair.a().run(|| UdpSocket::bind("0.0.0.0:0"))??;
//! client.send_to(b"ping", server_addr)?;
//! let mut buf = [0u8; 16];
//! let (n, from) = server.recv_from(&mut buf)?;
//! assert_eq!(&buf[..n], b"ping");
//! assert_eq!(from.ip(), pair.a().addr());
//!
//! // A program in a namespace: its child setns()es before exec.
//! // (/proc/net is per network namespace.)
//! let out = pair.a().command("cat").arg("/proc/net/dev").output()?;
//! assert!(String::from_utf8_lossy(&out.stdout).contains(pair.a().ifname()));
//!
//! // Netlink inside a namespace.
//! let links = pair.a().handle()?.links()?;
//! assert!(links.iter().any(|l| l.name == pair.a().ifname() && l.up));
//! # Ok(())
//! # }
//! // Dropping `pair` deletes both namespaces and the veth.
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr;
mod bridged;
mod error;
mod handle;
mod hugepages;
mod journal;
mod link;
mod names;
mod netns;
pub mod owner;
mod pair;
mod process;
mod route;
mod rtnl;
mod shield;
pub mod ssh;
#[allow(unsafe_code)]
mod sys;
mod tc;

pub use addr::Cidr;
pub use bridged::{Bridged, BRIDGED_MAX_HOSTS};
pub use error::{Error, Result};
pub use handle::Handle;
pub use hugepages::Hugepages;
pub use journal::{CleanReport, Entry, Journal, DEFAULT_JOURNAL, JOURNAL_ENV, SCRATCH_PREFIX};
pub use link::{IpvlanMode, Link, LinkState, MacvlanMode};
pub use names::{check_ifname, unique_id, IFNAME_MAX};
pub use netns::{exists as netns_exists, Netns, NETNS_RUN_DIR};
pub use owner::Owner;
pub use pair::{Host, Pair, PAIR_PREFIX};
pub use process::Process;
pub use route::{RouteState, RouteTo};
pub use shield::{Shield, CPUSET_ROOT};
pub use tc::{Netem, QdiscState, RateLimit};

/// Remove everything the default journal ([`Journal::default`]) lists that
/// still exists, and empty it. Idempotent.
pub fn clean() -> Result<CleanReport> {
    Journal::default().clean()
}

/// True when this process runs as root (tests use it to skip).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
