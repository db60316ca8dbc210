//! The guest's settings travel on the kernel command line (`vnio.*` keys),
//! so one image serves every guest: the init script reads them from
//! `/proc/cmdline`. Values are checked here to be free of spaces and shell
//! metacharacters, since the init script splits and uses them.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::addr::{Cidr, Mac};
use crate::error::{Error, Result};

/// Kernel options every guest gets: the serial console, quiet boot, and
/// reboot-on-panic turned into an exit (QEMU runs with `-no-reboot`).
pub const BASE: &str = "console=ttyS0 quiet panic=-1";

/// What the guest's init configures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestConfig {
    /// Host name.
    pub hostname: String,
    /// Addresses: (the NIC's MAC, address/prefix). By MAC, since the
    /// guest names NICs in driver-probe order, not in QEMU's device order.
    pub addrs: Vec<(Mac, Cidr)>,
    /// Default gateway.
    pub gateway: Option<IpAddr>,
    /// Extra routes: (destination, via).
    pub routes: Vec<(Cidr, IpAddr)>,
    /// The agent's control port; 0 starts no agent.
    pub agent_port: u16,
    /// Token clients must present to the agent.
    pub agent_token: Option<String>,
    /// Multiqueue NICs: (the NIC's MAC, queue pairs the init turns on).
    #[serde(default)]
    pub channels: Vec<(Mac, u16)>,
}

/// The agent's default control port (as `vnio agent`).
pub const AGENT_PORT: u16 = 7700;

fn check_word(what: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{what} {v:?}: use 1-64 letters, digits, '-', '_' or '.'"
        )))
    }
}

impl GuestConfig {
    /// Checks every value can travel on the command line.
    pub fn validate(&self) -> Result<()> {
        check_word("hostname", &self.hostname)?;
        if let Some(t) = &self.agent_token {
            check_word("agent token", t)?;
        }
        Ok(())
    }

    /// The `vnio.*` part of the kernel command line.
    pub fn to_cmdline(&self) -> String {
        let mut parts = vec![format!("vnio.hostname={}", self.hostname)];
        for (mac, cidr) in &self.addrs {
            parts.push(format!("vnio.ip={mac},{cidr}"));
        }
        if let Some(gw) = self.gateway {
            parts.push(format!("vnio.gw={gw}"));
        }
        for (dest, via) in &self.routes {
            parts.push(format!("vnio.route={dest},{via}"));
        }
        for (mac, n) in &self.channels {
            parts.push(format!("vnio.queues={mac},{n}"));
        }
        parts.push(format!("vnio.agent={}", self.agent_port));
        if let Some(t) = &self.agent_token {
            parts.push(format!("vnio.token={t}"));
        }
        parts.join(" ")
    }

    /// The whole kernel command line.
    pub fn kernel_cmdline(&self) -> String {
        format!("{BASE} {}", self.to_cmdline())
    }
}

/// The command line of the acceleration probe: init prints its marker and
/// powers off before loading anything.
pub fn probe_cmdline() -> String {
    format!("{BASE} vnio.probe")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GuestConfig {
        GuestConfig {
            hostname: "g1".into(),
            addrs: vec![(
                "52:54:00:00:00:02".parse().unwrap(),
                "10.0.0.2/24".parse().unwrap(),
            )],
            gateway: Some("10.0.0.1".parse().unwrap()),
            routes: vec![(
                "10.9.0.0/16".parse().unwrap(),
                "10.0.0.254".parse().unwrap(),
            )],
            agent_port: 7700,
            agent_token: Some("s3cret".into()),
            channels: vec![("52:54:00:00:00:02".parse().unwrap(), 2)],
        }
    }

    #[test]
    fn the_command_line_carries_every_setting() {
        let c = config();
        c.validate().unwrap();
        assert_eq!(
            c.kernel_cmdline(),
            "console=ttyS0 quiet panic=-1 vnio.hostname=g1 vnio.ip=52:54:00:00:00:02,10.0.0.2/24 \
             vnio.gw=10.0.0.1 vnio.route=10.9.0.0/16,10.0.0.254 vnio.queues=52:54:00:00:00:02,2 \
             vnio.agent=7700 vnio.token=s3cret"
        );
    }

    #[test]
    fn values_that_would_break_the_init_script_are_refused() {
        let mut c = config();
        c.agent_token = Some("a b".into());
        assert!(c.validate().is_err());
        let mut c = config();
        c.hostname = "$(reboot)".into();
        assert!(c.validate().is_err());
    }
}
