//! The kernel's shadow of an EVPN port's VNI, which FRR's zebra reads and
//! fills: a bridge `vnio-b<VNI>`, a `vxlan` device `vnio-x<VNI>` on it
//! (the port's VNI and local address, no learning, on [`SHADOW_PORT`] so
//! it never takes the port's datagrams) and an access port `vnio-a<VNI>`
//! (one end of a veth pair) where the locally learned addresses sit.
//! Made with iproute2 (`ip`, `bridge`), removed when dropped.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// The UDP port of the shadow `vxlan` device: nothing is sent to it (the
/// device only carries FRR's view), it must only differ from vnio's.
pub const SHADOW_PORT: u16 = 48879;

/// The shadow devices of one VNI.
#[derive(Debug)]
pub struct Shadow {
    /// The bridge.
    pub bridge: String,
    /// The `vxlan` device, where FRR installs remote routes.
    pub vxlan: String,
    /// The access port, where vnio puts its local addresses.
    pub access: String,
    peer: String,
}

fn run(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "`{tool} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// Turns IPv6 off on a shadow device: its link-local traffic would put
/// addresses in the bridge that FRR would advertise.
fn no_ipv6(dev: &str) {
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
}

impl Shadow {
    /// Makes the devices for `vni` with outer address `local` (any left
    /// over from an earlier run are replaced).
    pub fn create(vni: u32, local: Ipv4Addr) -> Result<Self, String> {
        let s = Self {
            bridge: format!("vnio-b{vni}"),
            vxlan: format!("vnio-x{vni}"),
            access: format!("vnio-a{vni}"),
            peer: format!("vnio-p{vni}"),
        };
        s.remove();
        // On failure `s` drops, which removes what was made.
        s.build(vni, local)?;
        Ok(s)
    }

    fn build(&self, vni: u32, local: Ipv4Addr) -> Result<(), String> {
        let (vni, local, port) = (vni.to_string(), local.to_string(), SHADOW_PORT.to_string());
        let (b, x, a, p) = (&*self.bridge, &*self.vxlan, &*self.access, &*self.peer);
        run(
            "ip",
            &["link", "add", b, "type", "bridge", "stp_state", "0"],
        )?;
        run(
            "ip",
            &[
                "link",
                "add",
                x,
                "type",
                "vxlan",
                "id",
                &vni,
                "local",
                &local,
                "dstport",
                &port,
                "nolearning",
            ],
        )?;
        run("ip", &["link", "add", a, "type", "veth", "peer", "name", p])?;
        for d in [b, x, a, p] {
            no_ipv6(d);
        }
        for d in [x, a] {
            run("ip", &["link", "set", d, "master", b])?;
        }
        for d in [b, x, a, p] {
            run("ip", &["link", "set", d, "up"])?;
        }
        run(
            "bridge",
            &[
                "link",
                "set",
                "dev",
                x,
                "learning",
                "off",
                "neigh_suppress",
                "off",
            ],
        )?;
        run("bridge", &["link", "set", "dev", a, "learning", "off"])
    }

    /// Puts `add` on the access port as static entries and takes `del`
    /// off it (one `bridge -batch`). An entry FRR has since put on the
    /// `vxlan` device (the address moved away) is not touched by a delete.
    pub fn announce(&self, add: &[String], del: &[String]) -> Result<(), String> {
        if add.is_empty() && del.is_empty() {
            return Ok(());
        }
        let mut batch = String::new();
        for m in add {
            batch += &format!("fdb replace {m} dev {} master static\n", self.access);
        }
        for m in del {
            batch += &format!("fdb del {m} dev {} master\n", self.access);
        }
        let mut child = Command::new("bridge")
            .args(["-force", "-batch", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run bridge: {e}"))?;
        if let Some(mut i) = child.stdin.take() {
            i.write_all(batch.as_bytes())
                .map_err(|e| format!("cannot write to bridge: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("bridge: {e}"))?;
        match out.status.success() {
            true => Ok(()),
            // A delete of an entry already gone is no fault.
            false if add.is_empty() => Ok(()),
            false => Err(format!(
                "bridge fdb: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    fn remove(&self) {
        for d in [&self.bridge, &self.vxlan, &self.access] {
            let _ = run("ip", &["link", "del", d]);
        }
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        self.remove();
    }
}
