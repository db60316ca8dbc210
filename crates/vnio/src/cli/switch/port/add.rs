//! `vnio switch port add`: the flags that describe a new port, the one
//! place its kind is worked out from them, and the [`PortSpec`] they make,
//! sent as it is to the switch's `port_add`.

use std::path::PathBuf;

use anyhow::Context;
use vnio_switch::config::{
    EgressSettings, KindSpec, PortSpec, TapSpec, UplinkSpec, VhostUserSpec, VxlanSpec,
};
use vnio_switch::control::{Client, Request};
use vnio_switch::port::SocketMode;
use vnio_switch::socket_access::{Principal, SocketAccess};
use vnio_switch::worker::PortInfo;

use super::{parse_mode, parse_on_off, PolicyArgs};

// The arguments of `vnio switch port add` (no doc comment: the subcommand's
// help is the `PortCmd::Add` variant's).
#[derive(clap::Args)]
pub(in crate::cli::switch) struct AddArgs {
    /// Port name.
    name: String,
    /// vhost-user socket path.
    #[arg(long, required_unless_present_any = ["tap", "uplink", "vxlan"], conflicts_with_all = ["tap", "uplink", "vxlan"])]
    socket: Option<PathBuf>,
    /// A VXLAN port with this VNI (RFC 7348; needs --local).
    #[arg(long, value_name = "VNI", conflicts_with_all = ["tap", "uplink"], requires = "local")]
    vxlan: Option<u32>,
    /// vxlan: the outer source IPv4 address (received on at --dstport).
    #[arg(long, value_name = "ADDR", requires = "vxlan")]
    local: Option<std::net::Ipv4Addr>,
    /// vxlan: remote VTEPs for broadcast and unknown unicast, comma-separated.
    #[arg(
        long = "remote",
        value_name = "ADDR[,ADDR]",
        value_delimiter = ',',
        requires = "vxlan"
    )]
    remotes: Vec<std::net::Ipv4Addr>,
    /// vxlan: UDP port [default: 4789].
    #[arg(long, value_name = "PORT", requires = "vxlan")]
    dstport: Option<u16>,
    /// vxlan: outer TTL [default: the kernel's].
    #[arg(long, requires = "vxlan")]
    ttl: Option<u8>,
    /// vxlan: the underlay MTU [default: 1500]; longer frames are dropped, not fragmented.
    #[arg(long, value_name = "BYTES", requires = "vxlan")]
    underlay_mtu: Option<usize>,
    /// vxlan: further VTEPs to hear besides --remote, as IPv4 prefixes,
    /// comma-separated; any other sender's datagrams are dropped (unknown_vtep).
    #[arg(
        long,
        value_name = "PREFIX[,PREFIX]",
        value_delimiter = ',',
        requires = "vxlan"
    )]
    accept: Vec<vnio_switch::port::vxlan::Ipv4Net>,
    /// vxlan: addresses each remote VTEP may have learned [default: the
    /// port's FDB limit shared among its remotes, at least 64].
    #[arg(long, value_name = "N", requires = "vxlan")]
    vtep_fdb_limit: Option<u32>,
    /// An uplink port on this host interface (AF_PACKET).
    #[arg(long, value_name = "IFNAME", conflicts_with = "tap")]
    uplink: Option<String>,
    /// A tap port (interface --ifname, default the port name).
    #[arg(long)]
    tap: bool,
    /// tap interface name.
    #[arg(long, requires = "tap")]
    ifname: Option<String>,
    /// tap: create it inside this network namespace (e.g.
    /// /run/netns/NAME), persistent across switch restarts.
    #[arg(long, value_name = "PATH", requires = "tap")]
    netns: Option<PathBuf>,
    /// server: the switch listens; client: the switch connects (and reconnects).
    /// [default: server]
    #[arg(long, value_parser = parse_mode)]
    mode: Option<SocketMode>,
    /// vhost-user server: the socket's owner (a user name or uid), for a
    /// VMM that runs as another user.
    #[arg(long, value_name = "USER", requires = "socket")]
    socket_owner: Option<String>,
    /// vhost-user server: the socket's group (a group name or gid).
    #[arg(long, value_name = "GROUP", requires = "socket")]
    socket_group: Option<String>,
    /// vhost-user server: the socket's permission bits, in octal (e.g. 0660).
    #[arg(long, value_name = "MODE", requires = "socket")]
    socket_mode: Option<String>,
    /// Access VLAN.
    #[arg(long)]
    vlan: Option<u16>,
    /// Trunk VLANs, comma-separated (makes the port a trunk).
    #[arg(long, value_delimiter = ',')]
    trunk: Vec<u16>,
    /// Untagged VLAN of a trunk.
    #[arg(long)]
    native_vlan: Option<u16>,
    /// The port's MAC address.
    #[arg(long)]
    mac: Option<String>,
    /// Drop frames whose source MAC is not --mac.
    #[arg(long)]
    spoof_guard: bool,
    /// Uplink: hand frames straight to the driver, skipping the interface's qdisc.
    #[arg(long, requires = "uplink")]
    qdisc_bypass: bool,
    /// Uplink: receive queues (queue 0 shared, the others one per vNIC while they last);
    /// vhost-user: queue pairs offered to the guest (a multiqueue vNIC, 1-8).
    #[arg(long, conflicts_with_all = ["tap", "vxlan"])]
    queues: Option<std::num::NonZeroUsize>,
    /// Uplink or vxlan: egress capacity the shares divide, Mbit/s (default:
    /// an uplink's link speed; none for vxlan).
    #[arg(long, value_name = "MBPS")]
    capacity_mbps: Option<u64>,
    /// vhost-user: direct mode, bound 1:1 to a receive queue of this uplink port, no switching (needs --mac).
    #[arg(long, value_name = "UPLINK_PORT", requires = "socket")]
    direct: Option<String>,
    /// vhost-user: cross-connected with this vhost-user port (added before), no switching:
    /// every frame either sends goes to the other as it is.
    #[arg(
        long,
        value_name = "PORT",
        requires = "socket",
        conflicts_with = "direct"
    )]
    cross_connect: Option<String>,
    /// vNIC: the uplink receive queue to use: auto (its own while queues last), shared, or N.
    #[arg(long, value_name = "auto|shared|N", conflicts_with = "uplink")]
    uplink_queue: Option<vnio_switch::netqueue::QueueRequest>,
    /// vhost-user and tap: offer checksum and TSO offloads (default on);
    /// off, frames cross MTU-sized and fully checksummed.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    offloads: Option<bool>,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// The kind of port the flags name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    VhostUser,
    Tap,
    Uplink,
    Vxlan,
}

