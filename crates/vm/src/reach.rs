//! How this host reaches a guest's address, decided before anything is
//! sent to it: the kernel's own route (`ip route get`, over netlink, in
//! the calling thread's namespace) must lead into the guest's network,
//! or the guest is reached through its command channel instead
//! ([`crate::exec`]). A guest only on vhost-user ports has no host
//! interface in its network; its address then routes through the host's
//! default gateway, and whatever answers there is not the guest.

use std::fmt;
use std::net::IpAddr;

use crate::state::{Owned, State};

/// The path to a guest's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Path {
    /// This host's own route: on the link of `dev`, or through one of the
    /// VM's own interfaces (`via` its gateway then).
    Route {
        /// The outgoing interface.
        dev: String,
        /// The next hop, when the route has one.
        via: Option<IpAddr>,
    },
    /// No route of this host's own into the guest's network: why.
    Channel(String),
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Route { dev, via: None } => write!(f, "this host's route on the link of {dev}"),
            Path::Route { dev, via: Some(v) } => {
                write!(f, "this host's route via {v} on {dev}, the VM's own")
            }
            Path::Channel(why) => write!(f, "the guest's command channel ({why})"),
        }
    }
}

/// The VM's own host interfaces (taps, macvtaps, bridges it made).
pub fn own_interfaces(st: &State) -> Vec<String> {
    let mut out: Vec<String> = st.host_ifnames.iter().flatten().cloned().collect();
    out.extend(st.owned.iter().filter_map(|o| match o {
        Owned::Link { name } | Owned::Bridge { name } => Some(name.clone()),
        _ => None,
    }));
    out
}

/// Decides the path from the kernel's answer (`route`: the route, or why
/// there is none) and the VM's own interfaces.
pub fn decide(
    addr: IpAddr,
    route: std::result::Result<vnio_topo::RouteTo, String>,
    own: &[String],
) -> Path {
    let r = match route {
        Ok(r) => r,
        Err(e) => return Path::Channel(format!("this host has no route to {addr}: {e}")),
    };
    if r.local {
        return Path::Channel(format!(
            "{addr} is an address of this host, not the guest's"
        ));
    }
    match (r.dev, r.via) {
        (Some(dev), via) if own.contains(&dev) => Path::Route { dev, via },
        (Some(dev), None) => Path::Route { dev, via: None },
        (dev, Some(via)) => Path::Channel(format!(
            "this host's route to {addr} leads via {via}{} out of the guest's network",
            dev.map(|d| format!(" on {d}")).unwrap_or_default()
        )),
        (None, None) => Path::Channel(format!("the kernel names no interface toward {addr}")),
    }
}

/// The path from the calling thread's namespace to `addr`, a guest's
/// address of the VM `st`.
pub fn path_to(st: &State, addr: IpAddr) -> Path {
    let route = vnio_topo::Handle::here()
        .and_then(|mut h| h.route_to(addr))
        .map_err(|e| e.to_string());
    decide(addr, route, &own_interfaces(st))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vnio_topo::RouteTo;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn route(local: bool, via: Option<&str>, dev: Option<&str>) -> Result<RouteTo, String> {
        Ok(RouteTo {
            local,
            via: via.map(ip),
            dev: dev.map(String::from),
        })
    }

    #[test]
    fn only_a_route_into_the_guests_network_is_taken() {
        let a = ip("10.7.0.2");
        let own = vec!["vniotap0".to_string()];
        // On the link of a tap (the switch's or the VM's): taken.
        assert_eq!(
            decide(a, route(false, None, Some("sw-tap")), &own),
            Path::Route {
                dev: "sw-tap".into(),
                via: None
            }
        );
        // Through the VM's own interface, even via a gateway: taken.
        assert!(matches!(
            decide(a, route(false, Some("10.7.0.1"), Some("vniotap0")), &own),
            Path::Route { .. }
        ));
        // The host's default route: not the guest's network.
        let p = decide(a, route(false, Some("192.168.1.1"), Some("eth0")), &own);
        assert_eq!(
            p.to_string(),
            "the guest's command channel (this host's route to 10.7.0.2 leads via 192.168.1.1 on eth0 out of the guest's network)"
        );
        // The host's own address, or no route at all.
        assert!(matches!(
            decide(a, route(true, None, Some("lo")), &own),
            Path::Channel(_)
        ));
        assert!(matches!(
            decide(a, Err("Network is unreachable".into()), &own),
            Path::Channel(_)
        ));
    }
}
