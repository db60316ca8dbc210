//! The success result of ADD (spec 1.0.0/1.1.0 "Success"): interfaces,
//! IPs, routes and DNS. IPAM plugins return the same shape without
//! interfaces.

use serde::{Deserialize, Serialize};

/// A result.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CniResult {
    /// The spec version (the configuration's).
    pub cni_version: String,
    /// Interfaces made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// Addresses assigned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<Ip>,
    /// Routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// DNS, as the IPAM plugin said.
    #[serde(default, skip_serializing_if = "is_empty_obj")]
    pub dns: serde_json::Value,
}

fn is_empty_obj(v: &serde_json::Value) -> bool {
    v.is_null() || v.as_object().is_some_and(|o| o.is_empty())
}

/// One interface.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its MAC, when it has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// The namespace it is in (empty: the host's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// A vhost-user socket (1.1.0 `socketPath`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    /// The interface's MTU (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// One address.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Ip {
    /// CIDR, e.g. 10.1.0.2/24.
    pub address: String,
    /// The gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

/// One route.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Route {
    /// Destination CIDR.
    pub dst: String,
    /// Next hop (absent: the gateway of an address of the same family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
}

/// `10.1.0.2/24` into the address and prefix.
pub fn parse_cidr(s: &str) -> Option<vnio_topo::Cidr> {
    let (a, p) = s.split_once('/')?;
    let addr: std::net::IpAddr = a.parse().ok()?;
    let prefix: u8 = p.parse().ok()?;
    (prefix <= if addr.is_ipv4() { 32 } else { 128 }).then_some(vnio_topo::Cidr { addr, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_in_the_spec_shape() {
        let j = r#"{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/a"}],"ips":[{"address":"10.1.0.2/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}"#;
        let r: CniResult = serde_json::from_str(j).unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), j);
        let c = parse_cidr("10.1.0.2/24").unwrap();
        assert_eq!(c.prefix, 24);
        assert!(parse_cidr("10.1.0.2/33").is_none());
        assert!(parse_cidr("10.1.0.2").is_none());
    }
}