impl Kind {
    /// "a tap", "an uplink", ...: what a refusal calls the port.
    fn with_article(self) -> &'static str {
        match self {
            Kind::VhostUser => "a vhost-user",
            Kind::Tap => "a tap",
            Kind::Uplink => "an uplink",
            Kind::Vxlan => "a vxlan",
        }
    }
}

impl AddArgs {
    /// The port's kind, from the flag that names it (clap lets at most
    /// one of them through): the one place it is worked out.
    fn kind(&self) -> Kind {
        if self.tap {
            Kind::Tap
        } else if self.uplink.is_some() {
            Kind::Uplink
        } else if self.vxlan.is_some() {
            Kind::Vxlan
        } else {
            Kind::VhostUser
        }
    }

    /// Refuses a flag of another kind of port (clap's `requires` and
    /// `conflicts_with` refuse the others before).
    fn check_flags(&self, kind: Kind) -> anyhow::Result<()> {
        use Kind::{Tap, Uplink, VhostUser, Vxlan};
        let vnic = matches!(kind, VhostUser | Tap);
        let egress = self.policy.egress().is_set();
        let misplaced = [
            (
                "--mode",
                self.mode.is_some() && kind != VhostUser,
                "vhost-user",
            ),
            (
                "--socket-owner, --socket-group and --socket-mode",
                self.socket_access().is_some()
                    && (kind != VhostUser || self.mode == Some(SocketMode::Client)),
                "server-mode vhost-user",
            ),
            (
                "--offloads",
                self.offloads.is_some() && !vnic,
                "vhost-user and tap",
            ),
            (
                "--uplink-queue",
                self.uplink_queue.is_some() && !vnic,
                "vhost-user and tap",
            ),
            (
                "--capacity-mbps",
                self.capacity_mbps.is_some() && !matches!(kind, Uplink | Vxlan),
                "uplink and vxlan",
            ),
            (
                "--share, --limit-mbps and --reserve-mbps",
                egress && !vnic,
                "vhost-user and tap",
            ),
        ];
        match misplaced.iter().find(|(_, given, _)| *given) {
            Some((flag, _, kinds)) => {
                anyhow::bail!(
                    "{flag}: for {kinds} ports, not {} port",
                    kind.with_article()
                )
            }
            None => Ok(()),
        }
    }

