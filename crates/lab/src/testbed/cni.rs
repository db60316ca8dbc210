//! Hosts attached through CNI plugins (knob `attach = "cni"`), as a
//! container runtime attaches pods: the plugin run with the CNI_*
//! environment and the network configuration on stdin, its result read
//! from stdout. On `switch` it is `vnio cni` against the running switch (a
//! tap moved into each namespace host, a vhost-user socket per poll-mode
//! host); on `bridge` the reference `bridge` plugin, run in the wire's
//! namespace so that its bridge is made there. IPAM is host-local, its
//! range the host's own address, so hosts keep the lab's addressing.
//! Nothing needs a DEL: the namespaces, the switch and the scratch
//! directory (records, leases, sockets) go with the testbed.

use super::*;
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

/// Where Debian's containernetworking-plugins (or upstream's) are.
const PLUGIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

/// The interface every attached namespace host gets.
pub(super) const POD_IFNAME: &str = "eth0";

/// The reference plugins' directory, or why the testbed cannot be built.
pub(super) fn plugin_dir() -> Result<&'static str, BedError> {
    PLUGIN_DIRS
        .into_iter()
        .find(|d| Path::new(d).join("host-local").is_file() && Path::new(d).join("bridge").is_file())
        .ok_or_else(|| {
            setup(
                "attach = \"cni\"",
                "needs the reference CNI plugins (bridge, host-local) in /usr/lib/cni or /opt/cni/bin: apt install containernetworking-plugins",
            )
        })
}

/// host-local handing out exactly `addr` (its gateway kept out of the way).
pub(super) fn ipam(addr: Ipv4Addr, data_dir: &Path) -> Value {
    let [a, b, c, _] = addr.octets();
    json!({
        "type": "host-local",
        "ranges": [[{
            "subnet": format!("{a}.{b}.{c}.0/{PREFIX}"),
            "rangeStart": addr.to_string(),
            "rangeEnd": addr.to_string(),
            "gateway": format!("{a}.{b}.{c}.254"),
        }]],
        "dataDir": data_dir.display().to_string(),
    })
}

/// One plugin call: an attachment to make (ADD) or to remove (DEL).
pub(super) struct Call<'a> {
    /// The plugin, ready to run (its namespace, its arguments).
    pub plugin: Command,
    /// CNI_CONTAINERID.
    pub container: &'a str,
    /// CNI_NETNS.
    pub netns: PathBuf,
    /// CNI_PATH: where the IPAM plugin is.
    pub cni_path: &'a str,
    /// The network configuration.
    pub conf: Value,
}

/// Runs an ADD; the plugin's result, or its error in one line.
pub(super) fn add(a: Call) -> Result<Value, BedError> {
    call("ADD", a)
}

/// Runs `command` (ADD, DEL) as a runtime does; the plugin's result
/// (none for a DEL), or its error in one line.
pub(super) fn call(command: &str, mut a: Call) -> Result<Value, BedError> {
    let what = format!("CNI {command} of {}", a.container);
    a.plugin
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", a.container)
        .env("CNI_IFNAME", POD_IFNAME)
        .env("CNI_PATH", a.cni_path)
        .env("CNI_NETNS", &a.netns)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = a.plugin.spawn().map_err(|e| setup(&what, e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(a.conf.to_string().as_bytes())
            .map_err(|e| setup(&what, e))?;
    }
    let out = child.wait_with_output().map_err(|e| setup(&what, e))?;
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if !out.status.success() {
        let said = match result.get("msg") {
            Some(m) => format!("{m} {}", result.get("details").unwrap_or(&Value::Null)),
            None => String::from_utf8_lossy(&out.stderr).trim().to_string(),
        };
        return Err(setup(what, format!("{}: {said}", out.status)));
    }
    Ok(result)
}

/// The socket of a vhost-user ADD's result.
pub(super) fn socket_of(result: &Value) -> Option<PathBuf> {
    result["interfaces"][0]["socketPath"]
        .as_str()
        .map(PathBuf::from)
}

impl Testbed {
    /// The bridge wire through the reference `bridge` plugin: a bridge
    /// `cni0` in the wire namespace, a veth from it into each host.
    pub(super) fn wire_bridge_cni(&mut self, id: &str, journal: &Journal) -> Result<(), BedError> {
        let plugins = plugin_dir()?;
        let wire = vnio_topo::Netns::create_with_journal(&format!("vnio-{id}-wire"), journal)?;
        let data = self.scratch.path().join("cni-ipam");
        for host in &mut self.hosts {
            let Some(ns) = &host.netns else {
                return Err(setup(
                    format!("host {}", host.name),
                    "the bridge plugin attaches namespace hosts only",
                ));
            };
            let conf = json!({
                "cniVersion": "1.0.0",
                "name": format!("lab-{id}"),
                "type": "bridge",
                "bridge": "cni0",
                "ipam": ipam(host.addr, &data),
            });
            add(Call {
                plugin: wire.command(Path::new(plugins).join("bridge")),
                container: &format!("{id}-{}", host.name),
                netns: ns.path(),
                cni_path: plugins,
                conf,
            })?;
            host.ifname = Some(POD_IFNAME.into());
        }
        self.description.notes.push(format!(
            "hosts attached by the reference bridge plugin ({plugins}/bridge, host-local IPAM)"
        ));
        self.wire_ns = Some(wire);
        Ok(())
    }
}
