//! The two-host topology: two namespaces joined by a veth, with addresses.

use std::ffi::OsStr;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::thread::JoinHandle;

use crate::error::Result;
use crate::handle::Handle;
use crate::journal::Journal;
use crate::names::unique_id;
use crate::netns::Netns;

/// Prefix length of the pair's subnet.
pub const PAIR_PREFIX: u8 = 24;

/// One end of a [`Pair`]: a namespace with one addressed, up interface.
#[derive(Debug)]
pub struct Host {
    netns: Netns,
    ifname: String,
    addr: Ipv4Addr,
}

impl Host {
    pub(crate) fn new(netns: Netns, ifname: String, addr: Ipv4Addr) -> Host {
        Host {
            netns,
            ifname,
            addr,
        }
    }

    pub(crate) fn into_netns(self) -> Netns {
        self.netns
    }

    /// The host's namespace.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// The host's interface (its end of the veth).
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The host's address on that interface.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    /// Run `f` inside the host's namespace (see [`Netns::run`]).
    pub fn run<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        self.netns.run(f)
    }

    /// Start `f` on a thread inside the host's namespace (see [`Netns::spawn`]).
    pub fn spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.netns.spawn(f)
    }

    /// A command that runs inside the host's namespace (see [`Netns::command`]).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        self.netns.command(program)
    }

    /// A netlink handle inside the host's namespace.
    pub fn handle(&self) -> Result<Handle> {
        self.netns.handle()
    }
}

/// Two namespaces `vnio-ID-a` and `vnio-ID-b` joined by the veth
/// `vnioIDa` <-> `vnioIDb`, addressed 10.77.N.1/24 and 10.77.N.2/24, both up.
/// ID is unique per process and call (pid and counter), N is the counter
/// modulo 256: the subnet only needs to be distinct within a namespace, and
/// each pair has its own. Dropping the pair deletes both namespaces, which
/// deletes the veth.
#[derive(Debug)]
pub struct Pair {
    a: Host,
    b: Host,
}

impl Pair {
    /// Build a pair, journaled in the default journal.
    pub fn new() -> Result<Pair> {
        Pair::with_journal(&Journal::default())
    }

    /// Build a pair journaled in `journal`.
    pub fn with_journal(journal: &Journal) -> Result<Pair> {
        let (id, n) = unique_id();
        let octet = (n % 256) as u8;
        let ns_a = Netns::create_with_journal(&format!("vnio-{id}-a"), journal)?;
        let ns_b = Netns::create_with_journal(&format!("vnio-{id}-b"), journal)?;
        let if_a = format!("vnio{id}a");
        let if_b = format!("vnio{id}b");
        let addr_a = Ipv4Addr::new(10, 77, octet, 1);
        let addr_b = Ipv4Addr::new(10, 77, octet, 2);

        let mut handle_a = ns_a.handle()?;
        // Created directly across the two namespaces: it never exists in the
        // root namespace, and it dies with them.
        let _ = handle_a.add_veth(&if_a, &if_b, Some(&ns_b))?.keep();
        handle_a.add_address(&if_a, IpAddr::V4(addr_a), PAIR_PREFIX)?;
        handle_a.set_up(&if_a)?;
        drop(handle_a);

        let mut handle_b = ns_b.handle()?;
        handle_b.add_address(&if_b, IpAddr::V4(addr_b), PAIR_PREFIX)?;
        handle_b.set_up(&if_b)?;
        drop(handle_b);

        Ok(Pair {
            a: Host {
                netns: ns_a,
                ifname: if_a,
                addr: addr_a,
            },
            b: Host {
                netns: ns_b,
                ifname: if_b,
                addr: addr_b,
            },
        })
    }

    /// The first host (address .1).
    pub fn a(&self) -> &Host {
        &self.a
    }

    /// The second host (address .2).
    pub fn b(&self) -> &Host {
        &self.b
    }

    /// Delete both namespaces now, reporting failures (drop does the same
    /// silently).
    pub fn delete(self) -> Result<()> {
        let Pair { a, b } = self;
        let first = a.netns.delete();
        let second = b.netns.delete();
        first.and(second)
    }
}