    /// Who may connect to the socket, when a flag says (the switch checks
    /// the names and the mode as it binds).
    fn socket_access(&self) -> Option<SocketAccess> {
        let who = |n: &Option<String>| n.clone().map(Principal::Name);
        let a = SocketAccess {
            owner: who(&self.socket_owner),
            group: who(&self.socket_group),
            mode: self.socket_mode.clone(),
        };
        (a != SocketAccess::default()).then_some(a)
    }

    /// The keys of the port's kind, from its flags (`check_flags` refused
    /// the others).
    fn kind_spec(&mut self, kind: Kind) -> anyhow::Result<KindSpec> {
        // The kind's own defaults, then what a flag gives.
        Ok(match kind {
            Kind::VhostUser => {
                // The switch takes socket paths as absolute (it has its
                // own working directory): a relative one is the caller's.
                let socket = match self.socket.take().unwrap_or_default() {
                    s if s.is_relative() => std::env::current_dir()
                        .context("the current directory")?
                        .join(s),
                    s => s,
                };
                let mut v = VhostUserSpec::new(socket, self.mode.unwrap_or_default());
                v.socket_access = self.socket_access();
                v.queues = self.queues.unwrap_or(v.queues);
                v.offloads = self.offloads.unwrap_or(v.offloads);
                v.direct = self.direct.take();
                v.cross_connect = self.cross_connect.take();
                KindSpec::VhostUser(v)
            }
            Kind::Tap => {
                let mut t = TapSpec::default();
                t.ifname = self.ifname.take();
                t.netns = self.netns.take();
                t.offloads = self.offloads.unwrap_or(t.offloads);
                KindSpec::Tap(t)
            }
            Kind::Uplink => {
                let mut u = UplinkSpec::new(self.uplink.as_deref().unwrap_or_default());
                u.qdisc_bypass = self.qdisc_bypass;
                u.queues = self.queues.unwrap_or(u.queues);
                u.capacity_mbps = self.capacity_mbps;
                KindSpec::Uplink(u)
            }
            Kind::Vxlan => {
                let local = self.local.context("--vxlan needs --local")?;
                let mut v = VxlanSpec::new(self.vxlan.unwrap_or_default(), local, &self.remotes);
                v.accept = std::mem::take(&mut self.accept);
                v.dstport = self.dstport.unwrap_or(v.dstport);
                v.ttl = self.ttl;
                v.underlay_mtu = self.underlay_mtu.unwrap_or(v.underlay_mtu);
                v.vtep_fdb_limit = self.vtep_fdb_limit;
                v.capacity_mbps = self.capacity_mbps;
                // EVPN ports come from the configuration file only.
                KindSpec::Vxlan(v)
            }
        })
    }

    /// The port's specification, as the switch takes it.
    fn spec(mut self) -> anyhow::Result<PortSpec> {
        let kind = self.kind();
        self.check_flags(kind)?;
        let keys = self.kind_spec(kind)?;
        let policy = self.policy;
        Ok(PortSpec {
            vlan: self.vlan,
            trunk: self.trunk,
            native_vlan: self.native_vlan,
            mac: self.mac,
            spoof_guard: self.spoof_guard,
            coalesce: policy.coalesce,
            lro: policy.lro,
            latency: policy.latency.unwrap_or_default(),
            core: policy.core,
            tx_poll_budget: policy.tx_poll_budget,
            uplink_queue: self.uplink_queue,
            fdb_limit: policy.fdb_limit,
            egress: EgressSettings {
                limit_mbps: policy.limit_mbps.filter(|&m| m > 0),
                reserve_mbps: policy.reserve_mbps.filter(|&m| m > 0),
                ..policy.egress()
            },
            ..PortSpec::new(&self.name, keys)
        })
    }
}

