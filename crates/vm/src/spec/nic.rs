//! `--nic KIND[:ARG][,key=value...]` parsed into a [`Nic`]: the options
//! every kind takes, then each kind's own, then whatever is left refused.

use std::path::PathBuf;
use std::str::FromStr;

use super::{check_ifname, Backend, MacvtapMode, Model, Nic, MAX_QUEUE_PAIRS};
use crate::addr::{Cidr, Mac};

type Parsed<T> = std::result::Result<T, String>;

/// A NIC's `key[=value]` options, taken one by one; what is left is
/// unknown to its kind.
struct Options<'a> {
    /// The whole `--nic` value, for messages.
    s: &'a str,
    opts: Vec<(&'a str, Option<&'a str>)>,
}

impl Options<'_> {
    /// Option `key`: absent, bare (`Some(None)`) or with its value.
    fn take(&mut self, key: &str) -> Option<Option<String>> {
        let i = self.opts.iter().position(|(k, _)| *k == key)?;
        Some(self.opts.remove(i).1.map(str::to_string))
    }

    /// Option `key=VALUE`'s value, if given; given bare or empty is an error.
    fn value(&mut self, key: &str) -> Parsed<Option<String>> {
        match self.take(key) {
            None => Ok(None),
            Some(Some(v)) if !v.is_empty() => Ok(Some(v)),
            Some(_) => Err(format!("--nic {}: {key}= needs a value", self.s)),
        }
    }

    /// Option `key=on|off` (`default` when absent).
    fn on_off(&mut self, key: &str, default: bool) -> Parsed<bool> {
        match self.value(key)?.as_deref() {
            None => Ok(default),
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            Some(_) => Err(format!("--nic {}: {key}=on|off", self.s)),
        }
    }
}

impl FromStr for Nic {
    type Err = String;
    /// `KIND[:ARG][,key=value...]`:
    /// `vhost-user:SOCK[,server][,control=CTL][,queues=N]`,
    /// `tap[:IFNAME][,bridge=BR|,host-ip=ADDR/PREFIX]`, `macvtap:PARENT[,mode=bridge]`,
    /// `e1000[:IFNAME][,bridge=BR]` (a tap with QEMU's emulated e1000);
    /// every kind takes `mac=`, `ip=ADDR/PREFIX`, `guest-offloads=off` and
    /// `packed=on` (virtio-net), and tap kinds `model=`.
    fn from_str(s: &str) -> Parsed<Self> {
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or("");
        let (kind, arg) = match head.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (head, None),
        };
        let mut o = Options {
            s,
            opts: parts
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (p, None),
                })
                .collect(),
        };
        let mac = o.value("mac")?.map(|m| m.parse::<Mac>()).transpose()?;
        let ip = o.value("ip")?.map(|c| c.parse::<Cidr>()).transpose()?;
        let guest_offloads = o.on_off("guest-offloads", true)?;
        let packed = o.on_off("packed", false)?;
        let model = o.value("model")?.map(|m| m.parse::<Model>()).transpose()?;
        let (backend, model, queues) = match kind {
            "vhost-user" => vhost_user(&mut o, arg, model)?,
            "tap" | "e1000" => tap(&mut o, kind, arg, model)?,
            "macvtap" => macvtap(&mut o, arg, model)?,
            "vfio" | "sriov" => passthrough(&mut o, kind, arg)?,
            _ => {
                return Err(format!(
                    "--nic {s}: unknown kind {kind:?}: vhost-user:SOCK, tap[:IFNAME], macvtap:IFNAME, e1000[:IFNAME], vfio:PCI_ADDR or sriov:PF,vf=N"
                ))
            }
        };
        if let Some((k, _)) = o.opts.first() {
            return Err(format!("--nic {s}: unknown option {k:?} for {kind}"));
        }
        if !guest_offloads && model != Model::Virtio {
            return Err(format!("--nic {s}: guest-offloads is a virtio-net setting"));
        }
        if packed && model != Model::Virtio {
            return Err(format!("--nic {s}: packed is a virtio-net setting"));
        }
        Ok(Nic {
            backend,
            model,
            mac,
            ip,
            guest_offloads,
            packed,
            queues,
        })
    }
}