/// Adds the port `args` describe and says so.
pub(super) fn run(client: &mut Client, args: AddArgs, json: bool) -> anyhow::Result<()> {
    let spec = args.spec()?;
    let v = client.request(&Request::PortAdd { port: spec })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let p: PortInfo = serde_json::from_value(v)?;
        println!(
            "added port {} (id {}) on {}",
            p.name,
            p.id,
            p.socket.unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Add {
        #[command(flatten)]
        args: AddArgs,
    }

    fn spec(args: &[&str]) -> anyhow::Result<PortSpec> {
        let argv = std::iter::once("add").chain(args.iter().copied());
        Add::try_parse_from(argv)?.args.spec()
    }

    #[test]
    fn the_kind_comes_from_its_flag() {
        let kinds = [
            (&["vm1", "--socket", "/s"][..], "vhost-user"),
            (&["t1", "--tap"][..], "tap"),
            (&["up", "--uplink", "eth0"][..], "uplink"),
            (&["vx", "--vxlan", "7", "--local", "10.0.0.1"][..], "vxlan"),
        ];
        for (args, kind) in kinds {
            assert_eq!(spec(args).unwrap().kind.name(), kind, "{args:?}");
        }
        let up = spec(&["up", "--uplink", "eth0", "--queues", "4"]).unwrap();
        let KindSpec::Uplink(up) = up.kind else {
            panic!("not an uplink: {up:?}")
        };
        assert_eq!((up.ifname.as_str(), up.queues.get()), ("eth0", 4));
        let zero = spec(&["up", "--uplink", "eth0", "--queues", "0"]).unwrap_err();
        assert!(zero.to_string().contains("--queues"), "{zero}");
    }

    #[test]
    fn a_flag_of_another_kind_is_refused_in_one_line() {
        for (args, what) in [
            (&["t1", "--tap", "--mode", "client"][..], "--mode: for vhost-user ports, not a tap port"),
            (&["up", "--uplink", "eth0", "--offloads", "off"][..], "--offloads: for vhost-user and tap ports, not an uplink port"),
            (&["vm1", "--socket", "/s", "--capacity-mbps", "10"][..], "--capacity-mbps: for uplink and vxlan ports, not a vhost-user port"),
            (&["up", "--uplink", "eth0", "--share", "5"][..], "--share, --limit-mbps and --reserve-mbps: for vhost-user and tap ports, not an uplink port"),
        ] {
            let e = spec(args).unwrap_err().to_string();
            assert_eq!(e, what);
        }
        assert!(spec(&["vm1", "--socket", "/s", "--mode", "client"]).is_ok());
    }

    #[test]
    fn socket_ownership_flags_make_the_ports_socket_access() {
        let s = spec(&[
            "vm1",
            "--socket",
            "/s",
            "--socket-owner",
            "qemu",
            "--socket-mode",
            "0660",
        ]);
        let a = s
            .unwrap()
            .kind
            .vhost_user()
            .unwrap()
            .socket_access
            .clone()
            .unwrap();
        assert_eq!(a.owner, Some(Principal::Name("qemu".into())));
        assert_eq!((a.group, a.mode.as_deref()), (None, Some("0660")));
        let plain = spec(&["vm1", "--socket", "/s"]).unwrap();
        assert!(plain.kind.vhost_user().unwrap().socket_access.is_none());
        assert!(spec(&["t1", "--tap", "--socket-mode", "0660"]).is_err());
        let e = spec(&[
            "vm1",
            "--socket",
            "/s",
            "--mode",
            "client",
            "--socket-group",
            "kvm",
        ]);
        let e = e.unwrap_err().to_string();
        assert!(
            e.starts_with("--socket-owner, --socket-group and --socket-mode: for server-mode"),
            "{e}"
        );
    }
}