/// `vhost-user:SOCK[,server][,control=CTL][,queues=N]`: always virtio-net.
fn vhost_user(
    o: &mut Options<'_>,
    arg: Option<&str>,
    model: Option<Model>,
) -> Parsed<(Backend, Model, u16)> {
    let s = o.s;
    let socket = arg
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("--nic {s}: vhost-user needs a socket: vhost-user:PATH"))?;
    let server = match o.take("server") {
        None => false,
        Some(None) => true,
        Some(Some(v)) => match v.as_str() {
            "on" | "yes" | "true" => true,
            "off" | "no" | "false" => false,
            _ => return Err(format!("--nic {s}: server=on|off")),
        },
    };
    let control = o.value("control")?.map(PathBuf::from);
    let mut queues = 1;
    if let Some(q) = o.value("queues")? {
        queues = q
            .parse()
            .ok()
            .filter(|n| (1..=MAX_QUEUE_PAIRS).contains(n))
            .ok_or_else(|| format!("--nic {s}: queues=N, 1 to {MAX_QUEUE_PAIRS} queue pairs"))?;
    }
    if model.is_some_and(|m| m != Model::Virtio) {
        return Err(format!("--nic {s}: vhost-user NICs are virtio-net"));
    }
    Ok((
        Backend::VhostUser {
            socket: PathBuf::from(socket),
            server,
            control,
        },
        Model::Virtio,
        queues,
    ))
}

/// `tap[:IFNAME][,bridge=BR|,host-ip=ADDR/PREFIX]` and `e1000[:IFNAME]`
/// (a tap with QEMU's emulated e1000).
fn tap(
    o: &mut Options<'_>,
    kind: &str,
    arg: Option<&str>,
    model: Option<Model>,
) -> Parsed<(Backend, Model, u16)> {
    let s = o.s;
    let ifname = arg.filter(|a| !a.is_empty()).map(str::to_string);
    if let Some(i) = &ifname {
        check_ifname("--nic tap", i)?;
    }
    let bridge = o.value("bridge")?;
    if let Some(b) = &bridge {
        check_ifname("--nic bridge", b)?;
    }
    let host_ip = o.value("host-ip")?.map(|c| c.parse::<Cidr>()).transpose()?;
    if host_ip.is_some() && bridge.is_some() {
        return Err(format!(
            "--nic {s}: host-ip is for a plain tap (give the bridge the address)"
        ));
    }
    let model = match (kind, model) {
        ("e1000", Some(Model::Virtio)) => {
            return Err(format!("--nic {s}: e1000 is the e1000 model"))
        }
        ("e1000", _) => Model::E1000,
        (_, m) => m.unwrap_or(Model::Virtio),
    };
    Ok((
        Backend::Tap {
            ifname,
            bridge,
            host_ip,
        },
        model,
        1,
    ))
}

/// `macvtap:PARENT[,mode=bridge]`.
fn macvtap(
    o: &mut Options<'_>,
    arg: Option<&str>,
    model: Option<Model>,
) -> Parsed<(Backend, Model, u16)> {
    let s = o.s;
    let parent = arg
        .filter(|a| !a.is_empty())
        .ok_or_else(|| format!("--nic {s}: macvtap needs its host interface: macvtap:IFNAME"))?;
    check_ifname("--nic macvtap", parent)?;
    let mode = o
        .value("mode")?
        .map(|m| m.parse::<MacvtapMode>())
        .transpose()?
        .unwrap_or(MacvtapMode::Bridge);
    Ok((
        Backend::Macvtap {
            parent: parent.to_string(),
            mode,
        },
        model.unwrap_or(Model::Virtio),
        1,
    ))
}

/// `vfio:PCI_ADDR` or `sriov:PF,vf=N`.
fn passthrough(
    o: &mut Options<'_>,
    kind: &str,
    arg: Option<&str>,
) -> Parsed<(Backend, Model, u16)> {
    let s = o.s;
    let a = arg.filter(|a| !a.is_empty()).ok_or_else(|| {
        format!("--nic {s}: {kind} needs a device: vfio:PCI_ADDR or sriov:PF,vf=N")
    })?;
    let vf = o.value("vf")?;
    let backend = match (kind, vf) {
        ("vfio", None) => Backend::Vfio {
            addr: crate::passthrough::pci_addr(a).map_err(|e| format!("--nic {s}: {e}"))?,
        },
        ("sriov", Some(n)) => Backend::Sriov {
            pf: a.to_string(),
            vf: n
                .parse()
                .map_err(|_| format!("--nic {s}: vf=N, a number"))?,
        },
        _ => return Err(format!("--nic {s}: vfio:PCI_ADDR or sriov:PF,vf=N")),
    };
    Ok((backend, Model::Virtio, 1))
}
